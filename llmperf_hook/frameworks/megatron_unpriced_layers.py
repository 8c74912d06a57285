"""Megatron-LM flags that change what a layer computes, or add a second model to the step, and that llmperf's graph
does not price: one warning each (priced as the plain softmax-attention GPT), and the start-up asserts of the one
that comes with its own code path (ModelOpt distillation).

Sources (core_v0.16.1; HEAD d98e8a6 alike): TransformerConfig.experimental_attention_variant ('gated_delta_net',
'dsa') and linear_attention_freq ('An integer N: (N-1) LA layers for every 1 SDPA layer', experimental_attention_
variant_module_specs.py get_linear_attention_pattern), attention_output_gate ('apply output gate to the attention
layers'); all three reach argparse as generated TransformerConfig options (argument_utils.py). --export-kd-teacher-load
is defined only with nvidia-modelopt installed (pretrain_gpt.py `extra_args_provider=add_modelopt_args if
has_nvidia_modelopt`), and turns ModelOpt on (training.py get_model: 'For distillation ckpts without ModelOpt
state'), whose builder loads the teacher and asserts (post_training/model_builder.py modelopt_gpt_mamba_builder;
model_provider.py from core_v0.13.0): no --manual-gc, no --tp-comm-overlap, no interleaved schedule at PP > 1. And two
flags that change where activations or ranks live (_placement_warnings).
Megatron-LM's CI runs such jobs: tests/functional_tests/test_cases/gpt/gpt3_mcore_te_tp2_pp1_gdn and
gpt3_mcore_te_tp2_pp1_modelopt_distill_resume.
"""

from __future__ import annotations

from typing import Sequence

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.flags import FlagValues
from llmperf_hook.frameworks.megatron_rules import list_values
from llmperf_hook.frameworks.training_config import ParallelLayout

_VARIANTS = {
    "gated_delta_net": "gated delta net linear attention in (N-1) of every N layers (--linear-attention-freq N)",
    "gdn": "gated delta net linear attention in (N-1) of every N layers (--linear-attention-freq N)",
    "dsa": "DeepSeek sparse attention (its indexer and top-k attention)",
}


def _last(script_args: Sequence[str], flag: str) -> str | None:
    values = list_values(script_args, flag)
    return values[-1] if values else None


def _switched(script_args: Sequence[str], flag: str) -> bool:
    """A store_true option: TransformerConfig's generated options that default to False take `--X` alone (the
    `--no-X` / `--disable-X` spellings are made for those defaulting to True: argument_utils.py)."""
    return any(word.split("=", 1)[0].replace("_", "-") == flag for word in script_args)


def unpriced_layer_warnings(script_args: Sequence[str], parallel: ParallelLayout) -> list[str]:
    """One line per given flag of this module's kind."""
    warnings = _placement_warnings(script_args, parallel)
    variant = _last(script_args, "--experimental-attention-variant")
    if variant:
        what = _VARIANTS.get(variant, "an attention variant")
        warnings.append(f"--experimental-attention-variant {variant}: {what} not modelled; every layer priced as "
                        "softmax attention (step time and memory off either way: the variant's own projections and "
                        "state cost more, its attention less at long sequences)")
    if _switched(script_args, "--attention-output-gate"):
        warnings.append("--attention-output-gate: the attention output gate not modelled (its num_heads x kv_channels "
                        "more QKV GEMM columns, sigmoid and product: step time and memory under-estimated)")
    if _last(script_args, "--export-kd-teacher-load"):
        warnings.append("--export-kd-teacher-load: knowledge distillation not modelled: the teacher model's forward "
                        "each step, its weights and the distillation loss are not priced, only the student is (step "
                        "time and memory under-estimated)")
    return warnings


def _placement_warnings(script_args: Sequence[str], parallel: ParallelLayout) -> list[str]:
    """--fine-grained-activation-offloading: the inputs of --offload-modules go to host memory (TransformerConfig
    fine_grained_activation_offloading / offload_modules); --use-tp-pp-dp-mapping: ranks in 'tp-cp-ep-pp-dp' order
    (training/initialize.py initialize_model_parallel), which differs from the default only with PP and DP > 1."""
    warnings = []
    if _switched(script_args, "--fine-grained-activation-offloading"):
        modules = " ".join(list_values(script_args, "--offload-modules") or []) or "none given"
        warnings.append(f"--fine-grained-activation-offloading (--offload-modules {modules}): the offloaded inputs "
                        "are priced as kept in GPU memory (peak memory over-estimated) and their host copies are not "
                        "timed (step time under-estimated where they are not hidden)")
    if _switched(script_args, "--use-tp-pp-dp-mapping") and parallel.pp > 1 and parallel.dp > 1:
        warnings.append("--use-tp-pp-dp-mapping: ranks in tp-cp-ep-pp-dp order; collectives placed in the default "
                        "tp-cp-ep-dp-pp order (which of the DP and pipeline groups cross nodes differs: their "
                        "communication time off either way)")
    return warnings


def check_distillation(flags: FlagValues, script_args: Sequence[str], parallel: ParallelLayout) -> list[str]:
    """ModelOpt distillation's start-up asserts (module docstring); the one core_v0.17.0 added (f5238ba5bb, 2026-02:
    no --cross-entropy-fusion-impl te) is a warning, as core_v0.16 runs it."""
    if not _last(script_args, "--export-kd-teacher-load"):
        return []
    given = {"--manual-gc": bool(flags.get("manual_gc")), "--tp-comm-overlap": bool(flags.get("tp_comm_overlap")),
             "an interleaved schedule (virtual pipeline stages at PP > 1)": parallel.pp > 1 and parallel.vpp > 1}
    clashes = [name for name, on in given.items() if on]
    if clashes:
        raise ConfigError(f"--export-kd-teacher-load with {', '.join(clashes)}: Megatron's ModelOpt distillation "
                          "builder asserts 'ModelOpt Distillation currently incompatible with' each "
                          "(megatron/post_training/model_builder.py). Drop them for a distillation run.")
    if _last(script_args, "--cross-entropy-fusion-impl") != "te":
        return []
    return ["--export-kd-teacher-load with --cross-entropy-fusion-impl te: Megatron-LM core_v0.17.0 and later stop at "
            "start-up ('ModelOpt Distillation currently incompatible with TransformerEngine Cross-Entropy "
            "implementation', post_training/model_builder.py); core_v0.16 runs it. Use --cross-entropy-fusion-impl "
            "native"]
