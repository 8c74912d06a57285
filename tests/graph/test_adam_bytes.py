"""Which Adam a job's optimizer step runs, and its bytes (graph/step_ops.adam_bytes_per_param): the framework's fused
Adam (Megatron; DeepSpeed's FusedAdam for an optimizer section), torch.optim over the 16-bit model (a plain-torch bf16
script), or torch.optim over fp32 weights (a DeepSpeed client torch.optim.AdamW or torch_adam: true; a plain-torch
fp32 script). Read from the launch command, the ds_config and the script, as DeepSpeed's engine.py
_configure_basic_optimizer and deepspeed.initialize(optimizer=...) decide."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.graph.step_ops import (ADAM_BYTES_PER_PARAM, TORCH_16BIT_ADAM_BYTES_PER_PARAM,
                                         TORCH_FP32_ADAM_BYTES_PER_PARAM, adam_bytes_per_param)

ROOT = Path(__file__).resolve().parents[2]
TESTBED = str(ROOT / "examples" / "cpu-testbed" / "train_gpt.py")
SHAPE = ["--no-pipeline-parallel", "--num-layers", "2", "--hidden-size", "256", "--num-attention-heads", "4",
         "--seq-length", "128", "--max-position-embeddings", "128", "--vocab-size", "1024", "--micro-batch-size", "1"]
ENV = {"PATH": "/usr/bin"}


def _ds_config(tmp_path: Path, **extra: object) -> str:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 1},
                                "bf16": {"enabled": True}, **extra}))
    return str(path)


def _deepspeed(script: str, ds: str):
    return resolve_job(["deepspeed", "--num_gpus", "1", script, "--deepspeed_config", ds, *SHAPE, "--bf16"], ENV)[1]


def _no_client_script(tmp_path: Path) -> str:
    """A DeepSpeed script taking Megatron-style flags that passes no optimizer: DeepSpeed builds the section's."""
    path = tmp_path / "train.py"
    path.write_text("import deepspeed\nimport torch\nmodel = torch.nn.Linear(4, 4)\n"
                    "engine, opt, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters())\n")
    return str(path)


def test_the_testbed_steps_its_client_torch_adamw_over_the_fp32_partition(tmp_path: Path) -> None:
    cfg = _deepspeed(TESTBED, _ds_config(tmp_path))
    assert cfg.optimizer.torch_optimizer_impl == "foreach"
    assert "train_gpt.py line" in str(cfg.sources["torch_optimizer_impl"])
    assert adam_bytes_per_param(cfg) == (TORCH_FP32_ADAM_BYTES_PER_PARAM["foreach"], "fp32")


@pytest.mark.parametrize(("section", "impl"), [
    ({"type": "AdamW", "params": {"lr": 1e-4}}, ""),  # FusedAdam
    ({"type": "Adam", "params": {"lr": 1e-4, "torch_adam": True}}, "foreach"),  # torch.optim.AdamW (adam_w_mode)
    ({"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": False}}, ""),
])
def test_an_optimizer_section_builds_fused_adam_unless_torch_adam(tmp_path: Path, section: dict, impl: str) -> None:
    cfg = _deepspeed(_no_client_script(tmp_path), _ds_config(tmp_path, optimizer=section))
    assert cfg.optimizer.torch_optimizer_impl == impl
    expected = TORCH_FP32_ADAM_BYTES_PER_PARAM[impl] if impl else ADAM_BYTES_PER_PARAM
    assert adam_bytes_per_param(cfg) == (expected, "fp32")


def test_a_megatron_deepspeed_entry_point_runs_its_own_fused_adam(tmp_path: Path) -> None:
    argv = ["deepspeed", "--num_gpus", "1", "pretrain_gpt.py", "--deepspeed", "--deepspeed_config",
            _ds_config(tmp_path), *SHAPE, "--bf16"]
    cfg = resolve_job(argv, ENV)[1]
    assert cfg.framework == "megatron-deepspeed" and cfg.optimizer.torch_optimizer_impl == ""
    assert adam_bytes_per_param(cfg) == (ADAM_BYTES_PER_PARAM, "fp32")


@pytest.mark.parametrize(("precision", "expected"), [
    ([], (TORCH_FP32_ADAM_BYTES_PER_PARAM["foreach"], "fp32")),  # fp32 model, torch AdamW over it
    (["--bf16"], (TORCH_16BIT_ADAM_BYTES_PER_PARAM["foreach"], "bf16")),  # cast model, no master weights
])
def test_plain_torch_steps_torch_adamw_in_the_model_dtype(precision: list[str], expected: tuple) -> None:
    cfg = resolve_job(["python", TESTBED, *SHAPE, *precision], ENV)[1]
    assert adam_bytes_per_param(cfg) == expected


def test_megatron_runs_its_fused_adam() -> None:
    cfg = resolve_job(["torchrun", "pretrain_gpt.py", *SHAPE, "--bf16"], ENV)[1]
    assert cfg.optimizer.torch_optimizer_impl == ""
    assert adam_bytes_per_param(cfg) == (ADAM_BYTES_PER_PARAM, "fp32")


def test_deepspeed_fused_adam_counts_the_bf16_copy_once(tmp_path: Path) -> None:
    """DeepSpeed's FusedAdam steps [g, p, m, v] (ops/adam/fused_adam.py multi_tensor_adam: read 4 x 4, write 3 x 4 =
    28 B); the fp32 -> bf16 copy of the partition is ZeRO's (stage_1_and_2.py step: bit16_partitions[...].copy_),
    measured inside DEEPSPEED_MP_BYTES_PER_PARAM (the step beyond a plain-torch one, Adam excluded). Until session
    22 the Adam op also counted the copy's 2 B write: 30 + 87.5 B per parameter instead of 28 + 87.5."""
    from llmperf_hook.graph.build import build_graph
    from llmperf_hook.graph.step_ops import DEEPSPEED_MP_BYTES_PER_PARAM
    from llmperf_hook.hardware.load import load_cluster

    cfg = _deepspeed(_no_client_script(tmp_path), _ds_config(tmp_path, optimizer={"type": "AdamW", "params": {}}))
    ops = {op.name: op for op in build_graph(cfg, load_cluster("dgx-h100")).stages[0].step_ops}
    local = ops["optimizer.step"].dims["params"]
    assert ADAM_BYTES_PER_PARAM == 28
    assert ops["optimizer.step"].bytes_moved == 28 * local
    assert ops["optimizer.deepspeed_mixed_precision"].bytes_moved == DEEPSPEED_MP_BYTES_PER_PARAM[1] * local
