"""FP8 runs: only Transformer Engine's linear GEMMs run in FP8, each behind a memory-bound quantize kernel."""

import pytest

from llmperf_hook.graph.op import Op
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.predict.roofline import (
    FP8_QUANTIZE_BYTES_PER_ELEMENT,
    compute_time_s,
    fp8_quantize_s,
    math_dtype,
)

H100 = load_cluster("dgx-h100").gpu


def _gemm(name: str, phase: str, dtype: str, m: int = 8192, n: int = 4096, k: int = 4096) -> Op:
    factor = 2.0 if phase == "bwd" else 1.0
    return Op(name, "gemm", phase, {"m": m, "n": n, "k": k}, flops=factor * 2.0 * m * n * k,
              bytes_moved=2.0 * (m * k + k * n + m * n), dtype=dtype)


def _attention(dtype: str) -> Op:
    dims = {"b": 1, "s": 8192, "heads": 32, "kv_heads": 8, "head_dim": 128, "causal": 1}
    return Op("attn.core", "attention", "fwd", dims,
              flops=4.0 * 32 * 8192 * 8192 * 128 / 2, bytes_moved=4.0 * 2 * 8192 * 4096, dtype=dtype)


def test_attention_and_lm_head_of_an_fp8_run_cost_as_bf16() -> None:
    assert math_dtype(_attention("fp8")) == "bf16"
    assert compute_time_s(_attention("fp8"), H100) == compute_time_s(_attention("bf16"), H100)
    head = _gemm("head.lm_head", "fwd", "fp8", n=128256)
    assert compute_time_s(head, H100) == compute_time_s(_gemm("head.lm_head", "fwd", "bf16", n=128256), H100)
    bmm = Op("attn.qk", "bmm", "fwd", {"m": 2048, "n": 2048, "k": 128}, flops=2.0 * 2048 * 2048 * 128 * 32,
             bytes_moved=1e6, dtype="fp8")
    assert math_dtype(bmm) == "bf16"


def test_fp8_linear_gemm_is_faster_than_bf16_but_pays_its_quantize() -> None:
    fp8, bf16 = _gemm("mlp.fc1", "fwd", "fp8"), _gemm("mlp.fc1", "fwd", "bf16")
    assert math_dtype(fp8) == "fp8"
    t8, t16 = compute_time_s(fp8, H100), compute_time_s(bf16, H100)
    assert t8 < t16 < 2.0 * t8  # twice the peak, less the quantize kernel
    # Forward quantizes the m x k input; backward the m x n output gradient (4 bytes per element each).
    fwd_bytes = FP8_QUANTIZE_BYTES_PER_ELEMENT * 8192 * 4096
    assert fp8_quantize_s(fp8, H100) == pytest.approx(
        fwd_bytes / (H100.memory_bandwidth_bytes_per_s * H100.memory_efficiency) + H100.kernel_launch_s)
    wide = _gemm("mlp.fc1", "bwd", "fp8", n=4 * 4096)
    assert fp8_quantize_s(wide, H100) > 3.5 * fp8_quantize_s(_gemm("mlp.fc1", "bwd", "fp8"), H100)


def test_bf16_and_fp16_runs_are_unchanged() -> None:
    for dtype in ("bf16", "fp16"):
        op = _gemm("mlp.fc1", "fwd", dtype)
        assert math_dtype(op) == dtype
        expected = max(op.flops / (H100.peak_for(dtype) * H100.gemm_efficiency) + H100.gemm_ramp_s,
                       op.bytes_moved / (H100.memory_bandwidth_bytes_per_s * H100.memory_efficiency))
        assert compute_time_s(op, H100) == pytest.approx(expected + H100.kernel_launch_s, rel=1e-12)


def test_an_fp8_run_prices_its_bf16_ops_with_the_bf16_profile() -> None:
    """The shipped H100 profile is bf16: in an FP8 run it prices attention, norms and the LM head (TE runs them in
    bf16) exactly as in a bf16 run, and the FP8 linear GEMMs from its bf16 GEMMs (predict/fp8_gemm.py)."""
    from llmperf_hook.predict import dispatch

    cluster = load_cluster("dgx-h100")
    profile = dispatch.find_operator_profile(cluster, "fp8")
    assert profile is not None and profile is dispatch.find_operator_profile(cluster, "bf16")
    attention8, attention16 = _attention("fp8"), _attention("bf16")
    seconds, used = dispatch.predict_ops([attention8], cluster, profile, None)
    expected, _ = dispatch.predict_ops([attention16], cluster, profile, None)
    assert used["attention"].startswith("lightgbm")
    assert seconds[dispatch.op_id(attention8)] == pytest.approx(expected[dispatch.op_id(attention16)])
    fc1 = _gemm("mlp.fc1", "fwd", "fp8")
    seconds, used = dispatch.predict_ops([fc1], cluster, profile, None)
    assert used["gemm"].endswith("(bf16 / fp8 speed-up)") and seconds[dispatch.op_id(fc1)] > 0


def test_fp8_gemm_reaches_the_calibrated_share_of_the_fp8_peak() -> None:
    """Large FP8 GEMM: 0.80 (H100 bf16 MAMF share) x 0.926 (GH200 FP8 / bf16 MAMF shares) of 1978.9 TFLOP/s, plus
    its quantize kernel: ~1,470 TFLOP/s of math, within the H800 SXM FP8 figures (1,378-1,541 TFLOP/s)."""
    from llmperf_hook.predict.roofline import FP8_GEMM_EFFICIENCY_RATIO

    op = _gemm("mlp.fc1", "fwd", "fp8", m=8192, n=8192, k=16384)
    math_s = compute_time_s(op, H100) - fp8_quantize_s(op, H100) - H100.kernel_launch_s - H100.gemm_ramp_s
    assert FP8_GEMM_EFFICIENCY_RATIO == pytest.approx(0.926, abs=1e-3)
    assert op.flops / math_s / 1e12 == pytest.approx(1978.9 * 0.80 * FP8_GEMM_EFFICIENCY_RATIO, rel=1e-6)
    assert 1378 <= op.flops / math_s / 1e12 <= 1541


