"""DeepSpeed ZeRO-Infinity's NVMe traffic in the graph (graph/nvme_swap_ops.py) and its price at the host's NVMe
bandwidth (predict/roofline.nvme_swap_s, ClusterSpec.nvme_*): the optimizer's sub-groups swapped in and out around
the step (stage3.py _optimizer_states_and_gradient_swap_in / _out), the parameter partitions read before each fetch
and written back after the step (AsyncPartitionedParameterSwapper)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.sample_configs import make_config
from llmperf_hook.graph.zero3_trace import rank_fetched_elems
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.predict.roofline import RooflinePredictor

DGX = load_cluster("dgx-a100")


def _cfg(optimizer: str = "nvme", param: str = "none", **opt: object):
    return make_config(num_layers=8, hidden_size=2048, num_attention_heads=16, dp=8, framework="hf-deepspeed",
                       optimizer_kw=dict(zero_stage=3, offload_optimizer=optimizer, offload_param=param,
                                     fp32_main_grads=False, **opt))


def _swaps(graph):
    return [op for op in graph.stages[0].step_ops if op.op_class == "nvme_swap"]


def test_optimizer_swaps_16_bytes_each_way_per_offloaded_parameter() -> None:
    cfg = _cfg()
    graph = build_graph(cfg, DGX)
    local = graph.stages[0].num_params // 8
    (swap,) = _swaps(graph)
    assert (swap.dims["read_bytes"], swap.dims["write_bytes"], swap.dims["ranks_per_host"]) == \
        (16 * local, 16 * local, 8)
    # the 8 ranks of the host share its drives: 8 x 16 B x local at 10 GB/s read, 5 GB/s write
    (seconds,) = RooflinePredictor().predict_s([swap], DGX)
    assert seconds == pytest.approx(8 * 16 * local / 10e9 + 8 * 16 * local / 5e9)
    faster = replace(DGX, nvme_read_bytes_per_s=20e9, nvme_write_bytes_per_s=10e9)
    assert RooflinePredictor().predict_s([swap], faster)[0] == pytest.approx(seconds / 2)
    assert not _swaps(build_graph(_cfg("cpu"), DGX))  # host memory: no NVMe traffic


def test_one_state_optimizer_swaps_12_bytes_each_way() -> None:
    """Adagrad / Lion keep one state tensor in optimizer.state[param]: master + state + gradient = 12 B."""
    graph = build_graph(_cfg(name="sgd"), DGX)
    local = graph.stages[0].num_params // 8
    (swap,) = _swaps(graph)
    assert (swap.dims["read_bytes"], swap.dims["write_bytes"]) == (12 * local, 12 * local)


def test_partial_offload_swaps_only_its_share() -> None:
    half = _cfg(offload_optimizer_ratio=0.5, sub_group_size_elems=1_000_000)
    whole = _cfg(sub_group_size_elems=1_000_000)
    ratio = _swaps(build_graph(half, DGX))[0].dims["read_bytes"] / _swaps(build_graph(whole, DGX))[0].dims["read_bytes"]
    assert ratio == pytest.approx(0.5, abs=0.01)


def test_parameter_partitions_are_read_before_each_fetch_and_written_after_the_step() -> None:
    """max_in_cpu 0: no partition is kept in host memory, every fetch reads from NVMe."""
    cfg = _cfg("none", "nvme", stage3_max_reuse_distance=0, nvme_param_max_in_cpu_elems=0)
    graph = build_graph(cfg, DGX)
    layer = next(b for b in graph.stages[0].chunks[0].blocks if b.name == "dense_layer")
    reads = [op for op in layer.fwd + layer.bwd if op.name == "zero3.param_nvme_read"]
    copies = [op for op in layer.fwd + layer.bwd if op.name == "zero3.param_h2d_copy"]
    assert [r.dims["read_bytes"] for r in reads] == [c.dims["bytes"] for c in copies] and len(reads) == 2
    assert all(r.tags.get("overlap") == "param_gather" for r in reads)  # prefetched ahead (default bucket)
    local = graph.stages[0].num_params // 8
    assert _swaps(graph)[0].dims == {"read_bytes": 0, "write_bytes": 2 * local, "ranks_per_host": 8}
    lazy = build_graph(replace(cfg, optimizer=replace(cfg.optimizer, stage3_prefetch_bucket_size_elems=0)), DGX)
    layer = next(b for b in lazy.stages[0].chunks[0].blocks if b.name == "dense_layer")
    assert all("overlap" not in op.tags for op in layer.fwd if op.name == "zero3.param_nvme_read")


def test_partitions_within_max_in_cpu_stay_in_host_memory() -> None:
    """offload_param.max_in_cpu (1e9 by default): the first that many elements of a rank's partition are moved to
    host memory for good when the optimizer is built (stage3.py _create_param_groups_fp16_flat_cpu_memory), so
    only the rest is read before a fetch and written back after the step. This rank's partition (~50 M elements)
    lies all within the default; a limit of a quarter of it leaves three quarters on NVMe."""
    def traffic(max_in_cpu: int) -> tuple[float, float]:
        cfg = _cfg("none", "nvme", stage3_max_reuse_distance=0, nvme_param_max_in_cpu_elems=max_in_cpu)
        graph = build_graph(cfg, DGX)
        layer = next(b for b in graph.stages[0].chunks[0].blocks if b.name == "dense_layer")
        reads = sum(op.dims["read_bytes"] for op in layer.fwd + layer.bwd if op.name == "zero3.param_nvme_read")
        return reads, sum(op.dims["write_bytes"] for op in _swaps(graph))

    everything = traffic(0)
    assert traffic(1_000_000_000) == (0, 0)
    partition = rank_fetched_elems(_cfg(), 0) / 8
    quarter = traffic(int(partition / 4))
    assert quarter[0] == pytest.approx(0.75 * everything[0], rel=1e-3)
    assert quarter[1] == pytest.approx(0.75 * everything[1], rel=0.01)  # the step's partition counts the norms too


def test_nvme_swaps_make_the_step_slower_than_cpu_offload() -> None:
    from llmperf_hook.api import predict_config

    cpu = predict_config(_cfg("cpu", "cpu"), DGX)
    nvme = predict_config(_cfg("nvme", "nvme"), DGX)
    assert nvme.step_time_s > cpu.step_time_s
    assert nvme.breakdown["optimizer"] > cpu.breakdown["optimizer"]
