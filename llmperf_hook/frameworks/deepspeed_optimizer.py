"""The ds_config's optimizer section, as DeepSpeed 0.19 builds and checks it (runtime/config.py, engine.py
_configure_basic_optimizer, _do_optimizer_sanity_check, runtime/zero/utils.py).

DeepSpeed builds the optimizer the section names when the script passes none (deepspeed.initialize without
optimizer=..., the Hugging Face Trainer with the section present): type adam / adamw -> FusedAdam (DeepSpeedCPUAdam
under offload), adagrad, lamb -> FusedLamb, lion, muon, the 1-bit optimizers, any other name -> torch.optim.<type>.
Under ZeRO (stage >= 1) the built optimizer must be one ZeRO supports (zero/utils.py ZERO_SUPPORTED_OPTIMIZERS:
torch Adam / AdamW / Adagrad, FusedAdam, DeepSpeedCPUAdam, DeepSpeedCPUAdagrad, Lion, MuonWithAuxAdam), unless
zero_allow_untested_optimizer is true ('You are using an untested ZeRO Optimizer').
Memory: Adam, AdamW, Lamb and the 1-bit Adam / Lamb keep two fp32 states per parameter (OptimizerConfig.name "adam");
Adagrad (sum of squares), Lion and Muon (momentum) and torch SGD (momentum) keep one ("sgd").
Megatron-DeepSpeed passes Megatron's own optimizer to deepspeed.initialize, which then ignores the section.
"""

from __future__ import annotations

from typing import Any

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.deepspeed_schema import ds_bool
from llmperf_hook.provenance import Source, SourceKind

TWO_STATES = frozenset({"adam", "adamw", "lamb", "onebitadam", "zerooneadam", "onebitlamb", "muadam", "muadamw"})
ONE_STATE = frozenset({"adagrad", "lion", "muon", "musgd", "sgd", "rmsprop"})
ZERO_SUPPORTED = frozenset({"adam", "adamw", "adagrad", "lion", "muon"})
"""Section types whose built optimizer is in ZERO_SUPPORTED_OPTIMIZERS (torch.optim.Adam / AdamW / Adagrad by name
too: the lower-cased names are the same)."""
COMPRESSED = frozenset({"onebitadam", "zerooneadam", "onebitlamb"})


def optimizer_settings(raw: dict[str, Any], zero_stage: Any, origin: str, src: dict[str, Source],
                       warnings: list[str]) -> dict[str, Any]:
    """{"optimizer_name": "adam" | "sgd"} from the section's type (nothing without a section); ConfigError where
    DeepSpeed's ZeRO refuses the optimizer."""
    section = raw.get("optimizer")
    if not isinstance(section, dict) or not isinstance(section.get("type"), str):
        return {}
    given = section["type"]
    kind = given.lower()
    allowed = raw.get("zero_allow_untested_optimizer", False)
    untested_ok = ds_bool(allowed, "zero_allow_untested_optimizer", origin) if allowed != "auto" else False
    if isinstance(zero_stage, int) and zero_stage >= 1 and kind not in ZERO_SUPPORTED and not untested_ok:
        raise ConfigError(f"{origin} optimizer.type {given!r} with ZeRO stage {zero_stage}: the optimizer DeepSpeed builds "
                          "for it is not one ZeRO supports, and deepspeed.initialize asserts 'You are using an untested "
                          "ZeRO Optimizer. Please add <\"zero_allow_untested_optimizer\": true>' (engine.py "
                          "_do_optimizer_sanity_check). Add that key, or use Adam, AdamW, Adagrad or Lion.")
    src["optimizer_name"] = Source(SourceKind.CONFIG_FILE, f"{origin} optimizer.type")
    if kind in COMPRESSED:
        warnings.append(f"{origin} optimizer.type {given}: its compressed (1-bit) gradient communication after the "
                        "warm-up is not modelled; priced as Adam with full-precision reduction")
    if kind in ONE_STATE:
        return {"optimizer_name": "sgd"}
    if kind not in TWO_STATES:
        warnings.append(f"{origin} optimizer.type {given}: DeepSpeed builds torch.optim.{given}, priced as Adam (two "
                        "fp32 states per parameter)")
    return {"optimizer_name": "adam"}
