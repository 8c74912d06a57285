"""DeepSpeed's PipelineEngine sends pipeline activations in 1/TP slices and all-gathers them on the receiver."""

from __future__ import annotations

import dataclasses

import pytest

from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.sample_configs import make_config
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.predict.alpha_beta import collective_time_s


def _graph(tp: int, engine: bool, sequence_parallel: bool = False):  # type: ignore[no-untyped-def]
    cfg = make_config(num_layers=8, hidden_size=4096, num_attention_heads=32, seq_length=2048, tp=tp, pp=4, dp=4,
                      micro_batch_size=2, precision="fp16", framework="megatron-deepspeed",
                      sequence_parallel=sequence_parallel)
    return build_graph(dataclasses.replace(cfg, deepspeed_pipeline_engine=engine), load_cluster("vtrain-a100"))


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_pipeline_engine_sends_one_tp_slice_and_gathers_the_rest(tp: int) -> None:
    whole = 2 * 2048 * 4096 * 2  # micro-batch x seq x hidden x fp16 bytes
    plain, engine = _graph(tp, engine=False), _graph(tp, engine=True)
    assert plain.p2p is not None and plain.p2p.dims["bytes"] == whole and plain.p2p_gather is None
    assert engine.p2p is not None and engine.p2p.dims["bytes"] == whole // tp
    gather = engine.p2p_gather
    assert gather is not None and gather.op_class == "allgather" and gather.dims["bytes"] == whole
    assert gather.collective is not None and gather.collective.group == "tp" and gather.collective.group_size == tp
    assert gather in engine.all_ops()


def test_whole_sends_when_the_ds_config_turns_partitioning_off() -> None:
    """pipeline.pipe_partitioned / grad_partitioned false: the engine sends whole tensors, nothing to gather."""
    cfg = _graph(4, engine=False)  # the same shape through the engine with partitioning off prices as plain p2p
    off = build_graph(dataclasses.replace(
        make_config(num_layers=8, hidden_size=4096, num_attention_heads=32, seq_length=2048, tp=4, pp=4, dp=4,
                    micro_batch_size=2, precision="fp16", framework="megatron-deepspeed"),
        deepspeed_pipeline_engine=True, deepspeed_pipe_partitioned=False), load_cluster("vtrain-a100"))
    assert off.p2p is not None and cfg.p2p is not None and off.p2p.dims == cfg.p2p.dims and off.p2p_gather is None


def test_partitioned_send_is_cheaper_across_nodes() -> None:
    # Adjacent stages are tp*dp = 32 ranks apart: the send crosses the network, the gather stays on NVLink.
    cluster = load_cluster("vtrain-a100")
    plain, engine = _graph(8, engine=False), _graph(8, engine=True)
    assert plain.p2p is not None and engine.p2p is not None and engine.p2p_gather is not None
    partitioned = collective_time_s(engine.p2p, cluster) + collective_time_s(engine.p2p_gather, cluster)
    assert partitioned < 0.5 * collective_time_s(plain.p2p, cluster)


def test_no_gather_without_model_parallelism_or_pipeline() -> None:
    assert _graph(1, engine=True).p2p_gather is None
    cfg = make_config(num_layers=4, hidden_size=1024, num_attention_heads=16, tp=2, framework="megatron-deepspeed")
    graph = build_graph(dataclasses.replace(cfg, deepspeed_pipeline_engine=True), load_cluster("vtrain-a100"))
    assert graph.p2p is None and graph.p2p_gather is None


def test_stages_rebuild_their_slices_on_their_own_stream() -> None:
    from llmperf_hook.schedule.compose import PassCost, _with_partition_gathers

    def passes() -> list[list[PassCost]]:
        return [[PassCost(1.0, 1.0, 0.0, {})] for _ in range(3)]

    fwd, bwd = _with_partition_gathers(passes(), passes(), 0.1)
    # Forward: every stage but the first gathers what it received.
    assert [row[0].total_s for row in fwd] == pytest.approx([1.0, 1.1, 1.1])
    # Backward: every stage but the last gathers its own cleared output and the received gradient.
    assert [row[0].total_s for row in bwd] == pytest.approx([1.2, 1.2, 1.0])
    assert bwd[0][0].exposed_comm_s == {"pp_gather": pytest.approx(0.2)}
