"""Which GELU a job runs: the tanh approximation or the exact (erf) one.

The two cost differently on a CPU (one AVX2 EPYC thread, 131,072 fp32 elements: exact forward 0.17 ms, tanh 0.60 ms;
backward 0.33 vs 0.70 ms; /work/notes/h183.md), so the graph tags its gelu op with the variant and a profile that
sampled both prices each with its own samples (predict/dispatch.gelu_variant).

| job                                                  | variant | source                                           |
| ---------------------------------------------------- | ------- | ------------------------------------------------ |
| Megatron-LM, bias-GeLU fusion on (default, biases)   | tanh    | core/transformer/mlp.py: bias_gelu_impl,         |
|                                                      |         | core/fusions/fused_bias_gelu.py "tanh approx."   |
| Megatron-LM, --no-bias-gelu-fusion / no biases       | exact   | mlp.py: activation_func = F.gelu (config default)|
| Megatron-LM --use-te-activation-func                 | tanh    | mlp.py: TEActivationOp; TE common/util/math.h    |
| Megatron-DeepSpeed --openai-gelu                     | tanh    | legacy ParallelMLP: openai_gelu = gelu_impl      |
| Megatron-DeepSpeed --onnx-safe (without openai-gelu) | exact   | legacy ParallelMLP: erf_gelu                     |
| a user's own script (no Megatron layers)             | as its  | F.gelu / nn.GELU calls read from its code:       |
|                                                      | code    | approximate='tanh' or 'none' (torch's default)   |

Megatron-LM sources: HEAD d98e8a64dd megatron/core/transformer/mlp.py (forward: `bias_gelu_impl` only under
bias_activation_fusion with activation_func F.gelu; else `self.activation_func`), transformer_config.py
`activation_func = F.gelu`, training/arguments.py (--no-bias-gelu-fusion; validate_args sets bias_gelu_fusion False
without --add-bias-linear). Megatron-LM's --openai-gelu has had no effect in megatron-core since its legacy models
were removed (10b514bf57); Megatron-DeepSpeed keeps the legacy ParallelMLP (Megatron-LM 5c7968afa8
megatron/legacy/model/transformer.py: `if args.openai_gelu: openai_gelu elif args.onnx_safe: erf_gelu ... else
bias_gelu_fusion`; core/transformer/utils.py: gelu_impl is the tanh formula, erf_gelu the exact one).
"""

from __future__ import annotations

import ast
from typing import Literal

from llmperf_hook.frameworks.flags import FlagValues
from llmperf_hook.frameworks.script_dropout import _imported_names, _imports_megatron, _qualified
from llmperf_hook.frameworks.megatron_entry_points import megatron_entry_point
from llmperf_hook.frameworks.script_tree import script_tree
from llmperf_hook.provenance import Source, SourceKind

GeluVariant = Literal["tanh", "none"]
"""torch's names (F.gelu `approximate`): "tanh" the approximation, "none" the exact erf GELU."""

_GELU_CALLS = {"torch.nn.functional.gelu": 1, "torch.nn.GELU": 0, "torch.nn.modules.activation.GELU": 0}
"""torch callables that run a GELU -> the positional index of `approximate` (F.gelu(input, approximate),
nn.GELU(approximate))."""


def megatron_gelu(flags: FlagValues, framework: str, bias_activation_fusion: bool) -> GeluVariant:
    """The GELU of Megatron's own MLP (module table); without biases (--disable-bias-linear) validate_args switches
    the fusion off (arguments.py: `if not args.add_bias_linear: args.bias_gelu_fusion = False`). Megatron-LM's
    --use-te-activation-func runs Transformer Engine's GELU (mlp.py: TEActivationOp), the tanh formula
    (transformer_engine/common/util/math.h `gelu`). --onnx-safe is argparse type=bool: any non-empty value is True."""
    if framework == "megatron-deepspeed":
        if flags.get("openai_gelu"):
            return "tanh"
        if flags.get("onnx_safe"):
            return "none"
    elif flags.get("use_te_activation_func"):
        return "tanh"
    return "tanh" if bias_activation_fusion and flags.get("add_bias_linear", True) else "none"


