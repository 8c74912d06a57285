"""Hand-built TrainingConfigs of well-known models, for tests, benchmarks and the speed check.

Production paths get TrainingConfig from the launch command (frameworks.resolve_job); these build the same
dataclass directly from a few numbers, applying Megatron's derived-value rules (kv_channels, padded vocab,
num_microbatches).
"""

from __future__ import annotations

from typing import Any

from llmperf_hook.frameworks.training_config import (
    BatchConfig, ModelShape, OptimizerConfig, ParallelLayout, RecomputeConfig, TrainingConfig,
)


def padded_vocab(vocab: int, tp: int, divisible_by: int = 128) -> int:
    """Megatron _vocab_size_with_padding: round up to a multiple of divisible_by * tp."""
    multiple = divisible_by * tp
    return -(-vocab // multiple) * multiple


def make_config(
    *, num_layers: int, hidden_size: int, num_attention_heads: int, seq_length: int = 2048,
    ffn_hidden_size: int | None = None, num_query_groups: int | None = None, vocab_size: int = 51200,
    tp: int = 1, pp: int = 1, vpp: int = 1, cp: int = 1, dp: int = 1, ep: int = 1,
    sequence_parallel: bool = False, micro_batch_size: int = 1, global_batch_size: int | None = None,
    precision: str = "bf16", recompute: str = "none", framework: str = "megatron",
    model_kw: dict[str, Any] | None = None, optimizer_kw: dict[str, Any] | None = None,
    parallel_kw: dict[str, Any] | None = None, attention_backend: str = "flash",
) -> TrainingConfig:
    world = tp * pp * cp * dp
    gbs = global_batch_size or micro_batch_size * dp
    model = ModelShape(
        num_layers=num_layers, hidden_size=hidden_size, ffn_hidden_size=ffn_hidden_size or 4 * hidden_size,
        num_attention_heads=num_attention_heads, num_query_groups=num_query_groups or num_attention_heads,
        kv_channels=hidden_size // num_attention_heads, seq_length=seq_length, vocab_size=vocab_size,
        padded_vocab_size=padded_vocab(vocab_size, tp), **(model_kw or {}),
    )
    parallel = ParallelLayout(tp=tp, pp=pp, vpp=vpp, cp=cp, dp=dp, ep=ep, etp=tp if ep == 1 else 1,
                              sequence_parallel=sequence_parallel, **(parallel_kw or {}))
    return TrainingConfig(
        framework=framework, launcher="torchrun", world_size=world, nnodes=max(1, world // 8),
        nproc_per_node=min(8, world), model=model, parallel=parallel,
        batch=BatchConfig(micro_batch_size, gbs, gbs // (micro_batch_size * dp)),
        precision=precision,  # type: ignore[arg-type]
        recompute=RecomputeConfig(granularity=recompute),  # type: ignore[arg-type]
        optimizer=OptimizerConfig(**(optimizer_kw or {})), attention_backend=attention_backend,  # type: ignore[arg-type]
        pipeline_schedule="interleaved" if vpp > 1 else ("1f1b" if pp > 1 else "none"),
    )


def gpt3_175b(**kw: Any) -> TrainingConfig:
    """GPT-3 175B (Brown et al. 2020 Table 2.1): 96 layers, h 12288, 96 heads, seq 2048."""
    base: dict[str, Any] = dict(num_layers=96, hidden_size=12288, num_attention_heads=96, seq_length=2048)
    return make_config(**{**base, **kw})


def llama3_8b(**kw: Any) -> TrainingConfig:
    """Llama-3 8B (Meta 2024 model card): 32 layers, h 4096, 32 heads / 8 KV, SwiGLU 14336, RMSNorm, RoPE."""
    base: dict[str, Any] = dict(
        num_layers=32, hidden_size=4096, num_attention_heads=32, num_query_groups=8, ffn_hidden_size=14336,
        seq_length=8192, vocab_size=128256,
        model_kw=dict(swiglu=True, normalization="RMSNorm", position_embedding="rope", untie_embeddings=True,
                      add_bias_linear=False),
    )
    return make_config(**{**base, **kw})
