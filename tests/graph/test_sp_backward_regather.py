"""Megatron's sequence-parallel column-parallel linear in backward: the input is all-gathered again beside the
grad-input GEMM and the grad input reduce-scattered beside the weight-grad GEMM
(LinearWithGradAccumulationAndAsyncCommunication.backward)."""

from __future__ import annotations

import pytest

from llmperf_hook.graph.backward import SP_REGATHER_SUFFIX, nccl_sm_share
from llmperf_hook.graph.op import Op


def _layer(sequence_parallel: bool, cluster: str = "dgx-a100", tp: int = 8, **opt) -> tuple[list[Op], list[Op]]:
    from llmperf_hook.graph.build import build_graph
    from llmperf_hook.graph.sample_configs import make_config
    from llmperf_hook.hardware.load import load_cluster

    cfg = make_config(num_layers=2, hidden_size=2048, num_attention_heads=16, seq_length=2048, tp=tp,
                      sequence_parallel=sequence_parallel, micro_batch_size=2, optimizer_kw=opt or None)
    blocks = build_graph(cfg, load_cluster(cluster)).stages[0].chunks[0].blocks
    layer = next(b for b in blocks if b.name.startswith("dense_layer"))
    return list(layer.fwd), list(layer.bwd)


def _names(ops: list[Op]) -> list[str]:
    return [f"{op.name}:{op.op_class}" for op in ops]


def test_column_parallel_backward_is_regather_gemm_reduce_scatter() -> None:
    fwd, bwd = _layer(sequence_parallel=True)
    names = _names(bwd)
    for gather, gemm in (("attn.tp_allgather", "attn.qkv"), ("mlp.tp_allgather", "mlp.fc1")):
        i = names.index(f"{gemm}:gemm")
        assert names[i - 1] == f"{gather}{SP_REGATHER_SUFFIX}:allgather"
        assert names[i + 1] == f"{gather}:reducescatter"
        regather, reduce = bwd[i - 1], bwd[i + 1]
        assert regather.tags["overlap"] == "dgrad" and reduce.tags["overlap"] == "wgrad"
        assert regather.tags["window"] == gemm == reduce.tags["window"]
        fwd_gather = next(op for op in fwd if op.name == gather)
        # The re-gather gathers the same T x h the forward gathered; the reduce-scatter scatters its gradient.
        assert regather.dims["bytes"] == fwd_gather.dims["bytes"] == reduce.dims["bytes"]
        assert regather.phase == reduce.phase == "bwd"


def test_row_parallel_backward_gather_stays_synchronous() -> None:
    _, bwd = _layer(sequence_parallel=True)
    grads = [op for op in bwd if op.name in ("attn.tp_reduce", "mlp.tp_reduce")]
    assert [op.op_class for op in grads] == ["allgather", "allgather"]
    assert all("overlap" not in op.tags for op in grads)


def test_one_more_gather_per_column_linear_than_before() -> None:
    fwd, bwd = _layer(sequence_parallel=True)
    fwd_comm = [op for op in fwd if op.collective is not None]
    bwd_comm = [op for op in bwd if op.collective is not None and op.phase == "bwd"]
    # Forward: 2 all-gathers + 2 reduce-scatters; backward: those mirrored plus one re-gather per gathered GEMM.
    assert len(bwd_comm) == len(fwd_comm) + 2


def test_without_sequence_parallelism_nothing_is_regathered() -> None:
    _, bwd = _layer(sequence_parallel=False)
    assert not any(op.name.endswith(SP_REGATHER_SUFFIX) for op in bwd)
    assert not any(op.tags.get("overlap") in ("dgrad", "wgrad") for op in bwd)


def test_lm_head_input_is_regathered_too() -> None:
    from llmperf_hook.graph.build import build_graph
    from llmperf_hook.graph.sample_configs import make_config
    from llmperf_hook.hardware.load import load_cluster

    cfg = make_config(num_layers=2, hidden_size=2048, num_attention_heads=16, tp=8, sequence_parallel=True)
    head = next(b for b in build_graph(cfg, load_cluster("dgx-a100")).stages[0].chunks[0].blocks if b.name == "head")
    assert "head.tp_allgather" + SP_REGATHER_SUFFIX in [op.name for op in head.bwd]


def test_sm_share_is_nccls_24_ring_blocks_of_the_gpus_sms() -> None:
    from dataclasses import replace

    from llmperf_hook.hardware.load import load_hardware

    assert nccl_sm_share(load_hardware("a100-sxm4-80gb")) == pytest.approx(24 / 108)
    assert nccl_sm_share(load_hardware("h100-sxm5-80gb")) == pytest.approx(24 / 132)
    assert nccl_sm_share(load_hardware("gb200-186gb")) == pytest.approx(24 / 148)
    assert nccl_sm_share(load_hardware("a100-pcie-80gb")) == 0.0 and nccl_sm_share(load_hardware("mi300x-192gb")) == 0.0
    # The share follows the YAML's SM count, not the GPU's name.
    assert nccl_sm_share(replace(load_hardware("a100-pcie-80gb"), streaming_multiprocessors=96)) == pytest.approx(0.25)
    _, bwd = _layer(sequence_parallel=True, cluster="dgx-a100")
    regather = next(op for op in bwd if op.name.endswith(SP_REGATHER_SUFFIX))
    assert float(regather.tags["sm_share"]) == pytest.approx(24 / 108, abs=1e-4)


def test_userbuffers_overlap_is_not_priced_as_an_nccl_kernel() -> None:
    _, bwd = _layer(sequence_parallel=True, cluster="dgx-h100", tp_comm_overlap=True)
    regather = next(op for op in bwd if op.name.endswith(SP_REGATHER_SUFFIX))
    assert "sm_share" not in regather.tags and regather.tags["overlap"] == "dgrad"
