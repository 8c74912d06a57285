"""FP8 GEMMs priced from the GPU's bf16 profile and the FP8 speed-up measured on Hopper (predict/fp8_gemm.py)."""

import pytest

from llmperf_hook.graph.op import Op
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.predict.dispatch import choose_predictor, find_operator_profile, predict_ops
from llmperf_hook.predict.fp8_gemm import FP8_SPEEDUP_OVER_BF16
from llmperf_hook.predict.roofline import fp8_quantize_s

CLUSTER = load_cluster("dgx-h100")


def _gemm(name: str, phase: str, dtype: str, m: int = 8192, n: int = 28672, k: int = 4096) -> Op:
    factor = 2.0 if phase == "bwd" else 1.0
    return Op(name, "gemm", phase, {"m": m, "n": n, "k": k}, flops=factor * 2.0 * m * n * k,
              bytes_moved=2.0 * (m * k + k * n + m * n), dtype=dtype)


@pytest.mark.parametrize("phase", ["fwd", "bwd"])
def test_an_fp8_linear_gemm_is_the_bf16_profile_time_over_the_measured_speedup(phase: str) -> None:
    profile = find_operator_profile(CLUSTER, "fp8")
    assert profile is not None  # the measured H100 bf16 profile serves FP8 runs
    fp8, bf16 = _gemm("mlp.fc1", phase, "fp8"), _gemm("mlp.fc1", phase, "bf16")
    seconds, used = predict_ops([fp8, bf16], CLUSTER, profile, None)
    expected = seconds[bf16.cost_key] / FP8_SPEEDUP_OVER_BF16[phase] + fp8_quantize_s(fp8, CLUSTER.gpu)
    assert seconds[fp8.cost_key] == pytest.approx(expected, rel=1e-9)
    assert 1.5 < seconds[bf16.cost_key] / seconds[fp8.cost_key] < 2.0


def test_the_lm_head_of_an_fp8_run_stays_on_the_bf16_profile_and_without_profile_the_roofline_prices_fp8() -> None:
    profile = find_operator_profile(CLUSTER, "fp8")
    head, head16 = _gemm("head.lm_head", "fwd", "fp8", n=128256), _gemm("head.lm_head", "fwd", "bf16", n=128256)
    seconds, _ = predict_ops([head, head16], CLUSTER, profile, None)
    assert seconds[head.cost_key] == seconds[head16.cost_key]
    assert choose_predictor(_gemm("mlp.fc1", "fwd", "fp8"), None, None).name == "roofline"
