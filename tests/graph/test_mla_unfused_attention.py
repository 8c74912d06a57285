"""MLA under --attention-backend unfused: Megatron's TE spec builds MLA's core as TEDotProductAttention
(gpt_layer_specs.py backend.core_attention()), and LanguageModule._set_attention_backend sets NVTE_FLASH_ATTN=0,
NVTE_FUSED_ATTN=0, NVTE_UNFUSED_ATTN=1 for it (core_v0.16.1), so TE runs UnfusedDotProductAttention: the QK^T
and AV bmms over the full s x s scores, QK^T over d_qk + d_rope channels and AV over d_v. Seen in Megatron-LM CI's
gpt3_mcore_te_tp2_pp2_ep4_etp1_* cases (MLA, unfused for deterministic numerics), which were priced as the fused
kernel (0.40-0.46x of the step time CI measured; 0.73-0.83x after)."""

from __future__ import annotations

from llmperf_hook.graph.build import build_graph
from tests.graph.test_mla_mtp_graph import H100, HEADS, SEQ, TP, _block, _cfg


def _attention(cfg) -> dict:
    return {op.name: op for op in _block(build_graph(cfg, H100), "dense_layer").fwd if op.name.startswith("attn.")}


def test_unfused_mla_runs_the_two_bmms_over_its_two_head_widths() -> None:
    ops = _attention(_cfg("--attention-backend", "unfused"))
    local = HEADS // TP
    assert "attn.core" not in ops
    assert dict(ops["attn.qk"].dims) == {"batch": local, "m": SEQ, "n": SEQ, "k": 128 + 64}
    assert dict(ops["attn.av"].dims) == {"batch": local, "m": SEQ, "n": 128, "k": SEQ}
    assert ops["attn.qk"].flops + ops["attn.av"].flops == 2.0 * local * SEQ * SEQ * (192 + 128)  # no causal half
    assert "attn.softmax" in ops


def test_other_backends_keep_the_fused_mla_kernel() -> None:
    for backend in ("auto", "fused", "flash"):
        ops = _attention(_cfg("--attention-backend", backend))
        assert "attn.core" in ops and "attn.qk" not in ops
