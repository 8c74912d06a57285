"""Megatron's own step bookkeeping (graph/megatron_step.py): the DDP's zeroing, NaN check and pre-scale over the rank's
gradients, and the optimizer wrapper's norm, clip, fp16 unscale and master-to-model copy over its shard, as
Megatron-LM d98e8a6 runs them; the fused Adam itself is 28 B (its 16-bit copy is the wrapper's pass)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.megatron_step import MEGATRON_STEP_OP
from llmperf_hook.graph.step_ops import ADAM_BYTES_PER_PARAM, adam_bytes_per_param
from llmperf_hook.hardware.load import load_cluster

ROOT = Path(__file__).resolve().parents[2]
SHAPE = ["--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "1024",
         "--max-position-embeddings", "1024", "--vocab-size", "32000", "--micro-batch-size", "1",
         "--global-batch-size", "16"]
ENV = {"PATH": "/usr/bin"}


def _step(argv: list[str]):
    cfg = resolve_job(argv, ENV)[1]
    graph = build_graph(cfg, load_cluster("dgx-h100"))
    stage = graph.stages[0]
    ops = {op.name: op for op in stage.step_ops}
    return cfg, stage, ops


def _megatron(*extra: str, gpus: int = 4):
    return _step(["torchrun", "--nproc-per-node", str(gpus), "pretrain_gpt.py", *SHAPE, *extra])


def test_distributed_optimizer_bf16_bytes() -> None:
    """DP 4: per rank parameter N the zeroing (4), NaN norm (4) and 1/4 pre-scale (4 + 4) of fp32 main grads; per
    shard parameter N/4 the clip norm (4) and scale (4 + 4) and the copy to bf16 (4 + 2)."""
    cfg, stage, ops = _megatron("--bf16", "--use-distributed-optimizer")
    n = stage.num_params
    local = ops["optimizer.step"].dims["params"]
    assert local == n // 4
    assert ops[MEGATRON_STEP_OP].bytes_moved == n * (4 + 4 + 8) + local * (4 + 8 + 6)
    assert ops["optimizer.step"].bytes_moved == local * ADAM_BYTES_PER_PARAM == local * 28


@pytest.mark.parametrize(("flags", "gpus", "less_per_rank_param"), [
    (("--no-check-for-nan-in-loss-and-grad",), 4, 4),  # no bucket norm
    (("--ddp-average-in-collective",), 4, 8),  # ReduceOp.AVG, no pre-scale pass
    # factor 1 before the reduction, but finalize_model_grads scales the buffer by 1 / num_tokens after it
    (("--calculate-per-token-loss",), 4, 0),
    (("--calculate-per-token-loss",), 1, -8),  # ... at any dp: a pass that one rank does not run otherwise
])
def test_flags_that_change_a_ddp_pass(flags: tuple[str, ...], gpus: int, less_per_rank_param: int) -> None:
    _, stage, base = _megatron("--bf16", gpus=gpus)
    _, _, ops = _megatron("--bf16", *flags, gpus=gpus)
    dropped = base[MEGATRON_STEP_OP].bytes_moved - ops[MEGATRON_STEP_OP].bytes_moved
    assert dropped == stage.num_params * less_per_rank_param


def test_one_rank_scales_nothing_and_clip_zero_skips_the_norm() -> None:
    _, stage, ops = _megatron("--bf16", gpus=1)
    n = stage.num_params
    assert ops[MEGATRON_STEP_OP].bytes_moved == n * (4 + 4) + n * (4 + 8 + 6)
    _, _, unclipped = _megatron("--bf16", "--clip-grad", "0", gpus=1)
    assert unclipped[MEGATRON_STEP_OP].bytes_moved == n * (4 + 4) + n * 6


def test_fp16_unscales_and_fp32_copies_nothing() -> None:
    _, stage, fp16 = _megatron("--fp16", gpus=1)
    n = stage.num_params
    # fp16 main grads (no --accumulate-allreduce-grads-in-fp32): 2-byte zeroing, no NaN check (dynamic loss scaling:
    # validate_args switches it off), cast to fp32 (2 + 4), unscale (4 + 4), clip (4 + 4 + 4), copy (4 + 2)
    assert fp16[MEGATRON_STEP_OP].bytes_moved == n * 2 + n * (6 + 8 + 12 + 6)
    _, _, static = _megatron("--fp16", "--loss-scale", "4096", gpus=1)  # a static scale keeps the check (2-byte norm)
    assert static[MEGATRON_STEP_OP].bytes_moved == n * (2 + 2) + n * (6 + 8 + 12 + 6)
    _, _, fp32 = _megatron(gpus=1)
    assert fp32[MEGATRON_STEP_OP].bytes_moved == n * (4 + 4) + n * 12


def test_precision_aware_adam_writes_the_model_copy_itself() -> None:
    cfg, stage, ops = _megatron("--bf16", "--use-distributed-optimizer", "--use-precision-aware-optimizer", gpus=1)
    n = stage.num_params
    assert adam_bytes_per_param(cfg) == (ADAM_BYTES_PER_PARAM + 2, "fp32")
    assert ops[MEGATRON_STEP_OP].bytes_moved == n * (4 + 4) + n * 12  # no copy back


def test_cpu_optimizer_keeps_the_ddp_passes_on_the_gpu() -> None:
    """--optimizer-cpu-offload moves the optimizer to the host (HybridDeviceOptimizer), not the DDP's gradient buffers:
    their zeroing, NaN check and 1/4 pre-scale still run on the GPU (param_and_grad_buffer.py)."""
    _, stage, ops = _megatron("--bf16", "--use-distributed-optimizer", "--use-precision-aware-optimizer",
                              "--optimizer-cpu-offload")
    assert ops[MEGATRON_STEP_OP].bytes_moved == stage.num_params * (4 + 4 + 8)


def test_only_megatrons_own_step(tmp_path: Path) -> None:
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "train_batch_size": 16, "bf16": {"enabled": True},
                              "zero_optimization": {"stage": 1}}))
    _, _, mds = _step(["deepspeed", "--num_gpus", "1", "pretrain_gpt.py", "--deepspeed", "--deepspeed_config",
                       str(ds), *SHAPE, "--bf16"])
    assert MEGATRON_STEP_OP not in mds and "optimizer.deepspeed_mixed_precision" in mds
    testbed = str(ROOT / "examples" / "cpu-testbed" / "train_gpt.py")
    _, _, plain = _step(["python", testbed, "--no-pipeline-parallel", *SHAPE, "--bf16"])  # torch AdamW, no Megatron
    assert MEGATRON_STEP_OP not in plain
    _, _, fsdp = _megatron("--bf16", "--use-torch-fsdp2", "--no-gradient-accumulation-fusion",
                           "--untie-embeddings-and-output-weights", "--ckpt-format",
                           "torch_dist")
    assert MEGATRON_STEP_OP not in fsdp


def test_distributed_optimizer_launches_its_copy_per_shard_tensor() -> None:
    """distrib_optimizer.py _copy_main_params_to_model_params: one copy_ per tensor of the rank's shard (DP 4: a
    quarter of the 4-layer model's tensors, plus the one it starts inside), priced as host launches; the
    non-distributed wrapper's copy is one multi_tensor_applier call under fp16, but under bf16 it has no overflow
    buffer (optimizer.py Float16OptimizerWithFloat16Params: `_dummy_overflow_buf = None` if config.bf16) and
    _multi_tensor_copy_this_to_that loops `that_.copy_(this_)` over every tensor; fp32 main grads' .float() launch
    none; 16-bit main grads
    (--no-accumulate-allreduce-grads-in-fp32 style: OptimizerConfig.fp32_main_grads False) add a cast per tensor."""
    from dataclasses import replace

    from llmperf_hook.graph.megatron_step import per_tensor_launches
    from llmperf_hook.graph.param_tensors import model_param_tensors

    cfg, stage, ops = _megatron("--bf16", "--use-distributed-optimizer")
    tensors = model_param_tensors(cfg, 0, stage.num_layers)
    tags = ops[MEGATRON_STEP_OP].tags
    assert int(tags["host_launches"]) == -(-tensors // 4) + 1
    assert float(tags["host_s_per_launch"]) == pytest.approx(5.5e-6)
    assert int(_megatron("--bf16")[2][MEGATRON_STEP_OP].tags["host_launches"]) == tensors
    assert "host_launches" not in _megatron("--fp16", "--accumulate-allreduce-grads-in-fp32")[2][MEGATRON_STEP_OP].tags
    local = ops["optimizer.step"].dims["params"]
    sixteen_bit = replace(cfg, optimizer=replace(cfg.optimizer, fp32_main_grads=False))
    assert per_tensor_launches(sixteen_bit, tensors, stage.num_params, local, 2) == 2 * (-(-tensors // 4) + 1)
    aware = replace(cfg, optimizer=replace(cfg.optimizer, precision_aware=True))
    assert per_tensor_launches(aware, tensors, stage.num_params, local, 4) == 0
