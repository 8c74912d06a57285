"""The shipped comm models outside their samples: physical bounds on every collective, size and layout (H108)."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from script_module import load_script

from llmperf_hook.api import predict_command, prediction_json
from llmperf_hook.errors import ProfileError
from llmperf_hook.graph.op import Collective, Op
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.predict.alpha_beta import collective_time_s, line_rate_time_s
from llmperf_hook.predict.fitted import find_comm_model
from llmperf_hook.profile.comm_fit import CommSamples, fit_layout
from llmperf_hook.profile.comm_model import (MIN_RATE_FRACTION, CommModel, CommPredictor, read_comm_model,
                                             ring_factor, write_comm_model)

GPT_13B_TP2_DP4 = ["torchrun", "--nnodes", "2", "--nproc-per-node", "4", "pretrain_gpt.py", "--num-layers", "40",
                   "--hidden-size", "5120", "--num-attention-heads", "40", "--seq-length", "2048",
                   "--max-position-embeddings", "2048", "--micro-batch-size", "1", "--global-batch-size", "32",
                   "--tensor-model-parallel-size", "2", "--bf16"]
KINDS = ("allreduce", "allgather", "reducescatter", "alltoall", "p2p")


def test_13b_gradient_sync_on_two_perlmutter_nodes_is_within_the_slingshot_bound() -> None:
    """26 GB of fp32 gradients (13 B parameters / TP 2 x 4 bytes), ring all-reduce over DP 4 on 2 nodes: at one
    25 GB/s Slingshot-11 NIC per GPU it takes 2 x 3/4 x 26 GB / 25 GB/s ~ 1.6 s; the two DP groups of a node
    share its four NICs, so at line rate 0.78 s. The fitted model of the authors' 2.3 GB/s NCCL said 33 s."""
    pred = predict_command(GPT_13B_TP2_DP4, {}, cluster="perlmutter")
    out = prediction_json(pred)
    grad_bytes = 4 * 13e9 / 2
    assert 2 * 3 / 4 * grad_bytes / 50e9 <= out["breakdown"]["comm_dp_grad"] <= 2 * 3 / 4 * grad_bytes / 25e9 * 1.1
    assert any("allreduce" in w and "alpha-beta" in w and "perlmutter" in w for w in out["warnings"]), out["warnings"]


def test_comm_warnings_name_each_collective_class_and_layout_once() -> None:
    """The 13B job issues hundreds of collectives over two layouts (TP 2 inside a node, DP 4 over 2 nodes, messages
    of several sizes): predict names each (class, layout) in one line, not one line per op or per size."""
    out = prediction_json(predict_command(GPT_13B_TP2_DP4, {}, cluster="perlmutter"))
    comm = sorted(w.split(" with ")[0] for w in out["warnings"] if "(nodes x GPUs)" in w)
    assert comm == ["allreduce over 1x2 (nodes x GPUs)", "allreduce over 2x2 (nodes x GPUs)"], out["warnings"]


def _op(kind: str, nbytes: float, nodes: int, gpn: int, sharing: int = 1) -> Op:
    return Op("c", kind, "step", {"bytes": nbytes}, collective=Collective("dp", nodes * gpn, gpn, sharing))


@settings(max_examples=150, deadline=None)
@given(cluster_name=st.sampled_from(["perlmutter", "vista"]), kind=st.sampled_from(KINDS),
       nodes=st.sampled_from([1, 2, 3, 4, 8, 16, 64]), gpn=st.sampled_from([1, 2, 4]),
       sharing=st.sampled_from([1, 2, 4]), log2_bytes=st.floats(10, 36))
