"""Roofline and alpha-beta fallbacks, and the per-class predictor dispatch."""

import pytest

from llmperf_hook.graph.op import Collective, Op
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.predict import dispatch
from llmperf_hook.predict.alpha_beta import collective_time_s
from llmperf_hook.predict.roofline import compute_time_s

A100 = load_cluster("dgx-a100")


def _gemm(n: int, dtype: str = "bf16") -> Op:
    return Op("g", "gemm", "fwd", {"m": n, "n": n, "k": n}, flops=2.0 * n**3, bytes_moved=6.0 * n * n, dtype=dtype)


@pytest.mark.parametrize("n,measured_tflops", [(1024, 89), (2048, 195), (4096, 261), (8192, 292)])
def test_gemm_curve_near_a100_cublas_figure(n: int, measured_tflops: float) -> None:
    """Within 25 % of the A100 cuBLAS bf16 curve (../shared/validation/calibration, read off a figure +-5 TFLOP/s)."""
    tflops = 2.0 * n**3 / compute_time_s(_gemm(n), A100.gpu) / 1e12
    assert tflops == pytest.approx(measured_tflops, rel=0.25)


def test_memory_bound_ops_follow_bandwidth() -> None:
    op = Op("n", "layernorm", "fwd", {"tokens": 8192, "hidden": 8192}, bytes_moved=2 * 2 * 8192 * 8192)
    t = compute_time_s(op, A100.gpu)
    assert t == pytest.approx(op.bytes_moved / (2039e9 * 0.85) + 4e-6, rel=1e-9)
    assert compute_time_s(_gemm(4096, "fp32"), A100.gpu) > 10 * compute_time_s(_gemm(4096), A100.gpu)


def _coll(op_class: str, nbytes: int, size: int, per_node: int, sharing: int = 1, group: str = "dp") -> Op:
    return Op("c", op_class, "step", {"bytes": nbytes}, collective=Collective(group, size, per_node, sharing))


def test_intra_node_allreduce_matches_nccl_bus_bandwidth() -> None:
    nbytes = 1 << 30
    t = collective_time_s(_coll("allreduce", nbytes, 8, 8), A100)
    busbw = nbytes * 2 * 7 / 8 / t
    assert busbw == pytest.approx(228e9, rel=0.10)  # vTrain LUT: ~228 GB/s on 8 A100s at 1 GiB
    assert busbw < A100.intra_node.bandwidth_bytes_per_s * A100.intra_node.bus_efficiency


def test_network_share_and_algorithm_factors() -> None:
    big = 1 << 30
    one_group = collective_time_s(_coll("allreduce", big, 16, 8, 1), A100)
    eight_groups = collective_time_s(_coll("allreduce", big, 16, 1, 8), A100)
    assert eight_groups > 5 * one_group  # 8 groups crossing together share the node's NICs
    ag = collective_time_s(_coll("allgather", big, 8, 8), A100)
    ar = collective_time_s(_coll("allreduce", big, 8, 8), A100)
    assert ar == pytest.approx(2 * ag, rel=0.01)
    assert collective_time_s(_coll("allreduce", big, 1, 1), A100) == 0.0
    tiny = collective_time_s(_coll("allreduce", 8, 512, 1, 8), A100)
    assert tiny < 2e-4  # tree latency grows with log2(nodes), not nodes


class _FakeProfile:
    name = "fake:a100"

    def supports(self, op_class: str, phase: str, dtype: str) -> bool:
        return op_class == "gemm"

    def predict_s(self, ops, cluster):
        return [1.0 for _ in ops]


def test_dispatch_prefers_fitted_profile_where_supported(monkeypatch) -> None:
    from llmperf_hook.graph.build import build_graph
    from llmperf_hook.graph.sample_configs import make_config

    monkeypatch.setattr(dispatch.fitted, "find_profile", lambda hw, dtype: _FakeProfile())
    monkeypatch.setattr(dispatch.fitted, "find_comm_model", lambda name: None)
    dispatch.clear_prediction_cache()
    cfg = make_config(num_layers=2, hidden_size=512, num_attention_heads=8, tp=2, dp=2)
    times = dispatch.predict_op_times(build_graph(cfg, A100), A100, "bf16")
    assert times.predictor_by_class["gemm"] == "fake:a100"
    assert times.predictor_by_class["layernorm"] == "roofline"
    assert times.predictor_by_class["allreduce"] == "alpha-beta"
    assert any(v == 1.0 for k, v in times.seconds.items() if k.startswith("gemm:"))
    dispatch.clear_prediction_cache()


