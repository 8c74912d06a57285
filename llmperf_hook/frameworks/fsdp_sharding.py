"""PyTorch FSDP as a Hugging Face job asks for it, priced as the ZeRO stage that shards the same state.

Two routes: the Trainer's `--fsdp "full_shard auto_wrap"` (transformers TrainingArguments.fsdp, words of
FSDPOption: full_shard, shard_grad_op, hybrid_shard, hybrid_shard_zero2, no_shard, offload, auto_wrap), and
`accelerate launch --use_fsdp` (its plugin's FSDP_RESHARD_AFTER_FORWARD / FSDP_SHARDING_STRATEGY,
FSDP_OFFLOAD_PARAMS, FSDP_ACTIVATION_CHECKPOINTING; launch/accelerate.py). FULL_SHARD (reshard after forward:
parameters, gradients and optimizer states sharded, parameters all-gathered before each forward and backward)
is ZeRO-3; SHARD_GRAD_OP (parameters kept after forward) is ZeRO-2; NO_SHARD is plain data parallelism (Zhao et
al. 2023, "PyTorch FSDP", section 3). The hybrid strategies shard within a node and replicate across nodes;
they are priced as sharding over the whole data-parallel group, with a warning. CPU offload moves parameters,
gradients and the optimizer step to the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from llmperf_hook.errors import ConfigError
from llmperf_hook.provenance import Source, SourceKind

_STAGES = {"full_shard": 3, "true": 3, "1": 3, "shard_grad_op": 2, "false": 2, "2": 2, "no_shard": 0, "3": 0,
           "hybrid_shard": 3, "4": 3, "hybrid_shard_zero2": 2, "5": 2}
_HYBRID = ("hybrid_shard", "hybrid_shard_zero2", "4", "5")
_HF_OPTIONS = ("full_shard", "shard_grad_op", "hybrid_shard", "hybrid_shard_zero2", "no_shard", "offload", "auto_wrap")
"""transformers trainer_utils.FSDPOption."""


@dataclass(frozen=True)
class FsdpSharding:
    zero_stage: int
    """The ZeRO stage that shards what this FSDP strategy shards."""
    offload: bool
    """CPU offload of parameters, gradients and the optimizer step."""
    activation_checkpointing: bool
    source: Source


def fsdp_sharding(hf_fsdp: Any, env: Mapping[str, str], warnings: list[str]) -> FsdpSharding | None:
    """The FSDP setting of a Hugging Face job (the Trainer's --fsdp value, or accelerate's FSDP plugin), or None."""
    if hf_fsdp not in (None, ""):
        words = str(hf_fsdp).lower().split()
        unknown = [w for w in words if w not in _HF_OPTIONS]
        if unknown:  # FSDPOption(w) raises ValueError in TrainingArguments.__post_init__
            raise ConfigError(f"--fsdp {hf_fsdp!r}: {', '.join(unknown)} is not an FSDP option of transformers "
                              f"({', '.join(_HF_OPTIONS)}); the Trainer stops at start-up.")
        strategy = next((w for w in words if w in _STAGES), "full_shard")  # offload / auto_wrap alone: full_shard
        return _sharding(strategy, "offload" in words, False, Source(SourceKind.ARGV, "--fsdp"), warnings)
    if env.get("ACCELERATE_USE_FSDP", "").lower() != "true":
        return None
    var = "FSDP_RESHARD_AFTER_FORWARD" if "FSDP_RESHARD_AFTER_FORWARD" in env else "FSDP_SHARDING_STRATEGY"
    strategy = env.get(var, "full_shard").lower()
    if strategy not in _STAGES:
        raise ConfigError(f"accelerate {var.lower()} {env[var]!r} is not an FSDP sharding strategy (FULL_SHARD, "
                          "SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2, or true / false).")
    return _sharding(strategy, env.get("FSDP_OFFLOAD_PARAMS", "false").lower() == "true",
                     env.get("FSDP_ACTIVATION_CHECKPOINTING", "false").lower() == "true",
                     Source(SourceKind.LAUNCHER, f"accelerate FSDP plugin ({var.lower()} {strategy})"), warnings)


def _sharding(strategy: str, offload: bool, checkpointing: bool, source: Source, warnings: list[str]) -> FsdpSharding:
    if strategy in _HYBRID:
        warnings.append(f"FSDP {strategy}: sharding within a node and replication across nodes is priced as "
                        "sharding over the whole data-parallel group")
    return FsdpSharding(_STAGES[strategy], offload, checkpointing, source)
