"""The torch.optim step a script's optimizer call runs (frameworks/torch_step_impl.py) and its bytes per parameter
(graph/step_ops.torch_step_bytes_per_param): fused=True, amsgrad, SGD with and without momentum / nesterov, for a
DeepSpeed client optimizer and a plain-torch script (torch 2.x torch/optim/adam.py, sgd.py)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.frameworks.torch_step_impl import torch_step_impl
from llmperf_hook.graph.step_ops import adam_bytes_per_param

SHAPE = ["--no-pipeline-parallel", "--num-layers", "2", "--hidden-size", "256", "--num-attention-heads", "4",
         "--seq-length", "128", "--max-position-embeddings", "128", "--vocab-size", "1024", "--micro-batch-size", "1"]
ENV = {"PATH": "/usr/bin"}


@pytest.mark.parametrize(("code", "impl"), [
    ("torch.optim.AdamW(p, lr=1e-4)", "foreach"),
    ("torch.optim.AdamW(p, lr=1e-4, fused=True)", "fused"),
    ("torch.optim.AdamW(p, lr=1e-4, fused=args.fused)", "foreach"),  # not a literal True: torch's default
    ("torch.optim.AdamW(p, lr=1e-4, foreach=False)", "foreach"),  # the single-tensor loop: the same passes
    ("torch.optim.Adam(p, lr=1e-4, amsgrad=True)", "foreach_amsgrad"),
    ("torch.optim.Adam(p, 1e-4, (0.9, 0.95), 1e-8, 0.0, True)", "foreach_amsgrad"),  # sixth positional
    ("torch.optim.AdamW(p, amsgrad=True, fused=True)", "fused_amsgrad"),
    ("torch.optim.SGD(p, lr=0.1)", "sgd"),
    ("torch.optim.SGD(p, lr=0.1, momentum=0.0)", "sgd"),
    ("torch.optim.SGD(p, lr=0.1, momentum=0.9)", "sgd_momentum"),
    ("torch.optim.SGD(p, 0.1, 0.9)", "sgd_momentum"),  # third positional
    ("torch.optim.SGD(p, lr=0.1, momentum=args.momentum)", "sgd_momentum"),  # computed: taken as on
    ("torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True)", "sgd_nesterov"),
    ("torch.optim.SGD(p, lr=0.1, momentum=0.9, fused=True)", "sgd_momentum_fused"),
    ("torch.optim.SGD(p, lr=0.1, fused=True)", "sgd_fused"),
])
def test_step_as_called(code: str, impl: str) -> None:
    call = ast.parse(code).body[0].value
    assert torch_step_impl(call, code.split("(")[0].split(".")[-1]) == impl


def _client(tmp_path: Path, optimizer: str) -> tuple[float, str]:
    script = tmp_path / "train.py"
    script.write_text("import deepspeed\nimport torch\nmodel = torch.nn.Linear(4, 4)\n"
                      f"opt = {optimizer}\n"
                      "engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt)\n")
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 1},
                              "bf16": {"enabled": True}, "zero_allow_untested_optimizer": True}))
    cfg = resolve_job(["deepspeed", "--num_gpus", "1", str(script), "--deepspeed_config", str(ds), *SHAPE, "--bf16"],
                      ENV)[1]
    return adam_bytes_per_param(cfg)[0], cfg.optimizer.name


@pytest.mark.parametrize(("optimizer", "nbytes", "name"), [
    ("torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)", 28.0, "adam"),  # H185/R72: was 80 (foreach)
    ("torch.optim.AdamW(model.parameters(), lr=1e-4, amsgrad=True)", 92.0, "adam"),  # (18 + 3 + 2) x 4
    ("torch.optim.Adam(model.parameters(), lr=1e-4, amsgrad=True, fused=True)", 36.0, "adam"),  # 9 x 4
    ("torch.optim.SGD(model.parameters(), lr=0.1)", 12.0, "sgd"),  # was Adam's foreach 80
    ("torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)", 32.0, "sgd"),
    ("torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)", 44.0, "sgd"),
    ("torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)", 44.0, "sgd"),
])
def test_deepspeed_client_optimizer_priced_as_called(tmp_path: Path, optimizer: str, nbytes: float,
                                                     name: str) -> None:
    assert _client(tmp_path, optimizer) == (nbytes, name)


@pytest.mark.parametrize(("optimizer", "cast", "nbytes", "dtype"), [
    ("torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)", "", 32.0, "fp32"),  # was the fused Adam's 28
    ("torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)", ".to(torch.bfloat16)", 16.0, "bf16"),  # was 40
    ("torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)", ".to(torch.bfloat16)", 14.0, "bf16"),
])
def test_plain_torch_script_priced_as_called(tmp_path: Path, optimizer: str, cast: str, nbytes: float,
                                             dtype: str) -> None:
    script = tmp_path / "train.py"
    script.write_text(f"import torch\nmodel = torch.nn.Linear(4, 4){cast}\nopt = {optimizer}\n")
    cfg = resolve_job(["python", str(script), *SHAPE, *(["--bf16"] if cast else [])], ENV)[1]
    assert adam_bytes_per_param(cfg) == (nbytes, dtype)
