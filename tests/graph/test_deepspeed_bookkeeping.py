"""DeepSpeed's bf16 bookkeeping around the optimizer step (graph/step_ops.deepspeed_mixed_precision)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.api import predict_command
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.step_ops import (DEEPSPEED_ACCUMULATE_BYTES_PER_PARAM, DEEPSPEED_MP_BYTES_PER_PARAM,
                                         DEEPSPEED_REDUCE_BYTES_PER_MICROBATCH)

TRAIN = str(Path(__file__).resolve().parents[2] / "examples" / "cpu-testbed" / "train_gpt.py")
SHAPE = ["--no-pipeline-parallel", "--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "16",
         "--seq-length", "1024", "--max-position-embeddings", "1024", "--vocab-size", "32000"]


def _graph(tmp_path: Path, zero: int, *extra: str):
    cfg_file = tmp_path / f"ds{zero}.json"
    cfg_file.write_text(json.dumps({"zero_optimization": {"stage": zero}}))
    argv = ["deepspeed", "--num_gpus", "1", TRAIN, "--deepspeed_config", str(cfg_file), *SHAPE, *extra]
    pred = predict_command(argv, {}, cluster="dgx-h100")
    return pred, build_graph(pred.config, pred.cluster)


def _bookkeeping(graph):
    return [op for op in graph.stages[0].step_ops if op.op_class == "deepspeed_bookkeeping"]


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_bf16_step_carries_the_bookkeeping_of_its_zero_stage(tmp_path: Path, zero: int) -> None:
    pred, graph = _graph(tmp_path, zero, "--micro-batch-size", "2", "--global-batch-size", "6", "--bf16")
    (op,) = [op for op in _bookkeeping(graph) if op.name == "optimizer.deepspeed_mixed_precision"]
    local = op.dims["params"]
    assert local == graph.stages[0].num_params  # one rank: nothing sharded, the bucket's gradients are the partition
    per_microbatch = DEEPSPEED_ACCUMULATE_BYTES_PER_PARAM + sum(DEEPSPEED_REDUCE_BYTES_PER_MICROBATCH.get(zero, ()))
    per_param = DEEPSPEED_MP_BYTES_PER_PARAM[zero] + 2 * per_microbatch  # 3 micro-batches
    assert op.bytes_moved == pytest.approx(local * per_param)
    # per layer 4 linears and 2 LayerNorms, each a weight and a bias; word + position embeddings, final LayerNorm
    assert op.dims["param_tensors"] == 4 * 12 + 2 + 2  # 148 for the 12 layers of the measured H100 runs
    assert pred.estimate.breakdown["optimizer"] > 0


def test_fp32_has_none(tmp_path: Path) -> None:
    assert not _bookkeeping(_graph(tmp_path, 1, "--micro-batch-size", "2")[1])


def test_zero2_and_3_reduce_every_micro_batch_zero1_once(tmp_path: Path) -> None:
    """Each micro-batch after the first: ZeRO-1 adds its gradients (6 B per parameter); ZeRO-2 also copies them into
    the ipg bucket, divides it and copies it into its partition (+12), ZeRO-3 the bucket copy and the division (+8)
    (H200 kernel tables ds_bf16_zero2 / _accum4: div_ 2 -> 8 calls, copy_ +316 calls per micro-batch)."""
    def extra_bytes_per_param(zero: int) -> float:
        ops = [_bookkeeping(_graph(tmp_path, zero, "--micro-batch-size", "2", "--global-batch-size", gbs, "--bf16")[1])
               for gbs in ("2", "8")]
        one, four = (next(op for op in found if op.name == "optimizer.deepspeed_mixed_precision") for found in ops)
        return (four.bytes_moved - one.bytes_moved) / (3 * one.dims["params"])

    assert extra_bytes_per_param(1) == pytest.approx(6.0)
    assert extra_bytes_per_param(2) == pytest.approx(18.0)
    assert extra_bytes_per_param(3) == pytest.approx(14.0)


@pytest.mark.parametrize("precision", [[], ["--bf16"]])
def test_zero3_hooks_cost_every_tensor_every_micro_batch(tmp_path: Path, precision: list[str]) -> None:
    """graph/zero3_hooks.py: fetch, release and gradient hooks per parameter tensor and micro-batch, in any
    precision; measured on an H200 as the ZeRO-3 step minus the ZeRO-2 step (the bookkeeping kernels apart)."""
    from llmperf_hook.graph.zero3_hooks import ZERO3_HOOK_S_PER_TENSOR

    def hook_s(zero: int, gbs: str) -> float:
        graph = _graph(tmp_path, zero, "--micro-batch-size", "2", "--global-batch-size", gbs, *precision)[1]
        hooks = [op for op in _bookkeeping(graph) if op.name == "zero3.module_hooks"]
        return sum(float(op.tags["host_s"]) for op in hooks)

    assert hook_s(2, "6") == 0.0
    assert hook_s(3, "2") == pytest.approx(52 * ZERO3_HOOK_S_PER_TENSOR)
    assert hook_s(3, "6") == pytest.approx(3 * 52 * ZERO3_HOOK_S_PER_TENSOR)


def test_zero3_step_is_slower_than_zero2(tmp_path: Path) -> None:
    """Measured on one H200 (measurements/h200-sxm-141gb-2026-11-27-b): ZeRO-3 157 ms against ZeRO-2's 113 for one
    micro-batch of the 12 x 2048 testbed GPT. Before the hooks were priced, predict gave ZeRO-3 the faster step."""
    times = {z: _graph(tmp_path, z, "--micro-batch-size", "2", "--bf16")[0].estimate.step_time_s for z in (2, 3)}
    assert times[3] > times[2]


def test_zero0_bf16_keeps_fp32_gradients(tmp_path: Path) -> None:
    """bf16 without ZeRO and with the release's bf16 accumulation is DDP_BFLOAT16 (engine.py
    _do_optimizer_sanity_check), FP16_Optimizer over bf16: the bf16 gradients and the fp32 flat copy its step makes
    (fp16/fused_optimizer.py), 2 + 4 B per parameter of model state. Both are freed at every step (zero_grad:
    p.grad = None), so one micro-batch's backward peak holds none of them (schedule/gradient_lifetime.py)."""
    from llmperf_hook.schedule.memory import state_bytes

    pred, graph = _graph(tmp_path, 0, "--micro-batch-size", "2", "--bf16")
    assert state_bytes(pred.config, graph.stages[0], 1)["gradients"] == pytest.approx(graph.stages[0].num_params * 6)
    assert pred.estimate.memory.components["gradients"] == 0