def script_gelu(script: str) -> tuple[GeluVariant, str] | str:
    """(variant, what was read) of the GELU calls in `script`'s code, or why it cannot be told: none found (the model
    is built elsewhere), a computed `approximate`, or calls of both variants."""
    tree = script_tree(script)
    if tree is None:
        return f"{script} could not be read"
    names = _imported_names(tree, "torch")
    sites = [(call.lineno, _approximate(call, _GELU_CALLS[q])) for call in ast.walk(tree)
             if isinstance(call, ast.Call) and (q := _qualified(call.func, names)) in _GELU_CALLS]
    if not sites:
        return f"{script}: no F.gelu or nn.GELU call in its code"
    computed = next((line for line, v in sites if v is None), None)
    if computed is not None:
        return f"{script} line {computed}: GELU's approximate is not a literal"
    variants = {v for _, v in sites}
    if len(variants) > 1:
        return f"{script}: GELU calls of both variants (lines {', '.join(str(line) for line, _ in sites)})"
    variant = variants.pop()
    lines = ", ".join(str(line) for line, _ in sites)
    return variant, f"{script}: GELU at line{'s' if len(sites) > 1 else ''} {lines}, approximate={variant!r}"  # type: ignore[return-value]


def _approximate(call: ast.Call, position: int) -> str | None:
    if any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
        return None
    given = next((k.value for k in call.keywords if k.arg == "approximate"), None)
    if given is None and len(call.args) > position:
        given = call.args[position]
    if given is None:
        return "none"  # torch's default
    ok = isinstance(given, ast.Constant) and given.value in ("none", "tanh")
    return given.value if ok else None  # type: ignore[union-attr]


_HF_GELU: dict[str, GeluVariant] = {"gelu": "none", "gelu_10": "none", "gelu_python": "none", "gelu_new": "tanh",
                                    "gelu_fast": "tanh", "gelu_accurate": "tanh", "gelu_pytorch_tanh": "tanh",
                                    "gelu_python_tanh": "tanh", "bloom_gelu": "tanh"}
"""transformers activations.py ACT2CLS: GELUActivation (nn.functional.gelu, exact; gelu_python its erf formula),
ClippedGELUActivation (gelu_10: exact, clipped); NewGELUActivation, FastGELUActivation and AccurateGELUActivation
compute the tanh formula, GELUTanh (gelu_pytorch_tanh; PytorchGELUTanh before) calls F.gelu(approximate="tanh"),
gelu_python_tanh its tanh formula in Python (GELUTanh use_gelu_tanh_python=True). "bloom_gelu" is no ACT2FN name but
BLOOM's own BloomGelu (hf_config._FIXED_ACTIVATION), the tanh formula."""


def hf_gelu(act: str, origin: Source, gated: bool, src: dict[str, Source], warnings: list[str]) -> dict[str, object]:
    """TrainingConfig.gelu_approximate of a Hugging Face model whose MLP runs `act` (hf_config.hf_activation; ""
    unknown: left to the tanh default); a gated MLP (SwiGLU / GeGLU) has no GELU op. An
    activation that is no GELU (relu, quick_gelu, ...) is priced as one, with a warning."""
    if not act or gated:
        return {}
    variant = _HF_GELU.get(act)
    if variant is None:
        warnings.append(f"{origin.detail}: the MLP activation {act!r} is not modelled; priced as the tanh GELU")
        return {}
    src["gelu_approximate"] = Source(origin.kind, f"{origin.detail}: activation {act!r} (transformers: "
                                     f"{'the tanh approximation' if variant == 'tanh' else 'exact erf GELU'})")
    return {"gelu_approximate": variant}


def apply_script_gelu(fields: dict[str, object], script: str, flags: FlagValues, framework: str,
                      src: dict[str, Source]) -> dict[str, object]:
    """step_fusions' fields with `gelu_approximate`: Megatron's rule (megatron_gelu), or for a script that is no
    Megatron entry point and imports no megatron, what its own GELU calls say where they tell (the source says which)."""
    variant = megatron_gelu(flags, framework, bool(fields.get("bias_activation_fusion", True)))
    if megatron_entry_point(script) or _imports_megatron(script):
        return {**fields, "gelu_approximate": variant}
    found = script_gelu(script)
    if isinstance(found, tuple):
        src["gelu_approximate"] = Source(SourceKind.DERIVED, found[1])
        return {**fields, "gelu_approximate": found[0]}
    src["gelu_approximate"] = Source(SourceKind.DEFAULT, f"Megatron's rule ({variant}); the script's own GELU is not "
                                                         f"known: {found}")
    return {**fields, "gelu_approximate": variant}