def test_fp8_on_a_gpu_without_fp8_tensor_cores_is_refused() -> None:
    """Transformer Engine asserts compute capability 8.9 for FP8: an A100 job with --fp8-format fails at its first
    forward, so predict exits 2 instead of pricing it; the same command on H100 is priced."""
    from llmperf_hook.api import predict_command
    from llmperf_hook.errors import ConfigError

    argv = ("torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 2 --hidden-size 1024 --num-attention-heads 16 "
            "--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 8 --bf16 "
            "--vocab-size 32000 --fp8-format hybrid").split()
    with pytest.raises(ConfigError, match="8.9 or higher"):
        predict_command(argv, {}, cluster="dgx-a100")
    assert predict_command(argv, {}, cluster="dgx-h100").config.precision == "fp8"


def test_current_scaling_reads_the_tensor_once_more_for_its_amax() -> None:
    """--fp8-recipe tensorwise (graph/fp8_tags.fp8_scaling_tag): TE's Float8CurrentScalingQuantizer runs an amax
    kernel over the bf16 tensor, a scale kernel, then the cast: 2 + 4 bytes per element and three launches."""
    from dataclasses import replace

    from llmperf_hook.predict.roofline import FP8_AMAX_BYTES_PER_ELEMENT

    delayed = _gemm("mlp.fc1", "fwd", "fp8")
    current = replace(delayed, tags={"fp8_scaling": "current"})
    rate = H100.memory_bandwidth_bytes_per_s * H100.memory_efficiency
    extra = FP8_AMAX_BYTES_PER_ELEMENT * 8192 * 4096 / rate + 2 * H100.kernel_launch_s
    assert fp8_quantize_s(current, H100) == pytest.approx(fp8_quantize_s(delayed, H100) + extra)
    assert compute_time_s(current, H100) == pytest.approx(compute_time_s(delayed, H100) + extra)


def test_a_sequence_parallel_gathered_operand_is_cast_as_its_shard_and_transposed_in_backward() -> None:
    """TE casts the rank's 1/tp shard row-wise (3 B) before the SP all-gather and builds the column-wise copy from
    the gathered FP8 tensor in backward (2 B); an operand nobody gathers keeps the fused cast-transpose (4 B)."""
    from dataclasses import replace

    rate = H100.memory_bandwidth_bytes_per_s * H100.memory_efficiency
    launch = H100.kernel_launch_s
    m, n, k = 8192, 4096, 4096
    fwd = replace(_gemm("attn.qkv", "fwd", "fp8"), tags={"fp8_sp_gathered": "input/8"})
    assert fp8_quantize_s(fwd, H100) == pytest.approx(3.0 / 8 * m * k / rate + launch)
    bwd = replace(_gemm("attn.qkv", "bwd", "fp8"), tags={"fp8_sp_gathered": "input/8"})
    assert fp8_quantize_s(bwd, H100) == pytest.approx((4.0 * m * n + 2.0 * m * k) / rate + 2 * launch)
    grad = replace(_gemm("attn.proj", "bwd", "fp8"), tags={"fp8_sp_gathered": "grad/4", "fp8_scaling": "current"})
    assert fp8_quantize_s(grad, H100) == pytest.approx(((3.0 + 2.0) / 4 + 2.0) * m * n / rate + 4 * launch)
    own = replace(_gemm("attn.proj", "fwd", "fp8"), tags={"fp8_sp_gathered": "grad/4"})
    assert fp8_quantize_s(own, H100) == fp8_quantize_s(_gemm("attn.proj", "fwd", "fp8"), H100)


def test_a_block_recipe_casts_the_gathered_shard_both_ways_and_transposes_nothing() -> None:
    """mxfp8 / blockwise (fp8_scaling=block): TE all-gathers column-wise block data too (distributed.py
    _all_gather_mxfp8), so the shard is cast both ways (4 B over 1/tp) and no transpose follows the gather."""
    from dataclasses import replace

    rate = H100.memory_bandwidth_bytes_per_s * H100.memory_efficiency
    launch = H100.kernel_launch_s
    m, n, k = 8192, 4096, 4096
    block = {"fp8_scaling": "block"}
    fwd = replace(_gemm("attn.qkv", "fwd", "fp8"), tags={**block, "fp8_sp_gathered": "input/8"})
    assert fp8_quantize_s(fwd, H100) == pytest.approx(4.0 / 8 * m * k / rate + launch)
    bwd = replace(_gemm("attn.qkv", "bwd", "fp8"), tags={**block, "fp8_sp_gathered": "input/8"})
    assert fp8_quantize_s(bwd, H100) == pytest.approx(4.0 * m * n / rate + launch)
    grad = replace(_gemm("attn.proj", "bwd", "fp8"), tags={**block, "fp8_sp_gathered": "grad/4"})
    assert fp8_quantize_s(grad, H100) == pytest.approx(4.0 / 4 * m * n / rate + launch)
    own = replace(_gemm("mlp.fc1", "fwd", "fp8"), tags=block)  # nothing gathered: as delayed scaling's cast
    assert fp8_quantize_s(own, H100) == fp8_quantize_s(_gemm("mlp.fc1", "fwd", "fp8"), H100)
