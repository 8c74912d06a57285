"""tune keeps --attention-backend unfused (Transformer Engine) off context parallelism, which explain refuses
(frameworks/te_attention_rules.py: TE disables UnfusedDotProductAttention under CP)."""

from __future__ import annotations

import numpy as np

from llmperf_hook.api import resolve_command
from llmperf_hook.tune.candidate_rules import _kept_flag_masks

MEGATRON = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "4", "--hidden-size", "2048",
            "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
            "--vocab-size", "50304", "--micro-batch-size", "1", "--global-batch-size", "8", "--bf16"]
RULE = "--attention-backend unfused refuses cp > 1 under Transformer Engine"


def _masks(*extra: str) -> dict:
    cfg = resolve_command([*MEGATRON, *extra], {}, cluster="dgx-h100")[1]
    cols = {name: np.array([1, 1]) for name in ("sp", "pp", "rc", "vpp", "distopt")}
    cols["cp"] = np.array([1, 2])
    return _kept_flag_masks(cfg, cols, 8)  # the world of --nproc-per-node 8


def test_unfused_under_te_masks_cp_above_one() -> None:
    assert list(_masks("--attention-backend", "unfused")[RULE]) == [False, True]
    assert RULE not in _masks("--attention-backend", "fused")
    assert RULE not in _masks("--attention-backend", "unfused", "--transformer-impl", "local")
