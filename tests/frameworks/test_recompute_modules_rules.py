"""Megatron-LM's --recompute-modules checks (TransformerConfig.__post_init__, transformer_config.py HEAD d98e8a6
:1940-2051 and megatron-core 0.16.1 :1193-1266): which names and combinations Megatron refuses, only under
selective recompute, and the tie between the names Megatron accepts, the ones the graph times
(frameworks/megatron.RECOMPUTE_MODULES_TIMED, graph/backward._module_replays) and the 'not timed' warning."""

from __future__ import annotations

import dataclasses

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.flags import parse_flags
from llmperf_hook.frameworks.megatron import RECOMPUTE_MODULES_TIMED, _recompute_modules
from llmperf_hook.frameworks.megatron_recompute_modules import RECOMPUTE_MODULES
from llmperf_hook.frameworks.script_flags import SCRIPT_FLAGS
from llmperf_hook.frameworks.validation import validate_config
from llmperf_hook.graph.backward import _module_replays
from tests.frameworks.helpers import megatron

SELECTIVE = ("--recompute-granularity", "selective")
FULL = ("--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1")
MOE = ("--num-experts", "8", "--moe-router-topk", "2", "--moe-grouped-gemm")
SHARED = (*MOE, "--moe-shared-expert-intermediate-size", "4096", "--moe-token-dispatcher-type", "alltoall",
          "--disable-bias-linear")
MLA = ("--multi-latent-attention", "--q-lora-rank", "1536", "--kv-lora-rank", "512", "--qk-head-dim", "128",
       "--qk-pos-emb-head-dim", "64", "--v-head-dim", "128")


@pytest.mark.parametrize(("args", "fragment"), [
    # no release's allowed set holds moe_layer, though the --moe-layer-recompute deprecation note names it
    ((*SELECTIVE, "--recompute-modules", "moe_layer", *MOE), "moe_layer is not a module"),
    ((*SELECTIVE, "--recompute-modules", "core_attn", "attention"), "Invalid choices for recompute_modules"),
    (("--recompute-activations", "--recompute-modules", "moe_layer"), "moe_layer"),  # validate_args: selective
    ((*SELECTIVE, "--recompute-modules", "mla_up_proj"), "only supported with multi_latent_attention"),
    ((*SELECTIVE, "--recompute-modules", "moe_act", "--num-experts", "8", "--moe-router-topk", "2"), "moe_grouped_gemm"),
    ((*SELECTIVE, "--recompute-modules", "shared_experts", *SHARED, "--moe-shared-expert-overlap"),
     "cannot work with --moe-shared-expert-overlap"),
    ((*SELECTIVE, "--recompute-modules", "layernorm", "--bf16", "--fp8-format", "hybrid"), "Delayed scaling"),
    ((*SELECTIVE, "--recompute-modules", "gdn_norm_out"), "experimental_attention_variant='gdn'"),
    ((*SELECTIVE, "--recompute-modules", "mhc"), "requires enable_mhc_connections"),
    ((*SELECTIVE, "--recompute-modules", "mhc", "mlp", "--enable-mhc-connections"), "cannot be used together"),
    ((*SELECTIVE, "--recompute-modules", "mhc", "--enable-mhc-connections", "--mhc-recompute-layer-num", "0"),
     "positive integer"),
    ((*SELECTIVE, "--recompute-modules", "moe", *MOE, "--fine-grained-activation-offloading", "--offload-modules",
      "moe_act"), "while recomputing the entire MoE layer"),
])
def test_megatron_refuses(args: tuple[str, ...], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        megatron(*args)


@pytest.mark.parametrize("args", [
    (*SELECTIVE, "--recompute-modules", "mla_up_proj", *MLA),
    (*SELECTIVE, "--recompute-modules", "moe", "moe_act", "shared_experts", *SHARED),
    (*SELECTIVE, "--recompute-modules", "layernorm", "--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"),
    # TransformerConfig checks the modules only under selective: full recompute and no recompute take any name
    (*FULL, "--recompute-modules", "moe_layer"),
    ("--recompute-modules", "mla_up_proj", "mhc"),
    # --moe-layer-recompute turns selective on after the module checks (transformer_config.py :2012-2025)
    ("--moe-layer-recompute", "--recompute-modules", "moe_layer", *MOE),
])
def test_megatron_accepts(args: tuple[str, ...]) -> None:
    megatron(*args)


def test_a_tuned_move_to_selective_is_checked() -> None:
    """tune moves a command between full and selective recompute: the set is checked on the resolved config."""
    cfg = megatron(*FULL, "--recompute-modules", "moe_layer")
    with pytest.raises(ConfigError, match="moe_layer is not a module"):
        validate_config(dataclasses.replace(cfg, recompute=dataclasses.replace(
            cfg.recompute, granularity="selective", method=None, num_layers=None)))


def test_moe_recompute_with_the_ep_overlap_warns_as_only_2026_releases_refuse_it() -> None:
    cfg = megatron(*SELECTIVE, "--recompute-modules", "moe", *MOE, "--moe-token-dispatcher-type", "alltoall",
                   "--expert-model-parallel-size", "2", "--overlap-moe-expert-parallel-comm", "--bf16")
    assert any("disable moe in recompute_modules" in w for w in cfg.warnings), cfg.warnings


def _untimed_warning(module: str) -> list[str]:
    flags = parse_flags(["--recompute-modules", module], SCRIPT_FLAGS)
    warnings: list[str] = []
    _recompute_modules(flags, "selective", {}, warnings)
    return warnings


@pytest.mark.parametrize("module", sorted(RECOMPUTE_MODULES))
def test_every_module_megatron_accepts_is_timed_or_warned(module: str) -> None:
    warned = _untimed_warning(module)
    if module in RECOMPUTE_MODULES_TIMED:
        assert not any("not timed" in w for w in warned), warned
    else:
        assert any(f"{module}: the recomputed forward is not timed" in w for w in warned), warned


def test_timed_modules_are_the_ones_the_graph_replays() -> None:
    """Each timed module replays at least one forward op of a graph that has it (local norms, MoE with shared
    experts); an untimed one replays none: RECOMPUTE_MODULES_TIMED and _module_replays agree."""
    from llmperf_hook.api import predict_command
    from llmperf_hook.graph.build import build_graph

    argv = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "1024",
            "--num-attention-heads", "16", "--seq-length", "1024", "--max-position-embeddings", "1024",
            "--vocab-size", "32000", "--micro-batch-size", "1", "--global-batch-size", "8", "--bf16",
            "--transformer-impl", "local", "--moe-layer-freq", "2", *SHARED, "--moe-ffn-hidden-size", "512",
            "--expert-model-parallel-size", "2"]
    pred = predict_command(argv, {}, cluster="dgx-h100")
    graph = build_graph(pred.config, pred.cluster)
    ops = [op for block in graph.stages[0].chunks[0].blocks for op in block.fwd]
    assert RECOMPUTE_MODULES_TIMED <= RECOMPUTE_MODULES
    for module in sorted(RECOMPUTE_MODULES):
        replayed = [op.name for op in ops if _module_replays(module, op, te_norms=False)]
        assert bool(replayed) == (module in RECOMPUTE_MODULES_TIMED), (module, replayed)
