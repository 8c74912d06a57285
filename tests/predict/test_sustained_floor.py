"""A profile's GEMM is never priced faster than the GPU's sustained matmul rate (predict/roofline.py
sustained_math_floor_s, applied by predict/dispatch.py predict_op_times on GPUs)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Sequence

import pytest

from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.op import Op
from llmperf_hook.graph.sample_configs import gpt3_175b
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.hardware.spec import ClusterSpec
from llmperf_hook.predict import dispatch
from llmperf_hook.predict.dispatch import clear_prediction_cache, predict_op_times, predict_ops
from llmperf_hook.predict.roofline import sustained_math_floor_s

A100 = load_cluster("dgx-a100")


class _FastProfile:
    """A stand-in profile answering every compute op with 1 ns (an isolated kernel far above sustained speed)."""

    name = "stub-profile"

    def supports(self, op_class: str, phase: str, dtype: str) -> bool:
        return op_class in ("gemm", "bmm", "layernorm")

    def predict_s(self, ops: Sequence[Op], cluster: ClusterSpec) -> Sequence[float]:
        return [1e-9 for _ in ops]


def _gemm(phase: str = "bwd", m: int = 4096, n: int = 4096, k: int = 16384) -> Op:
    factor = 2.0 if phase == "bwd" else 1.0
    return Op("mlp.fc2", "gemm", phase, {"m": m, "n": n, "k": k}, flops=factor * 2.0 * m * n * k,
              bytes_moved=2.0 * (m * k + k * n + m * n), dtype="bf16")


def test_floor_is_the_flops_at_the_presets_sustained_matmul_rate() -> None:
    op = _gemm()
    # A100 SXM: 312 TFLOP/s bf16 x 0.87 (stas00 mamf-finder 271.2 TFLOP/s)
    assert sustained_math_floor_s(op, A100.gpu) == pytest.approx(op.flops / (312e12 * 0.87), rel=1e-9)
    norm = Op("attn.norm", "layernorm", "fwd", {"tokens": 4096, "hidden": 4096}, bytes_moved=1e8)
    assert sustained_math_floor_s(norm, A100.gpu) == 0.0  # only matmuls have a sustained FLOP rate


def test_a_profile_gemm_is_raised_to_the_floor_only_when_asked() -> None:
    clear_prediction_cache()
    op, norm = _gemm(), Op("attn.norm", "layernorm", "fwd", {"tokens": 4096, "hidden": 4096}, bytes_moved=1e8)
    floored, _ = predict_ops([op, norm], A100, _FastProfile(), None, sustained_floor=True)
    raw, _ = predict_ops([op, norm], A100, _FastProfile(), None)
    assert floored[op.cost_key] == pytest.approx(sustained_math_floor_s(op, A100.gpu))
    assert raw[op.cost_key] == pytest.approx(1e-9)
    assert floored[norm.cost_key] == raw[norm.cost_key] == pytest.approx(1e-9)


def test_a_gpu_step_never_runs_a_gemm_above_the_sustained_rate() -> None:
    cfg = gpt3_175b(tp=8, pp=8, dp=1, micro_batch_size=2, global_batch_size=16, precision="bf16")
    graph = build_graph(cfg, A100)
    seconds = predict_op_times(graph, A100, cfg.precision).seconds
    gemms = [op for op in graph.all_ops() if op.op_class in ("gemm", "bmm") and op.flops > 0]
    assert gemms
    for op in gemms:
        assert seconds[op.cost_key] >= sustained_math_floor_s(op, A100.gpu) * (1 - 1e-9)


class _TimedProfile(_FastProfile):
    """_FastProfile with the hardware fingerprint a fitted profile carries (profile/local_hardware.fingerprint)."""

    def __init__(self, hardware: dict) -> None:
        self.meta = SimpleNamespace(name="stub", hardware=hardware)


CPU_FINGERPRINT = {"device": "AMD EPYC", "machine": "x86_64", "threads": "1", "logical_cpus": "2",
                   "clock": "process_cpu"}


@pytest.mark.parametrize(("hardware", "floored"), [(CPU_FINGERPRINT, False),
                                                   ({"device": "NVIDIA A100-SXM4-80GB", "num_sms": "108"}, True)])
def test_a_cpu_profile_without_the_dtypes_framework_cost_is_not_floored_as_a_gpu(
        monkeypatch: pytest.MonkeyPatch, hardware: dict, floored: bool) -> None:
    """A CPU profile whose framework file lacks the dtype (bf16 readings that did not end in their time box on an
    AVX2 EPYC) was priced as a GPU: every GEMM raised to flops / the measured peak, which was that CPU's slowest bf16
    layout, 2x over the testbed's bf16 steps (h174). It is a CPU all the same; the missing cost is said."""
    clear_prediction_cache()
    monkeypatch.setattr(dispatch, "find_operator_profile", lambda cluster, dtype: _TimedProfile(hardware))
    monkeypatch.setattr(dispatch, "find_cpu_framework_cost", lambda name, dtype: None)
    monkeypatch.setattr(dispatch.fitted, "find_comm_model", lambda name: None)
    cfg = gpt3_175b(tp=8, pp=8, dp=1, micro_batch_size=2, global_batch_size=16, precision="bf16")
    graph = build_graph(cfg, A100)
    times = predict_op_times(graph, A100, cfg.precision)
    gemm = next(op for op in graph.all_ops() if op.op_class == "gemm" and op.flops > 0)
    expected = sustained_math_floor_s(gemm, A100.gpu) if floored else 1e-9
    assert times.seconds[gemm.cost_key] == pytest.approx(expected)
    said = [w for w in times.warnings if "no measured framework cost for bf16" in w]
    assert (said == []) == floored
    assert not said or "llmperf profile --device cpu --dtype bf16" in said[0]


@pytest.mark.parametrize(("hardware", "provenance", "dtype", "noted"), [
    (CPU_FINGERPRINT, {}, "bf16", True),  # fitted before 28 Nov: its bf16 peak was a @ b, the slowest layout here
    (CPU_FINGERPRINT, {}, "fp32", False),  # MKL runs every fp32 layout at one speed
    (CPU_FINGERPRINT, {"peak_layouts": "nt,nn,tn"}, "bf16", False),
    ({"device": "NVIDIA A100-SXM4-80GB", "num_sms": "108"}, {}, "bf16", False)])
def test_a_cpu_profile_whose_peak_was_one_layout_says_its_mfu_reads_high(
        monkeypatch: pytest.MonkeyPatch, hardware: dict, provenance: dict, dtype: str, noted: bool) -> None:
    """The testbed's profile of 05:12 (peak bf16 1.27 GFLOP/s, a @ b) predicts config 10 at MFU 263 %, and predict's
    MFU warning calls that a missing cost and an llmperf bug: the peak is what is low (r65)."""
    clear_prediction_cache()
    profile = _TimedProfile(hardware)
    profile.meta.provenance = provenance
    monkeypatch.setattr(dispatch, "find_operator_profile", lambda cluster, dtype: profile)
    monkeypatch.setattr(dispatch, "find_cpu_framework_cost", lambda name, dtype: None)
    monkeypatch.setattr(dispatch.fitted, "find_comm_model", lambda name: None)
    cfg = gpt3_175b(tp=8, pp=8, dp=1, micro_batch_size=2, global_batch_size=16, precision=dtype)
    times = predict_op_times(build_graph(cfg, A100), A100, dtype)
    said = [w for w in times.warnings if "peak with a @ b alone" in w]
    assert len(said) == noted
    assert not said or f"llmperf profile --device cpu --dtype {dtype} --budget 4 --name stub" in said[0]
