"""What Megatron-LM refuses at run time through Transformer Engine's attention backend selection: --attention-backend
(flash / fused / unfused) leaves TE one backend (language_module.py _set_attention_backend sets the NVTE_*_ATTN
variables to 0 for the others), and TE's get_attention_backend (transformer_engine/pytorch/attention/
dot_product_attention/utils.py) may disable that one too for the job's softmax type or context parallelism, so TE's
DotProductAttention raises 'No dot product attention backend is available for the provided inputs' at the first
forward. Megatron-core's local spec (--transformer-impl local) runs its own DotProductAttention instead.
"""

from __future__ import annotations

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.flags import FlagValues


def check_te_attention_backend(flags: FlagValues) -> None:
    """ConfigError (exit 2) for a backend choice TE cannot run (see the module docstring)."""
    if flags.get("transformer_impl", "transformer_engine") != "transformer_engine":
        return
    _flash_with_sink_softmax(flags)
    _unfused_with_context_parallel(flags)


def _flash_with_sink_softmax(flags: FlagValues) -> None:
    """--softmax-type learnable / off-by-one under Transformer Engine with --attention-backend flash: Megatron sets
    NVTE_FLASH_ATTN=1, NVTE_FUSED_ATTN=0, NVTE_UNFUSED_ATTN=0 (language_module.py _set_attention_backend) and passes
    softmax_type to TE (TEDotProductAttention, TE >= 2.8), whose get_attention_backend disables FlashAttention for any
    softmax_type but vanilla (attention/dot_product_attention/utils.py 'Disabling FlashAttention for softmax_type',
    TE #2148): no backend is left, and DotProductAttention.forward raises at the first step. (The local spec's
    DotProductAttention takes every softmax_type.)"""
    softmax = flags.get("softmax_type", "vanilla")
    if softmax == "vanilla" or flags.get("attention_backend") != "flash":
        return
    backend_flag = flags.spelling("attention_backend")
    softmax_flag = flags.spelling("softmax_type")
    raise ConfigError(f"{backend_flag} flash with {softmax_flag} {softmax} (argv) under Transformer Engine: Megatron turns "
                      "TE's FusedAttention and UnfusedDotProductAttention off for the flash backend (NVTE_FUSED_ATTN=0, "
                      "NVTE_UNFUSED_ATTN=0) and TE disables FlashAttention for softmax_type "
                      f"'{softmax}' (only FusedAttention and UnfusedDotProductAttention support it), so TE raises 'No dot "
                      "product attention backend is available for the provided inputs' at the first forward. Use "
                      f"{backend_flag} fused (cuDNN sink attention) or auto, or unfused, or drop {softmax_flag}.")


def _unfused_with_context_parallel(flags: FlagValues) -> None:
    """--attention-backend unfused with context parallelism under Transformer Engine: Megatron leaves only
    NVTE_UNFUSED_ATTN=1 (_set_attention_backend) and TE's get_attention_backend disables UnfusedDotProductAttention
    'as it does not support context parallelism' (attention/dot_product_attention/utils.py), so TE raises 'No dot
    product attention backend is available' at the first forward. (The local spec refuses CP itself: megatron.py.)"""
    cp = flags.get("context_parallel_size", 1)
    if flags.get("attention_backend") != "unfused" or cp <= 1:
        return
    backend_flag = flags.spelling("attention_backend")
    cp_flag = flags.spelling("context_parallel_size")
    raise ConfigError(f"{backend_flag} unfused with {cp_flag} {cp} (argv) under Transformer Engine: Megatron turns TE's "
                      "FlashAttention and FusedAttention off for the unfused backend (NVTE_FLASH_ATTN=0, NVTE_FUSED_ATTN=0) "
                      "and TE disables UnfusedDotProductAttention under context parallelism, so TE raises 'No dot product "
                      f"attention backend is available for the provided inputs' at the first forward. Use {backend_flag} "
                      f"flash, fused or auto, or {cp_flag} 1.")
