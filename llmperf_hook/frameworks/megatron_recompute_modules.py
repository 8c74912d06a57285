"""Megatron-LM's --recompute-modules: the modules TransformerConfig lets the selective recompute re-run, and its
checks on what each needs, on the resolved TrainingConfig (validation.validate_config runs them, for tuned layouts
too). The checks on settings TrainingConfig does not carry are megatron_rules._check_recompute_module_needs; what
the graph replays of each module is graph/backward._module_replays (frameworks/megatron.RECOMPUTE_MODULES_TIMED).
"""

from __future__ import annotations

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.training_config import TrainingConfig

RECOMPUTE_MODULES = frozenset({"core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts",
                               "gdn_norm_out", "gdp_in_proj", "gdp_qkv", "mhc"})
"""--recompute-modules TransformerConfig.__post_init__ allows under --recompute-granularity selective (megatron/core/
transformer/transformer_config.py, `allowed_modules`): HEAD d98e8a6 :1944-1957, the union over releases as for
megatron_rules.CHOICES. core_v0.12.0 (3b141a2471, which brought the flag) to core_v0.13 allow the first six, core_v0.14 to
core_v0.18 (megatron-core 0.16.1 in the venv, :1197-1206) add shared_experts, core_v0.19.0 gdn_norm_out, HEAD the
gated-delta-product and hyper-connection ones, each together with the checks on what it needs (check_recompute_modules
below, megatron_rules._check_recompute_module_needs). "moe_layer", which the --moe-layer-recompute
deprecation note names, is in no release's set (that flag appends "moe"): Megatron refuses it."""


def _at(cfg: TrainingConfig, key: str, value: object) -> str:
    source = cfg.sources.get(key)
    return f"{value} ({source})" if source else str(value)


def _after_the_checks(cfg: TrainingConfig) -> bool:
    """--moe-layer-recompute turns selective recompute on after the module checks ran on the granularity given
    (transformer_config.py HEAD :2012-2025, 0.16.1 :1254-1266): the modules then go unchecked."""
    return "--moe-layer-recompute" in str(cfg.sources.get("recompute", ""))


def check_recompute_modules(cfg: TrainingConfig) -> None:
    """TransformerConfig.__post_init__ on --recompute-modules under selective recompute (transformer_config.py,
    Megatron-LM HEAD d98e8a6 :1943-2011; the same lines in megatron-core 0.16.1 :1196-1252): the allowed set
    (RECOMPUTE_MODULES), then what a module needs. Checked on the resolved configuration because
    tune moves a command between full and selective recompute, and Megatron reads the modules only under selective
    (any name passes under full). The checks on unmodelled settings are
    megatron_rules._check_recompute_module_needs'."""
    r, m = cfg.recompute, cfg.model
    if cfg.framework != "megatron" or r.granularity != "selective" or _after_the_checks(cfg):
        return
    given = f"--recompute-modules {_at(cfg, 'recompute_modules', ' '.join(r.modules))} under selective recompute"
    bad = sorted(set(r.modules) - RECOMPUTE_MODULES)
    if bad:
        raise ConfigError(f"{given}: {', '.join(bad)} is not a module Megatron recomputes; TransformerConfig asserts "
                          f"'Invalid choices for recompute_modules' (allowed: {', '.join(sorted(RECOMPUTE_MODULES))}). "
                          "Drop or correct it.")
    shared_overlap = m.moe_shared_expert_intermediate_size > 0 and m.moe_dispatch.shared_expert_overlap
    fp8_delayed = cfg.precision == "fp8" and cfg.fp8_recipe == "delayed"
    needs = (
        ("moe_act", not m.moe_dispatch.grouped_gemm, "moe_act in recompute_modules is only supported with "
         "moe_grouped_gemm", "add --moe-grouped-gemm"),
        ("mla_up_proj", not m.multi_latent_attention, "mla_up_proj in recompute_modules is only supported with "
         "multi_latent_attention", "add --multi-latent-attention (or drop mla_up_proj)"),
        ("shared_experts", shared_overlap, "shared_experts recompute cannot work with --moe-shared-expert-overlap",
         "drop --moe-shared-expert-overlap"),
        ("moe_act", fp8_delayed, "Delayed scaling does not support moe_act and layernorm recompute for fp8",
         "use another --fp8-recipe (tensorwise, mxfp8, blockwise)"),
        ("layernorm", fp8_delayed, "Delayed scaling does not support moe_act and layernorm recompute for fp8",
         "use another --fp8-recipe (tensorwise, mxfp8, blockwise)"))
    for module, broken, quote, fix in needs:
        if module in r.modules and broken:
            raise ConfigError(f"{given}: Megatron's TransformerConfig raises '{quote}'. To keep {module}, {fix}; or "
                              f"drop {module} from --recompute-modules.")