def test_calibration_scales_step_and_is_reported(monkeypatch) -> None:
    import llmperf_hook.api as api
    from llmperf_hook.graph.sample_configs import make_config
    from llmperf_hook.refine.calibration import Calibration

    cfg = make_config(num_layers=2, hidden_size=512, num_attention_heads=8, dp=2)
    h100 = load_cluster("dgx-h100")
    plain = api.predict_config(cfg, h100)
    monkeypatch.setattr(api, "find_calibration", lambda hw, cl, fw: Calibration(hw, cl, fw, 1.5, 3, 0.01))
    scaled = api.predict_config(cfg, h100)
    assert scaled.step_time_s == pytest.approx(1.5 * plain.step_time_s + 0.01)
    assert "calibration" in scaled.predictor and "calibration" in scaled.breakdown
    assert abs(sum(scaled.breakdown.values()) - scaled.step_time_s) < 1e-9


def test_multi_node_ring_pays_a_network_step_latency_per_rank() -> None:
    """NCCL's tuning model (src/graph/tuning.cc): ring latency = base + nsteps x per-step latency, nsteps = n-1
    for all-gather, every step at the network latency once the ring spans nodes; so a tiny all-gather over
    1,536 ranks costs ~1,535 x 5 us while the bandwidth term is the same as over 16 ranks."""
    small = collective_time_s(_coll("allgather", 1 << 10, 16, 8), A100)
    large = collective_time_s(_coll("allgather", 1 << 10, 1536, 8), A100)
    assert large - small == pytest.approx((1535 - 15) * A100.inter_node.latency_s, rel=0.01)


def test_a100_40gb_borrows_the_80gb_profile_with_memory_bound_ops_scaled() -> None:
    """Same SMs, clocks and peaks, HBM 1,555 vs 2,039 GB/s: GEMMs as measured on the 80 GB, streaming ops x1.31."""
    from llmperf_hook.hardware.load import load_hardware
    from llmperf_hook.predict import fitted
    from llmperf_hook.predict.sibling_profile import find_sibling_profile

    own = fitted.find_profile("a100-sxm4-80gb", "fp16")
    if own is None:
        pytest.skip("no shipped A100 80 GB profile")
    small = load_cluster("dgx-a100", "a100-sxm4-40gb")
    lent = find_sibling_profile(small.gpu, "fp16")
    assert lent is not None and lent is find_sibling_profile(small.gpu, "fp16")
    gemm = _gemm(4096, "fp16")
    norm = Op("n", "layernorm", "fwd", {"tokens": 8192, "hidden": 8192}, bytes_moved=2 * 2 * 8192 * 8192, dtype="fp16")
    (g_own, n_own), (g_lent, n_lent) = own.predict_s([gemm, norm], A100), lent.predict_s([gemm, norm], small)
    assert g_lent == pytest.approx(g_own) and n_lent == pytest.approx(n_own * 2039 / 1555)
    assert find_sibling_profile(load_hardware("h100-sxm5-80gb"), "bf16") is None  # GH200 is not a sibling
    times = dispatch.predict_op_times(type("G", (), {"all_ops": lambda self: [gemm]})(), small, "fp16")
    assert times.predictor_by_class["gemm"].startswith("lightgbm:a100-sxm4-80gb (sibling GPU")


def test_intra_node_latency_grows_with_ring_steps_as_in_the_vtrain_lut() -> None:
    """A100 NVSwitch, vTrain's NCCL LUT at 1 MiB: 44 us on 2 GPUs, 93 us on 8 (2 and 14 ring steps)."""
    two, eight = (collective_time_s(_coll("allreduce", 2**20, n, n, group="tp"), A100) for n in (2, 8))
    assert two == pytest.approx(44.2e-6, rel=0.25) and eight == pytest.approx(92.8e-6, rel=0.25)
    assert eight / two > 1.4  # the LUT: 2.1; a flat latency per collective: 1.06
    # An all-gather walks half the ring steps of an all-reduce, a send/recv one.
    gather = collective_time_s(_coll("allgather", 2**10, 8, 8, group="tp"), A100)
    send = collective_time_s(_coll("p2p", 2**10, 2, 2, group="pp"), A100)
    step = A100.intra_node.latency_per_step_s
    assert step > 0 and gather == pytest.approx(A100.intra_node.latency_s + 7 * step, rel=0.01)
    assert send == pytest.approx(A100.intra_node.latency_s + step, rel=0.01)
