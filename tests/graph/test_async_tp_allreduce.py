"""Megatron-LM's async grad-input all-reduce without sequence parallelism: a column-parallel linear's backward
all-reduces its input gradient beside its weight-grad GEMM (LinearWithGradAccumulationAndAsyncCommunication /
TE's Linear), when the job runs it (Megatron-LM, which ignores --no-async-tensor-model-parallel-allreduce; not
Megatron-DeepSpeed under --deepspeed) with kernels in launch order (CUDA_DEVICE_MAX_CONNECTIONS=1, or Blackwell)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmperf_hook.graph.op import Op

COMMAND = ["torchrun", "--nnodes", "4", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "4",
           "--hidden-size", "4096", "--num-attention-heads", "32", "--seq-length", "2048",
           "--max-position-embeddings", "2048", "--micro-batch-size", "2", "--global-batch-size", "64",
           "--tensor-model-parallel-size", "8", "--bf16"]


def _predict(extra: tuple[str, ...] = (), env: dict[str, str] | None = None):
    from llmperf_hook import api

    return api.predict_command(COMMAND + list(extra), env or {}, cluster="dgx-a100")


def _layer(cfg) -> tuple[list[Op], list[Op]]:
    from llmperf_hook.graph.build import build_graph
    from llmperf_hook.hardware.load import load_cluster

    blocks = build_graph(cfg, load_cluster("dgx-a100")).stages[0].chunks[0].blocks
    layer = next(b for b in blocks if b.name.startswith("dense_layer"))
    return list(layer.fwd), list(layer.bwd)


def _bwd_reduces(cfg) -> list[Op]:
    return [op for op in _layer(cfg)[1] if op.op_class == "allreduce" and op.collective.group == "tp"]


def test_megatron_lm_overlaps_each_grad_input_all_reduce_with_its_column_linears_wgrad() -> None:
    cfg = _predict().config
    assert cfg.async_tp_allreduce and cfg.tp_comm_ordered
    reduces = _bwd_reduces(cfg)
    assert [op.tags["window"] for op in reduces] == ["mlp.fc1", "attn.qkv"]  # backward order: MLP first
    for op in reduces:
        assert op.tags["overlap"] == "wgrad" and "dgrad" not in op.tags
        assert float(op.tags["sm_share"]) == pytest.approx(24 / 108, abs=1e-4)  # in-node NCCL ring on an A100
    fwd = _layer(cfg)[0]
    assert {op.dims["bytes"] for op in reduces} == {op.dims["bytes"] for op in fwd if op.op_class == "allreduce"}


def test_no_overlap_without_launch_order_before_blackwell() -> None:
    reduces = _bwd_reduces(_predict((), {"CUDA_DEVICE_MAX_CONNECTIONS": "8"}).config)
    assert len(reduces) == 2 and all("overlap" not in op.tags and "window" not in op.tags for op in reduces)


def test_the_deprecated_no_async_flag_changes_nothing() -> None:
    # Megatron-LM 5fffdfc737 (2024-04-29): 'DEPRECATED. This flag is ignored.'; Megatron-Core always runs it async.
    given = _predict(("--no-async-tensor-model-parallel-allreduce",))
    assert given.config.async_tp_allreduce
    assert [op.tags.get("window") for op in _bwd_reduces(given.config)] == ["mlp.fc1", "attn.qkv"]
    assert given.estimate.step_time_s == pytest.approx(_predict().estimate.step_time_s)
    assert sum("--no-async-tensor-model-parallel-allreduce" in w for w in given.warnings) == 1


def test_megatron_deepspeed_and_sequence_parallel_run_no_async_all_reduce() -> None:
    from llmperf_hook.graph.sample_configs import make_config

    mds = make_config(num_layers=2, hidden_size=2048, num_attention_heads=16, tp=4, framework="megatron-deepspeed")
    assert not mds.async_tp_allreduce
    assert all("overlap" not in op.tags for op in _bwd_reduces(mds))
    sp = _predict(("--sequence-parallel",)).config
    assert sp.async_tp_allreduce and not _bwd_reduces(sp)  # SP reduce-scatters instead (sp_column_backward)


def test_async_all_reduce_hides_behind_the_wgrad_half_and_costs_its_sm_share() -> None:
    from llmperf_hook.predict.dispatch import op_id, predict_op_times
    from llmperf_hook.graph.build import build_graph
    from llmperf_hook.hardware.load import load_cluster
    from llmperf_hook.schedule.compose import block_pass

    cfg = _predict().config
    serial = replace(cfg, async_tp_allreduce=False)
    cluster = load_cluster("dgx-a100")
    graph, serial_graph = build_graph(cfg, cluster), build_graph(serial, cluster)
    seconds = dict(predict_op_times(graph, cluster, cfg.precision).seconds)
    seconds.update(predict_op_times(serial_graph, cluster, cfg.precision).seconds)
    block = next(b for b in graph.stages[0].chunks[0].blocks if b.name.startswith("dense_layer"))
    serial_block = next(b for b in serial_graph.stages[0].chunks[0].blocks if b.name.startswith("dense_layer"))
    overlapped, serialized = block_pass(block.bwd, seconds, False), block_pass(serial_block.bwd, seconds, False)
    gemm = {op.name: seconds[op_id(op)] for op in block.bwd if op.op_class == "gemm"}
    expected = 0.0
    for op in _bwd_reduces(cfg):
        comm_s, half_s, share = seconds[op_id(op)], 0.5 * gemm[op.tags["window"]], float(op.tags["sm_share"])
        expected += max(comm_s - half_s, share * comm_s)
    assert overlapped.exposed_comm_s["tp"] == pytest.approx(expected)
    assert serialized.exposed_comm_s["tp"] == pytest.approx(sum(seconds[op_id(op)] for op in _bwd_reduces(serial)))
    assert overlapped.total_s < serialized.total_s
    assert overlapped.compute_s == pytest.approx(serialized.compute_s)
    assert _predict().estimate.step_time_s < _predict((), {"CUDA_DEVICE_MAX_CONNECTIONS": "8"}).estimate.step_time_s
