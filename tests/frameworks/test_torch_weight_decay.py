"""The weight-decay pass of a torch.optim Adam step, read from the script (frameworks/torch_weight_decay.py): torch 2.x
_multi_tensor_adam runs AdamW's _foreach_mul_ (decoupled), Adam's _foreach_add into the gradients (l2), or nothing
for weight_decay 0 (Adam's default), and graph/step_ops prices 80 / 84 / 72 B per fp32 parameter."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.frameworks.torch_weight_decay import call_weight_decay
from llmperf_hook.graph.step_ops import adam_bytes_per_param

SHAPE = ["--no-pipeline-parallel", "--num-layers", "2", "--hidden-size", "256", "--num-attention-heads", "4",
         "--seq-length", "128", "--max-position-embeddings", "128", "--vocab-size", "1024", "--micro-batch-size", "1"]
ENV = {"PATH": "/usr/bin"}


@pytest.mark.parametrize(("code", "kind"), [
    ("torch.optim.AdamW(model.parameters(), lr=1e-4)", "decoupled"),  # AdamW's default 1e-2
    ("torch.optim.Adam(model.parameters(), lr=1e-4)", "none"),  # Adam's default 0
    ("torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)", "none"),
    ("torch.optim.Adam(model.parameters(), lr=1e-4, weight_decay=0.1)", "l2"),
    ("torch.optim.Adam(model.parameters(), 1e-4, (0.9, 0.95), 1e-8, 0.1)", "l2"),  # fifth positional argument
    ("torch.optim.Adam(model.parameters(), weight_decay=0.1, decoupled_weight_decay=True)", "decoupled"),
    ("torch.optim.Adam(model.parameters(), weight_decay=args.wd)", "l2"),  # computed: taken as on
    ("torch.optim.AdamW([{'params': a, 'weight_decay': 0.1}, {'params': b, 'weight_decay': 0.0}])", "decoupled"),
    ("torch.optim.AdamW([{'params': a, 'weight_decay': 0.0}, {'params': b, 'weight_decay': 0.0}])", "none"),
    # a group without its own weight_decay takes the optimizer's: AdamW's default 1e-2, or the keyword
    ("torch.optim.AdamW([{'params': a}, {'params': b, 'weight_decay': 0.0}])", "decoupled"),
    ("torch.optim.AdamW([{'params': a}, {'params': b, 'weight_decay': 0.0}], weight_decay=0.0)", "none"),
])
def test_call_weight_decay(code: str, kind: str) -> None:
    call = ast.parse(code).body[0].value
    assert call_weight_decay(call, code.split("(")[0].split(".")[-1]) == kind


def _client_script(tmp_path: Path, optimizer: str) -> str:
    path = tmp_path / "train.py"
    path.write_text("import deepspeed\nimport torch\nmodel = torch.nn.Linear(4, 4)\n"
                    f"opt = {optimizer}\n"
                    "engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt)\n")
    return str(path)


def _ds(tmp_path: Path, **extra: object) -> str:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 1},
                                "bf16": {"enabled": True}, **extra}))
    return str(path)


@pytest.mark.parametrize(("optimizer", "nbytes"), [
    ("torch.optim.AdamW(model.parameters(), lr=1e-4)", 80.0),
    ("torch.optim.Adam(model.parameters(), lr=1e-4)", 72.0),
    ("torch.optim.Adam(model.parameters(), lr=1e-4, weight_decay=0.01)", 84.0),
])
def test_deepspeed_client_adam_priced_as_it_runs(tmp_path: Path, optimizer: str, nbytes: float) -> None:
    script = _client_script(tmp_path, optimizer)
    cfg = resolve_job(["deepspeed", "--num_gpus", "1", script, "--deepspeed_config", _ds(tmp_path), *SHAPE,
                       "--bf16"], ENV)[1]
    assert adam_bytes_per_param(cfg) == (nbytes, "fp32")
    assert "train.py line" in str(cfg.sources["torch_weight_decay"])


@pytest.mark.parametrize(("params", "nbytes"), [
    ({"torch_adam": True}, 80.0),  # adam_w_mode default True: torch.optim.AdamW, default decay
    ({"torch_adam": True, "adam_w_mode": False}, 72.0),  # torch.optim.Adam, no decay
    ({"torch_adam": True, "adam_w_mode": False, "weight_decay": 0.1}, 84.0),
    ({"torch_adam": True, "weight_decay": 0.0}, 72.0),
])
def test_torch_adam_section(tmp_path: Path, params: dict, nbytes: float) -> None:
    script = tmp_path / "plain.py"
    script.write_text("import deepspeed\nimport torch\nmodel = torch.nn.Linear(4, 4)\n"
                      "engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters())\n")
    ds = _ds(tmp_path, optimizer={"type": "Adam", "params": {"lr": 1e-4, **params}})
    cfg = resolve_job(["deepspeed", "--num_gpus", "1", str(script), "--deepspeed_config", ds, *SHAPE, "--bf16"], ENV)[1]
    assert adam_bytes_per_param(cfg) == (nbytes, "fp32")


def test_plain_bf16_script_without_decay(tmp_path: Path) -> None:
    """A script casting its model to bf16 and stepping torch.optim.Adam (no decay): 18 accesses x 2 B = 36."""
    script = tmp_path / "train.py"
    script.write_text("import torch\nmodel = torch.nn.Linear(4, 4).to(torch.bfloat16)\n"
                      "opt = torch.optim.Adam(model.parameters(), lr=1e-4)\n")
    cfg = resolve_job(["python", str(script), *SHAPE, "--bf16"], ENV)[1]
    assert cfg.optimizer.master_weights is False
    assert adam_bytes_per_param(cfg) == (36.0, "bf16")
