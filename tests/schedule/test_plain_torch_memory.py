"""Plain-torch scripts that cast their model to 16 bits and step torch.optim over it (frameworks/script_shape.py
script_training / apply_script_training): weights, gradients and Adam states all in the model's dtype, 8 bytes per
parameter, not Megatron's 18. Measured: run c08 of measurements/h100-sxm5-80gb-2026-11-26 (examples/cpu-testbed/
train_gpt.py --bf16, torch AdamW on a .to(torch.bfloat16) model) peaked at 16.64 GB allocated + context; priced with
18 bytes per parameter it was predicted at 23.99 GB (+44 %)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.frameworks.script_shape import apply_script_training, script_training
from llmperf_hook.graph.build import build_graph
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.schedule.memory import state_bytes

ROOT = Path(__file__).resolve().parents[2]
TESTBED = ROOT / "examples" / "cpu-testbed" / "train_gpt.py"
C08_ARGS = ["--num-layers", "12", "--hidden-size", "2048", "--num-attention-heads", "16", "--seq-length", "2048",
            "--max-position-embeddings", "2048", "--micro-batch-size", "4", "--global-batch-size", "4",
            "--vocab-size", "50304", "--train-iters", "16"]
ENV = {"PATH": "/usr/bin"}


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "train.py"
    path.write_text("import torch\nfrom torch import nn\n" + body)
    return str(path)


def test_the_testbed_casts_its_model_and_steps_torch_adamw() -> None:
    found = script_training(str(TESTBED))
    assert found is not None and (found.optimizer, found.impl) == ("adam", "foreach")


@pytest.mark.parametrize(("body", "expected"), [
    ("model = nn.Linear(4, 4).half()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n", ("sgd", "sgd")),
    ("from torch.optim import AdamW\nm = nn.Linear(4, 4)\nm = m.to(dtype=torch.bfloat16)\n"
     "opt = AdamW(m.parameters(), fused=True)\n", ("adam", "fused")),
    ("m = nn.Linear(4, 4)\nx = torch.ones(4).to(torch.bfloat16)\nopt = torch.optim.AdamW(m.parameters())\n", None),
    ("from transformers import AutoModelForCausalLM\nm = AutoModelForCausalLM.from_pretrained('x', torch_dtype=torch.bfloat16)\n"
     "opt = torch.optim.AdamW(m.parameters(), lr=1e-5)\n", ("adam", "foreach")),
    ("m = nn.Linear(4, 4)\nopt = torch.optim.AdamW(m.parameters())\nwith torch.autocast('cuda', dtype=torch.bfloat16):\n"
     "    y = m(torch.ones(4))\n", None),
    ("from torch.optim import AdamW as AW\nm = nn.Linear(4, 4).half()\nopt = AW(m.parameters())\n", ("adam", "foreach")),
    ("from mylib import AdamW\nm = nn.Linear(4, 4).half()\nopt = AdamW(m.parameters())\n", None),
    ("this is not python (\n", None),
])
def test_script_training_reads_the_cast_and_the_optimizer(tmp_path: Path, body: str, expected: tuple | None) -> None:
    found = script_training(_script(tmp_path, body))
    assert (found and (found.optimizer, found.impl)) == expected if expected else found is None


def _c08(extra: tuple[str, ...] = ("--bf16",)):
    """The c08 command as resolved, priced the Megatron way (what resolve_job gives before it applies
    apply_script_training, and what that function starts from)."""
    job, cfg = resolve_job(["python3", str(TESTBED), *C08_ARGS, *extra], ENV)
    megatron = replace(cfg.optimizer, master_weights=True, fp32_main_grads=True, torch_optimizer_impl="")
    return job, replace(cfg, optimizer=megatron) if cfg.framework == "megatron" else cfg


def test_a_bf16_torch_adamw_run_holds_8_bytes_per_parameter() -> None:
    job, cfg = _c08()
    pure = apply_script_training(cfg, job.script)
    assert (pure.optimizer.master_weights, pure.optimizer.fp32_main_grads) == (False, False)
    assert "line" in pure.sources["master_weights"].detail
    stage = build_graph(pure, load_cluster("dgx-h100")).stages[0]
    parts = state_bytes(pure, stage, 8)
    n = stage.num_params
    assert parts["weights"] == parts["gradients"] == 2 * n and parts["optimizer_states"] == 4 * n
    before = state_bytes(cfg, build_graph(cfg, load_cluster("dgx-h100")).stages[0], 8)
    assert sum(before.values()) == 18 * n  # Megatron's mixed precision: 2 + 4 + 12


def test_fp32_runs_deepspeed_and_megatron_entry_points_are_left_alone() -> None:
    job, cfg = _c08(extra=())  # no --bf16: fp32, the cast is not reached; only its step is named torch's AdamW
    assert apply_script_training(cfg, job.script).optimizer == replace(cfg.optimizer, torch_optimizer_impl="foreach")
    job, cfg = _c08(extra=("--bf16", "--deepspeed_config", str(TESTBED.parent / "ds_zero1.json")))
    assert apply_script_training(cfg, job.script) == cfg
    job, cfg = _c08()
    assert apply_script_training(cfg, "pretrain_gpt.py") == cfg


def test_resolve_job_prices_the_script_it_reads() -> None:
    cfg = resolve_job(["python3", str(TESTBED), *C08_ARGS, "--bf16"], ENV)[1]
    assert not cfg.optimizer.master_weights


def test_the_step_streams_16_bit_states_as_torch_foreach_adamw_does() -> None:
    from llmperf_hook.graph.step_ops import ADAM_BYTES_PER_PARAM, TORCH_16BIT_ADAM_BYTES_PER_PARAM

    job, cfg = _c08()
    pure = apply_script_training(cfg, job.script)

    def step(c):
        (op,) = [op for op in build_graph(c, load_cluster("dgx-h100")).stages[0].step_ops if op.op_class == "optimizer"]
        return op

    n = build_graph(cfg, load_cluster("dgx-h100")).stages[0].num_params
    assert step(cfg).bytes_moved == ADAM_BYTES_PER_PARAM * n
    assert (step(pure).bytes_moved, step(pure).dtype) == (TORCH_16BIT_ADAM_BYTES_PER_PARAM["foreach"] * n, "bf16")
