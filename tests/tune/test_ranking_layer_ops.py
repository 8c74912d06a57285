"""`bench_tune_ranking.py --layer-ops` (benchmarks/ranking_layer_ops.py): which operator sample times which op of a
layer, and how one layer's passes compose from its ops and the host launch queue."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import ranking_layer_ops as lo  # noqa: E402


def _samples() -> dict:
    gemm = {"mp": 2.0, "b": 2.0, "l": 1024.0, "dim": 2048.0, "F_dur(us)": 122.0, "B_dur(us)": 245.0}
    bmm = {"mp": 2.0, "b": 4.0, "h": 16.0, "l": 1024.0, "dim": 2048.0, "F_dur(us)": 69.0, "B_dur(us)": 177.0}
    softmax = {"mp": 1.0, "b": 2.0, "h": 16.0, "l": 1024.0, "F_dur(us)": 70.2, "B_dur(us)": 98.8}
    norm = {"b": 2.0, "l": 1024.0, "dim": 2048.0, "F_dur(us)": 22.0, "B_dur(us)": 65.6}
    return {"linear1": [gemm], "bmm": [bmm], "ScaledUpperTriangMaskedSoftmax": [softmax], "layernorm": [norm]}


def test_a_gemm_sample_needs_the_same_tp_micro_batch_sequence_and_hidden() -> None:
    assert lo.sample_seconds("attn.qkv", lo.CellShape(2, 2, 1024, 2048, 16), _samples()) == pytest.approx((122e-6, 245e-6))
    assert lo.sample_seconds("attn.qkv", lo.CellShape(1, 4, 1024, 2048, 16), _samples()) is None  # same FLOPs, other shape
    assert lo.sample_seconds("attn.proj", lo.CellShape(2, 2, 1024, 2048, 16), _samples()) is None  # no linear2 rows


def test_attention_samples_match_by_the_heads_on_the_rank() -> None:
    # TP 4, micro-batch 8, 16 heads: 32 heads of 128 on the rank, as the TP 2 micro-batch 4 sample
    assert lo.sample_seconds("attn.av", lo.CellShape(4, 8, 1024, 2048, 16), _samples()) == pytest.approx((69e-6, 177e-6))
    assert lo.sample_seconds("attn.av", lo.CellShape(4, 8, 1024, 1024, 16), _samples()) is None  # head size 64
    # the fused causal softmax is sampled at mp 1 only: TP 2 micro-batch 4 runs the same [32, 1024, 1024] kernel
    assert lo.sample_seconds("attn.softmax", lo.CellShape(2, 4, 1024, 2048, 16), _samples()) == pytest.approx(
        (70.2e-6, 98.8e-6))


def test_norms_are_not_split_by_tp_and_dropout_has_no_sample() -> None:
    assert lo.sample_seconds("mlp.norm", lo.CellShape(8, 2, 1024, 2048, 16), _samples()) == pytest.approx((22e-6, 65.6e-6))
    assert lo.sample_seconds("attn.dropout", lo.CellShape(1, 2, 1024, 2048, 16), _samples()) is None


def test_read_samples_reads_the_shipped_layout(tmp_path: Path) -> None:
    (tmp_path / f"{lo.SAMPLE_GPU}_layernorm_fp16.csv").write_text("b,l,dim,F_dur(us),B_dur(us)\n2.0,1024.0,2048.0,22.0,65.6\n")
    assert lo.read_samples(tmp_path) == {"layernorm": [{"b": 2.0, "l": 1024.0, "dim": 2048.0, "F_dur(us)": 22.0,
                                                        "B_dur(us)": 65.6}]}


def test_a_tp1_layer_under_full_recompute_issues_13_then_39_units_and_queues_behind_both_gpu_and_host() -> None:
    from llmperf_hook.graph.build import build_graph
    from llmperf_hook.graph.sample_configs import make_config
    from llmperf_hook.hardware.load import load_cluster
    from llmperf_hook.predict.dispatch import predict_op_times

    cfg = make_config(num_layers=4, hidden_size=2048, num_attention_heads=16, seq_length=1024, precision="fp16",
                      recompute="full", attention_backend="unfused")
    spec = load_cluster("dgx-a100")
    graph = build_graph(cfg, spec)
    seconds = dict(predict_op_times(graph, spec, cfg.precision).seconds)
    block = lo.dense_block(graph)
    fwd, bwd = lo.compose_passes(graph.stages[0].chunks[0], block, seconds, spec.host_overhead_per_op_s)
    assert (fwd.host_units, bwd.host_units) == (13, 13 + 2 * 13)  # recompute 1 unit per op, backward 2
    lines = lo.layer_ops(block, seconds, lo.cell_shape(cfg), {})
    assert fwd.gpu_s == pytest.approx(sum(x.fwd_s for x in lines))
    assert bwd.gpu_s == pytest.approx(sum(x.fwd_s + x.bwd_s for x in lines))
    for p in (fwd, bwd):
        host_s = p.host_units * spec.host_overhead_per_op_s
        assert max(p.gpu_s, host_s) - 1e-12 <= p.carried_s <= p.queued_s <= p.gpu_s + host_s + 1e-12
    # GPU and host are about equal here (h2048 TP 1 micro-batch 1): draining the queue at every layer costs more
    assert fwd.queued_s + bwd.queued_s > 1.05 * (fwd.carried_s + bwd.carried_s)