def test_fp16_zero0_runs_the_flat_fp16_optimizer(tmp_path: Path) -> None:
    """ZeRO-0 fp16 is FP16_Optimizer on flat buffers: fewer bytes than bf16's per-tensor optimizer, no host stalls."""
    from llmperf_hook.graph.step_ops import DEEPSPEED_FP16_ZERO0_BYTES_PER_PARAM

    (op,) = _bookkeeping(_graph(tmp_path, 0, "--micro-batch-size", "2", "--fp16")[1])
    assert op.bytes_moved == pytest.approx(op.dims["params"] * DEEPSPEED_FP16_ZERO0_BYTES_PER_PARAM)
    assert "host_s" not in op.tags


def test_bookkeeping_is_reported_with_the_optimizer_and_never_overlapped(tmp_path: Path) -> None:
    """It runs inside the optimizer step: counted there, not as gradient sync (which overlap_comm may hide)."""
    from llmperf_hook.predict.dispatch import op_id, predict_op_times
    from llmperf_hook.schedule.compose import step_ops_cost

    pred, graph = _graph(tmp_path, 1, "--micro-batch-size", "2", "--bf16")
    times = predict_op_times(graph, pred.cluster, "bf16")
    cost = step_ops_cost(graph.stages[0], dict(times.seconds), pred.config, 1.0, 1.0)
    expected = sum(times.seconds[op_id(op)] for op in graph.stages[0].step_ops
                   if op.op_class in ("optimizer", "deepspeed_bookkeeping"))
    assert cost.optimizer_s == pytest.approx(expected) and cost.grad_total_s == 0.0  # one rank: no sync


def test_zero3_hooks_price_hf_deepspeed_and_not_fsdp(tmp_path: Path) -> None:
    """The Trainer's --deepspeed (framework 'hf-deepspeed') runs DeepSpeed's ZeRO-3 hooks; FSDP full_shard, also
    ZeRO stage 3 in the config, runs torch's FSDP and none of them."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 1024, "intermediate_size": 2816, "num_attention_heads": 16,
        "num_key_value_heads": 16, "num_hidden_layers": 4, "vocab_size": 32000, "max_position_embeddings": 1024}))
    ds = tmp_path / "ds3.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 3}, "bf16": {"enabled": True},
                              "train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto"}))
    common = ["run_clm.py", "--model_name_or_path", str(model), "--per_device_train_batch_size", "1",
              "--block_size", "1024", "--bf16", "--do_train", "--output_dir", str(tmp_path / "out")]
    hooks: dict[str, list] = {}
    for argv in (["deepspeed", "--num_gpus", "8", *common, "--deepspeed", str(ds)],
                 ["torchrun", "--nproc-per-node", "8", *common, "--fsdp", "full_shard auto_wrap"]):
        pred = predict_command(argv, {}, cluster="dgx-h100")
        graph = build_graph(pred.config, pred.cluster)
        assert pred.config.optimizer.zero_stage == 3
        hooks[pred.config.framework] = [op for op in _bookkeeping(graph) if op.name == "zero3.module_hooks"]
    assert len(hooks["hf-deepspeed"]) == 1 and hooks["torch"] == []
