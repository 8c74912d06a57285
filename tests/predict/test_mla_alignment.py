"""Multi-latent attention's fused kernel reads two head widths, d_qk + d_rope (QK^T) and d_v (PV): the alignment
rule checks those (graph/mla_ops.HEAD_DIM_TAGS), not the FLOP-equivalent mean head_dim the op's dims carry."""

import json

import pytest

from llmperf_hook.api import predict_config
from llmperf_hook.graph.build import build_graph
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.predict.gemm_alignment import alignment_factor, config_alignment_warnings, measured_slowdown, \
    misalignment
from tests.frameworks.helpers import megatron

H100 = load_cluster("dgx-h100")
BASE = ["--num-layers", "2", "--hidden-size", "2048", "--num-attention-heads", "16", "--seq-length", "2048",
        "--max-position-embeddings", "2048", "--vocab-size", "129280", "--micro-batch-size", "1", "--bf16",
        "--global-batch-size", "8", "--swiglu", "--normalization", "RMSNorm", "--disable-bias-linear",
        "--position-embedding-type", "rope", "--multi-latent-attention", "--q-lora-rank", "1536", "--kv-lora-rank",
        "512", "--qk-pos-emb-head-dim", "64"]


def _mla(qk: int, v: int):
    return megatron("--qk-head-dim", str(qk), "--v-head-dim", str(v), base=BASE, gpus=1)


def _core(cfg):
    return next(op for op in build_graph(cfg, H100).all_ops() if op.name == "attn.core" and op.phase == "fwd")


def _core_warnings(cfg) -> list[str]:
    return [w for w in predict_config(cfg, H100).warnings if "Tensor Core kernels" in w and "attn.core" in w]


def test_aligned_widths_with_an_unaligned_mean_are_not_priced() -> None:
    """d_qk + d_rope = 192 and d_v = 120 are both multiples of 8; their mean 156 is not (the op's head_dim)."""
    core = _core(_mla(128, 120))
    assert core.dims["head_dim"] == 156 and core.flops == 2.0 * 2048 * 2048 * 16 * (192 + 120) * 0.5
    assert misalignment(core) is None and alignment_factor(core, H100.gpu) == 1.0
    assert _core_warnings(_mla(128, 120)) == []


def test_an_unaligned_value_width_is_named_and_priced() -> None:
    """d_v = 124 (4-aligned), d_qk + d_rope = 192; the mean 158 is 2-aligned, which the rule used to price."""
    core = _core(_mla(128, 124))
    found = misalignment(core)
    assert (found.dim, found.width, found.alignment_elements) == ("head_dim_v", 124, 4)
    assert alignment_factor(core, H100.gpu) == measured_slowdown("attention", "bf16", "fwd", 4)[0]
    [warning] = _core_warnings(_mla(128, 124))
    assert "head_dim_v = 124" in warning and "--v-head-dim multiples of 8" in warning
    scores = misalignment(_core(_mla(126, 128)))  # 126 + 64 = 190, 2-aligned
    assert (scores.dim, scores.width, scores.alignment_elements) == ("head_dim_qk", 190, 2)


def test_deepseek_widths_stay_aligned_and_explain_checks_mla_too(tmp_path) -> None:
    assert misalignment(_core(_mla(128, 128))) is None  # DeepSeek-V2/V3: 192 and 128
    assert not [w for w in config_alignment_warnings(_mla(128, 128)) if "attn.core" in w]
    [warning] = [w for w in config_alignment_warnings(_mla(128, 124)) if "attn.core" in w]
    assert "head_dim_v = 124" in warning


@pytest.mark.parametrize("qk, v", [(128, 120), (128, 124)])
def test_the_real_widths_leave_the_ops_cost_inputs_alone(qk: int, v: int) -> None:
    """The widths are tags: the profile's dims (b, s, heads, kv_heads, head_dim, causal), FLOPs and bytes are the
    mean square head's, as before."""
    core = _core(_mla(qk, v))
    d_q = qk + 64
    assert dict(core.dims) == {"b": 1, "s": 2048, "heads": 16, "kv_heads": 16, "head_dim": (d_q + v) // 2,
                               "causal": 1}
    assert core.bytes_moved == 2048 * 16 * (2 * d_q + 2 * v) * 2
    assert json.dumps(dict(core.tags), sort_keys=True) == json.dumps({"head_dim_qk": str(d_q), "head_dim_v": str(v)},
                                                                     sort_keys=True)