def test_shipped_comm_models_stay_within_the_links_at_every_size_and_layout(
        cluster_name: str, kind: str, nodes: int, gpn: int, sharing: int, log2_bytes: float) -> None:
    """Bus bandwidth never above the links' line rate; time non-decreasing in size; outside the sampled sizes never
    slower than the cluster's alpha-beta / MIN_RATE_FRACTION (the rate fraction a healthy transport keeps)."""
    cluster = load_cluster(cluster_name)
    gpn = min(gpn, cluster.gpus_per_node)
    if nodes * gpn < 2 or (nodes == 1 and sharing > 1):
        return
    comm = find_comm_model(cluster_name)
    sizes = 2.0 ** np.array([log2_bytes, log2_bytes + 0.01, log2_bytes + 1.0])
    ops = [_op(kind, b, nodes, gpn, sharing) for b in sizes]
    t = np.asarray(comm.predict_s(ops, cluster))
    assert np.all(np.diff(t) >= 0), (t, sizes)
    line = np.asarray([line_rate_time_s(op, cluster) for op in ops])
    assert np.all(t >= line * (1 - 1e-9)), (t, line)
    fit = comm.layout_for(kind, ops[0].collective)
    outside = (sizes > fit.bytes_range[1]) | (sizes < fit.bytes_range[0])
    ab = np.asarray([collective_time_s(op, cluster) for op in ops])
    assert np.all(t[outside] <= ab[outside] / MIN_RATE_FRACTION * 1.01), (t, ab)


def test_residual_is_held_at_its_edge_beyond_the_sampled_sizes() -> None:
    x = np.geomspace(1e7, 1e9, 400)
    t = (20e-6 + x / 40e9) * np.exp(0.1 * np.sin(np.log(x)))  # a size-dependent wiggle the residual learns
    fit = fit_layout(CommSamples("p2p", 2, 1, x, t))
    far = np.array([1e10, 1e11])
    affine = fit.alpha_s + far / fit.busbw_bytes_per_s
    assert fit.predict_s(far, 2, "p2p") / affine == pytest.approx([np.exp(fit.residual_log[-1])] * 2)


def test_a_fit_far_below_the_clusters_network_is_priced_by_the_cluster_and_said() -> None:
    """Samples at 2 GB/s (a socket transport) on a cluster whose NICs give 100 GB/s per node: alpha-beta, warned."""
    x = np.geomspace(4e7, 2e9, 300)
    slow = fit_layout(CommSamples("allreduce", 2, 4, x, 2 * 7 / 8 * x / 2e9))
    cluster = load_cluster("perlmutter")
    pred = CommPredictor(CommModel("perlmutter", (slow,), {}))
    op = _op("allreduce", 26e9, 2, 4)
    assert pred.predict_s([op], cluster)[0] == pytest.approx(collective_time_s(op, cluster))
    (warning,) = pred.extrapolation_warnings([op], cluster)
    assert "alpha-beta" in warning and "2x4" in warning and "2.0 GB/s" in warning


def test_a_healthy_fit_beyond_its_sizes_keeps_its_alpha_beta_and_warns() -> None:
    x = np.geomspace(4e7, 2e9, 300)
    fit = fit_layout(CommSamples("allreduce", 2, 4, x, 30e-6 + 2 * 7 / 8 * x / 70e9))
    cluster = load_cluster("perlmutter")
    pred = CommPredictor(CommModel("perlmutter", (fit,), {}))
    op = _op("allreduce", 26e9, 2, 4)
    assert pred.predict_s([op], cluster)[0] == pytest.approx(30e-6 + 2 * 7 / 8 * 26e9 / 70e9, rel=0.01)
    (warning,) = pred.extrapolation_warnings([op], cluster)
    assert "beyond the sampled" in warning and "held at its edge value" in warning
    assert pred.extrapolation_warnings([_op("allreduce", 1e9, 2, 4)], cluster) == ()


