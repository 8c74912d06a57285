"""Megatron memory settings around Transformer Engine fp8 and the loss (schedule/memory.py fp8_weight_bytes,
schedule/activations.py output_activation_bytes), on Megatron-LM's examples/llama/train_llama3_8b_h100_fp8.sh as
tests/schedule/test_fp8_memory.py resolves it (LINEAR = its 6,979,321,856 linear-layer parameters per rank):

  fp8 weight copies          Hopper (sm 9.0)              Blackwell (sm 10.0)
    delayed / tensorwise     2 per linear parameter       1 (one layout serves both GEMM orientations)
    mxfp8                    -                            2 x (1 + 1/32) (row- and column-wise blocks + scales)
    --fp8-param-gather       1 (the transpose)            0 (delayed), 1 + 2/32 (mxfp8)
    --disable-parameter-     1 per micro-batch in flight (the column-wise copy each forward saves for backward)
      transpose-cache
  --cross-entropy-fusion-impl te: logits kept in bf16 only, 4sbh + 2sbV instead of native's 4sbh + 10sbV (the
    unfused loss's 6sbV and the compiled backward's fp32 buffer, activations.native_fused_loss_extra_bytes).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from llmperf_hook import api
from llmperf_hook.frameworks.flags import parse_flags
from llmperf_hook.frameworks.script_flags import SCRIPT_FLAGS, apply_memory_flags
from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph.build import build_graph
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.schedule.memory import MX_SCALE_BYTES_PER_PARAM, estimate_memory, fp8_weight_bytes

CASE = Path(__file__).parents[1] / "frameworks/real_scripts/cases/mlm_llama3_8b_fp8.json"
S, H, V, LAYERS = 8192, 4096, 128256, 32
LINEAR = LAYERS * (H * 6144 + H * H + 3 * H * 14336)
ENV = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}


def _argv(*extra: str) -> list[str]:
    return list(json.loads(CASE.read_text())["argv"]) + list(extra)


def _resolve(*extra: str, cluster: str = "dgx-h100") -> TrainingConfig:
    """The example as resolve_config will build it once it applies script_flags.apply_memory_flags."""
    job, cfg = api.resolve_command(_argv(*extra), ENV, cluster=cluster)[:2]
    return apply_memory_flags(cfg, parse_flags(job.script_args, SCRIPT_FLAGS))


@pytest.fixture(scope="module")
def example() -> TrainingConfig:
    return _resolve()


def _parts(cfg: TrainingConfig, cluster_name: str = "dgx-h100") -> dict[str, int]:
    cluster = load_cluster(cluster_name)
    return dict(estimate_memory(cfg, build_graph(cfg, cluster), cluster).components)


def _no_gather(cfg: TrainingConfig) -> TrainingConfig:
    return replace(cfg, optimizer=replace(cfg.optimizer, fp8_param_gather=False))


def test_flags_read_by_apply_memory_flags(example: TrainingConfig) -> None:
    assert (example.fp8_recipe, example.parameter_transpose_cache, example.cross_entropy_fusion_impl) == \
        ("delayed", True, "native")  # the script gives --cross-entropy-loss-fusion, impl default native
    cfg = _resolve("--disable-parameter-transpose-cache", "--cross-entropy-fusion-impl", "te", "--fp8-recipe", "mxfp8",
                   cluster="dgx-b200")  # MXFP8 runs on Blackwell only (api.check_precision_support)
    assert (cfg.fp8_recipe, cfg.parameter_transpose_cache, cfg.cross_entropy_fusion_impl) == ("mxfp8", False, "te")
    assert "--cross-entropy-fusion-impl" in str(cfg.sources["cross_entropy_fusion_impl"])


def test_blackwell_keeps_one_layout_for_per_tensor_recipes(example: TrainingConfig) -> None:
    assert _parts(_no_gather(example), "dgx-h100")["fp8_weight_copies"] == pytest.approx(2 * LINEAR, abs=1)
    assert _parts(_no_gather(example), "dgx-b200")["fp8_weight_copies"] == pytest.approx(LINEAR, abs=1)
    assert "fp8_weight_copies" not in _parts(example, "dgx-b200")  # --fp8-param-gather: the weight is the copy


def test_mxfp8_keeps_row_and_column_wise_blocks(example: TrainingConfig) -> None:
    mx = replace(example, fp8_recipe="mxfp8")
    assert _parts(_no_gather(mx), "dgx-b200")["fp8_weight_copies"] == \
        pytest.approx(2 * (1 + MX_SCALE_BYTES_PER_PARAM) * LINEAR, rel=1e-9)
    assert _parts(mx, "dgx-b200")["fp8_weight_copies"] == \
        pytest.approx((1 + 2 * MX_SCALE_BYTES_PER_PARAM) * LINEAR, rel=1e-9)


def test_disabled_transpose_cache_keeps_one_column_wise_copy_per_microbatch_in_flight(example: TrainingConfig) -> None:
    uncached = replace(_no_gather(example), parameter_transpose_cache=False)
    assert _parts(uncached)["fp8_weight_copies"] == pytest.approx(LINEAR, abs=1)  # PP 1: one micro-batch in flight
    pp4 = replace(uncached, parallel=replace(uncached.parallel, pp=4, dp=2))
    cluster = load_cluster("dgx-h100")
    stage0 = build_graph(pp4, cluster).stages[0]
    # stage 0 of PP 4 holds 4 micro-batches' saved copies of its quarter of the layers: more than the cache's 2 B
    assert fp8_weight_bytes(pp4, stage0, cluster.gpu)[1] == pytest.approx(4 * LINEAR / 4, rel=0.01)
    full = replace(uncached, recompute=replace(uncached.recompute, granularity="full", method="uniform", num_layers=1))
    assert _parts(full)["fp8_weight_copies"] == pytest.approx(LINEAR / LAYERS, rel=0.01)  # one layer's, recomputed


def test_te_cross_entropy_keeps_only_the_bf16_logits(example: TrainingConfig) -> None:
    sbh = S * H
    assert _parts(example)["logits_and_loss"] == pytest.approx(4 * sbh + 10 * S * V, abs=1)
    assert _parts(replace(example, cross_entropy_fusion_impl="te"))["logits_and_loss"] == \
        pytest.approx(4 * sbh + 2 * S * V, abs=1)


def test_resolve_reads_the_memory_flags() -> None:
    cfg = api.resolve_command(_argv("--cross-entropy-fusion-impl", "te"), ENV, cluster="dgx-h100")[1]
    assert cfg.cross_entropy_fusion_impl == "te"