def test_below_the_sampled_sizes_time_follows_the_clusters_alpha_beta() -> None:
    """A fit of >= 270 MB messages cannot identify alpha (here 0: 1 KB in 21 ns; Vista's all-gather fit says 3 ms):
    below its samples the cluster's alpha-beta, scaled to meet the fit at its smallest sample."""
    x = np.geomspace(2.7e8, 2.4e9, 300)
    fit = fit_layout(CommSamples("allgather", 1, 2, x, 0.5 * x / 24e9))
    cluster = load_cluster("perlmutter")
    pred = CommPredictor(CommModel("perlmutter", (fit,), {}))
    assert fit.predict_s(np.array([1024.0]), 2, "allgather")[0] < 1e-7
    edge = fit.bytes_range[0]
    fitted_edge = fit.predict_s(np.array([edge]), 2, "allgather")[0]
    scale = fitted_edge / collective_time_s(_op("allgather", edge, 1, 2), cluster)
    small, at_edge = pred.predict_s([_op("allgather", 1024, 1, 2), _op("allgather", edge, 1, 2)], cluster)
    assert small == pytest.approx(scale * collective_time_s(_op("allgather", 1024, 1, 2), cluster))
    assert small >= cluster.intra_node.latency_s
    assert at_edge == pytest.approx(fitted_edge)
    (warning,) = pred.extrapolation_warnings([_op("allgather", 1024, 1, 2)], cluster)
    assert "below them perlmutter's alpha-beta" in warning


@pytest.mark.parametrize("bytes_range", [(float("nan"), 1e9), (2e9, 1e9), (0.0, 1e9), (1e8, float("inf"))])
def test_a_comm_model_whose_sampled_sizes_are_out_of_range_is_refused(tmp_path: Path, bytes_range) -> None:
    """The sampled sizes decide where the cluster's alpha-beta takes over; a hand-made model with a NaN, empty or
    reversed range would price (and warn) with NaN comparisons, so it is refused like any other bad field."""
    x = np.geomspace(4e7, 2e9, 50)
    fit = replace(fit_layout(CommSamples("allreduce", 2, 4, x, 2 * 7 / 8 * x / 70e9)), bytes_range=bytes_range)
    write_comm_model(tmp_path, CommModel("perlmutter", (fit,), {}))
    with pytest.raises(ProfileError, match="missing or out of range"):
        read_comm_model(tmp_path)


def test_fitted_time_never_falls_as_the_bytes_grow() -> None:
    """A noisy layout whose median residual drops faster than the alpha-beta part rises (Vista all-gather 2x1 fell
    5.5 % from one size to the next): the fit raises the residual so that time is non-decreasing."""
    from llmperf_hook.profile.comm_fit import monotone_residual

    x = np.geomspace(2.7e8, 1.2e9, 400)
    t = 0.5 * x / 26e9 * np.where(np.arange(400) % 100 < 50, 1.15, 0.85)  # two bandwidth levels in blocks
    fit = fit_layout(CommSamples("allgather", 2, 1, x, t))
    grid = np.geomspace(1e8, 4e9, 4000)
    assert np.all(np.diff(fit.predict_s(grid, 2, "allgather")) >= 0)
    knots = (0.0, 1.0, 2.0)
    ln2 = np.log(2.0)  # bandwidth-bound time (alpha 0) rises by ln 2 per octave: r may fall that much, no more
    assert monotone_residual(knots, (0.0, -1.0, -1.0), 0.0, 1.0) == pytest.approx(
        (-(1 - ln2) / 2, -(1 + ln2) / 2, -1.0), abs=1e-5)  # the least-squares nearest: both ends move
    assert monotone_residual(knots, (0.0, 0.5, 0.4), 0.0, 1.0) == (0.0, 0.5, 0.4)  # a fall time allows
    flat = monotone_residual(knots, (0.0, 0.5, 0.4), 1.0, 1e-9)  # latency-bound time: r may not fall
    assert flat[1] == pytest.approx(0.45, abs=1e-5) and flat[2] >= flat[1]


def test_bench_comm_extrapolation_finds_no_violation(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_script(Path(__file__).resolve().parents[2] / "benchmarks" / "bench_comm_extrapolation.py")
    assert bench.main([]) == 0
    assert "64 GB: 0 break a sanity rule" in capsys.readouterr().out
    assert bench.main(["--unbounded"]) == 1  # the fits alone break the rules (the model before H108)
    assert "64 GB: 0 break" not in capsys.readouterr().out
