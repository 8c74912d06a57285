"""The ds_config's optimizer section, as DeepSpeed 0.19 builds and checks it (runtime/config.py, engine.py
_configure_basic_optimizer, _do_optimizer_sanity_check, runtime/zero/utils.py).

DeepSpeed builds the optimizer the section names when the script passes none (deepspeed.initialize without
optimizer=..., the Hugging Face Trainer with the section present): type adam / adamw -> FusedAdam (DeepSpeedCPUAdam
under offload), adagrad, lamb -> FusedLamb, lion, muon, the 1-bit optimizers, any other name -> torch.optim.<type>.
Under ZeRO (stage >= 1) the built optimizer must be one ZeRO supports (zero/utils.py ZERO_SUPPORTED_OPTIMIZERS:
torch Adam / AdamW / Adagrad, FusedAdam, DeepSpeedCPUAdam, DeepSpeedCPUAdagrad, Lion, MuonWithAuxAdam), unless
zero_allow_untested_optimizer is true ('You are using an untested ZeRO Optimizer').
Memory: Adam, AdamW, Lamb and the 1-bit Adam / Lamb keep two fp32 states per parameter (OptimizerConfig.name "adam");
Adagrad (sum of squares), Lion and Muon (momentum) keep one ("sgd"); torch SGD one with params.momentum, none
without (its default 0: _torch_sgd).
A script that passes its own optimizer to deepspeed.initialize(optimizer=...) overrides the section ('This overrides
any optimizer definition in the DeepSpeed json config', deepspeed/__init__.py): Megatron-DeepSpeed always does; a
plain DeepSpeed script is read (never run) for it (script_client_optimizer). DeepSpeed then checks that optimizer's
own class: ZeRO refuses one outside ZERO_SUPPORTED_OPTIMIZERS (type(optimizer) in the list), and ZeRO-Offload one
that is not DeepSpeedCPUAdam / DeepSpeedCPULion while zero_force_ds_cpu_optimizer is true (its default,
engine.py _configure_optimizer).
"""

from __future__ import annotations

import ast
from typing import Any

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.deepspeed_schema import ds_bool
from llmperf_hook.frameworks.script_tree import script_tree
from llmperf_hook.frameworks.torch_step_impl import torch_step_impl
from llmperf_hook.frameworks.torch_weight_decay import DECAY_DEFAULTS, call_weight_decay, decay_kind
from llmperf_hook.provenance import Source, SourceKind

TWO_STATES = frozenset({"adam", "adamw", "lamb", "onebitadam", "zerooneadam", "onebitlamb", "muadam", "muadamw"})
ONE_STATE = frozenset({"adagrad", "lion", "muon", "musgd", "sgd", "rmsprop"})
ZERO_SUPPORTED = frozenset({"adam", "adamw", "adagrad", "lion", "muon"})
"""Section types whose built optimizer is in ZERO_SUPPORTED_OPTIMIZERS (torch.optim.Adam / AdamW / Adagrad by name
too: the lower-cased names are the same)."""
COMPRESSED = frozenset({"onebitadam", "zerooneadam", "onebitlamb"})
TORCH_SPELLING = {name.lower(): name for name in ("SGD", "RMSprop", "Adamax", "NAdam", "RAdam", "Adadelta", "ASGD",
                                                  "Rprop", "SparseAdam", "LBFGS", "Adafactor")}
"""torch.optim classes that are not DeepSpeed's own names (runtime/config.py DEEPSPEED_OPTIMIZERS: adagrad, adam, adamw,
lamb, lion, muon, mu*; those are lower-cased, any case works), by lower-case name: DeepSpeed builds them as
getattr(torch.optim, type) with the type as written (engine.py _configure_basic_optimizer)."""
ZERO_SUPPORTED_CLASSES = frozenset({"Adam", "AdamW", "Adagrad", "FusedAdam", "DeepSpeedCPUAdam", "ZenFlowCPUAdam",
                                    "DeepSpeedCPUAdagrad", "DeepSpeedCPULion", "FusedLion", "MuonWithAuxAdam"})
"""zero/utils.py ZERO_SUPPORTED_OPTIMIZERS, by class name."""
OFFLOAD_CLASSES = frozenset({"DeepSpeedCPUAdam", "DeepSpeedCPULion"})
"""The client optimizers ZeRO-Offload accepts while zero_force_ds_cpu_optimizer is true."""
KNOWN_CLASSES = ZERO_SUPPORTED_CLASSES | frozenset({"SGD", "RMSprop", "Adamax", "NAdam", "RAdam", "Adadelta", "ASGD",
                                                    "Rprop", "SparseAdam", "Adafactor", "FusedLamb", "Lion"})
"""Optimizer classes a script's call is recognised by (torch.optim's, DeepSpeed's): any other callee may be a
factory returning one of them, so it is not judged."""
TORCH_ADAM_CLASSES = frozenset({"Adam", "AdamW"})
"""torch.optim's Adam classes by name (a script's own class of that name is taken for torch's)."""
TORCH_STEP_CLASSES = TORCH_ADAM_CLASSES | {"SGD"}
"""torch.optim classes whose step is priced as the call runs it (frameworks/torch_step_impl.py)."""
ONE_STATE_CLASSES = frozenset({"SGD", "RMSprop", "Adagrad", "DeepSpeedCPUAdagrad", "DeepSpeedCPULion", "FusedLion",
                               "Lion", "Adafactor"})


def _untested_ok(raw: dict[str, Any], origin: str) -> bool:
    allowed = raw.get("zero_allow_untested_optimizer", False)
    return ds_bool(allowed, "zero_allow_untested_optimizer", origin) if allowed != "auto" else False


def optimizer_settings(raw: dict[str, Any], zero_stage: Any, origin: str, src: dict[str, Source],
                       warnings: list[str]) -> dict[str, Any]:
    """{"optimizer_name": "adam" | "sgd"} from the section's type (nothing without a section); ConfigError where
    DeepSpeed's ZeRO refuses the optimizer."""
    section = raw.get("optimizer")
    if not isinstance(section, dict) or not isinstance(section.get("type"), str):
        return {}
    given = section["type"]
    kind = given.lower()
    if kind in TORCH_SPELLING and given != TORCH_SPELLING[kind]:
        raise ConfigError(f"{origin} optimizer.type {given!r}: DeepSpeed lower-cases only its own optimizer names and "
                          "looks any other up in torch.optim as written, so deepspeed.initialize asserts "
                          f"'{given} is not a supported DeepSpeed Optimizer' (engine.py _do_optimizer_sanity_check). "
                          f"Write \"type\": \"{TORCH_SPELLING[kind]}\".")
    zero = isinstance(zero_stage, int) and zero_stage >= 1
    if zero and kind not in ZERO_SUPPORTED and not _untested_ok(raw, origin):
        raise ConfigError(f"{origin} optimizer.type {given!r} with ZeRO stage {zero_stage}: the optimizer DeepSpeed "
                          "builds for it is not one ZeRO supports, and deepspeed.initialize asserts 'You are using "
                          "an untested ZeRO Optimizer. Please add <\"zero_allow_untested_optimizer\": true>' "
                          "(engine.py _do_optimizer_sanity_check). Add that key, or use Adam, AdamW, Adagrad or Lion.")
    src["optimizer_name"] = Source(SourceKind.CONFIG_FILE, f"{origin} optimizer.type")
    if kind in COMPRESSED:
        warnings.append(f"{origin} optimizer.type {given}: its compressed (1-bit) gradient communication after the "
                        "warm-up is not modelled; priced as Adam with full-precision reduction")
    if kind == "sgd":
        impl = _torch_sgd(section, origin)
        src["torch_optimizer_impl"] = src["torch_weight_decay"] = Source(SourceKind.CONFIG_FILE,
                                                                         f"{origin} optimizer.params")
        return {"optimizer_name": "sgd", **impl}
    if kind in ONE_STATE:
        return {"optimizer_name": "sgd"}
    if kind not in TWO_STATES:
        warnings.append(f"{origin} optimizer.type {given}: DeepSpeed builds torch.optim.{given}, priced as Adam (two "
                        "fp32 states per parameter)")
    impl = _torch_adam(section, kind, origin)
    if impl:
        src["torch_optimizer_impl"] = Source(SourceKind.CONFIG_FILE, f"{origin} optimizer.params.torch_adam")
    return {"optimizer_name": "adam", **impl}


def _torch_adam(section: dict[str, Any], kind: str, origin: str) -> dict[str, str]:
    """{"torch_optimizer_impl": "foreach"} when a section of type Adam / AdamW sets params.torch_adam: DeepSpeed then
    builds torch.optim.Adam / AdamW (foreach on a GPU) instead of FusedAdam (engine.py _configure_basic_optimizer)."""
    params = section.get("params") if isinstance(section.get("params"), dict) else {}
    flag = params.get("torch_adam", False)
    if kind in ("adam", "adamw") and flag != "auto" and ds_bool(flag, "optimizer.params.torch_adam", origin):
        # adam_w_mode (default True; type AdamW forces it) picks torch.optim.AdamW over Adam
        decoupled = kind == "adamw" or params.get("adam_w_mode", True) is not False
        decay = params.get("weight_decay", DECAY_DEFAULTS["AdamW" if decoupled else "Adam"])
        return {"torch_optimizer_impl": "foreach", "torch_weight_decay": decay_kind(decay, decoupled)}
    return {}


def _torch_sgd(section: dict[str, Any], origin: str) -> dict[str, str]:
    """The step and weight-decay kind of a section of type SGD: DeepSpeed builds torch.optim.SGD(model_parameters,
    **params) (engine.py _configure_basic_optimizer: getattr(torch.optim, name)), whose momentum, weight_decay and
    nesterov default to 0 / 0 / False and whose momentum_buffer exists only when momentum != 0 (torch/optim/sgd.py
    _init_group): "sgd" (no state) without momentum, "sgd_momentum" / "sgd_nesterov" (one), fused=true "sgd_fused" /
    "sgd_momentum_fused"; weight decay "l2" (_foreach_add of the gradients) or "none". A value that is not a number
    ("auto", which the Hugging Face Trainer fills for weight_decay only) is taken as on."""
    params = section.get("params") if isinstance(section.get("params"), dict) else {}
    on = {key: not (isinstance(params.get(key, 0), (int, float)) and not params.get(key, 0))
          for key in ("momentum", "weight_decay", "nesterov", "fused")}
    if on["fused"] and ds_bool(params["fused"], "optimizer.params.fused", origin):
        impl = "sgd_momentum_fused" if on["momentum"] else "sgd_fused"
    else:
        impl = "sgd_nesterov" if on["momentum"] and on["nesterov"] else "sgd_momentum" if on["momentum"] else "sgd"
    return {"torch_optimizer_impl": impl, "torch_weight_decay": "l2" if on["weight_decay"] else "none"}


def client_optimizer_settings(client: tuple[str, ...], raw: dict[str, Any], fields: dict[str, Any], origin: str,
                              src: dict[str, Source], warnings: list[str]) -> dict[str, Any]:
    """The optimizer the script passes (class name, `script line N`[, weight-decay kind, torch step]; "" class: not
    recognised):
    its state count, ConfigError where DeepSpeed refuses it; the section, if any, is ignored (warned)."""
    name, where = client[0], client[1]
    if isinstance(raw.get("optimizer"), dict):
        warnings.append(f"{origin} optimizer section: ignored, the script passes its own optimizer to "
                        f"deepspeed.initialize ({where})")
    if name not in KNOWN_CLASSES:
        return {}
    stage, offload = fields["zero_stage"], fields["offload_optimizer"]
    if stage >= 1 and name not in ZERO_SUPPORTED_CLASSES and not _untested_ok(raw, origin):
        raise ConfigError(f"{where} passes {name} to deepspeed.initialize with ZeRO stage {stage} ({origin}): it "
                          "is not in ZERO_SUPPORTED_OPTIMIZERS and deepspeed.initialize asserts 'You are using an "
                          "untested ZeRO Optimizer' (engine.py _do_optimizer_sanity_check). Add "
                          "\"zero_allow_untested_optimizer\": true, or pass torch.optim.AdamW / Adam / Adagrad.")
    force = raw.get("zero_force_ds_cpu_optimizer", True)
    if offload != "none" and name not in OFFLOAD_CLASSES and ds_bool(force, "zero_force_ds_cpu_optimizer", origin):
        raise ConfigError(f"{where} passes {name} to deepspeed.initialize with offload_optimizer {offload} ({origin}): "
                          "DeepSpeed raises 'You are using ZeRO-Offload with a client provided optimizer' (engine.py "
                          "_configure_optimizer, zero_force_ds_cpu_optimizer default true). Pass "
                          "deepspeed.ops.adam.DeepSpeedCPUAdam, or set \"zero_force_ds_cpu_optimizer\": false.")
    src["optimizer_name"] = Source(SourceKind.DERIVED, f"{where}: deepspeed.initialize(optimizer={name}(...))")
    # torch.optim's Adam / AdamW / SGD step DeepSpeed's fp32 partition as the script builds them: foreach (torch's
    # CUDA default) or fused=True, amsgrad, SGD's momentum (script_client_optimizer)
    default_impl = "sgd" if name == "SGD" else "foreach"
    impl = {"torch_optimizer_impl": client[3] if len(client) > 3 else default_impl,
            "torch_weight_decay": client[2] if len(client) > 2 else "decoupled"} if name in TORCH_STEP_CLASSES else {}
    if impl:
        src["torch_optimizer_impl"] = src["torch_weight_decay"] = src["optimizer_name"]
    return {"optimizer_name": "sgd" if name in ONE_STATE_CLASSES else "adam", **impl}


def _callee(node: ast.AST) -> str:
    """`initialize` of `deepspeed.initialize(...)`, `SGD` of `torch.optim.SGD(...)`; "" for anything else."""
    func = node.func if isinstance(node, ast.Call) else None
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _built_by(tree: ast.AST) -> dict[str, tuple[str, ast.Call]]:
    """name -> (the callee every `name = Call(...)` of the script assigns it, "" when they differ; the first call)."""
    built: dict[str, tuple[str, ast.Call]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            for target in (t for t in node.targets if isinstance(t, ast.Name)):
                callee = _callee(node.value)
                first = built.get(target.id, (callee, node.value))
                built[target.id] = (callee if first[0] == callee else "", first[1])
    return built


def script_client_optimizer(script: str) -> tuple[str, str, str, str] | None:
    """(class name, `script line N`, weight-decay kind, torch step) of the optimizer the script passes to
    deepspeed.initialize: optimizer= or the third positional argument (initialize(args, model, optimizer, ...)), a
    call or a name assigned from one; class "" when not recognised; for torch.optim's Adam / AdamW / SGD the kind
    (frameworks/torch_weight_decay.py; "decoupled" otherwise) and the step as called (frameworks/torch_step_impl.py:
    fused=, amsgrad=, momentum=, nesterov=; "foreach" otherwise). None when it passes none, or the script cannot be
    read or parsed."""
    tree = script_tree(script)
    if tree is None:
        return None
    built, initializers = _built_by(tree), _deepspeed_initializers(tree)
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call) and _dotted(n.func) in initializers):
        positional = call.args[2] if len(call.args) > 2 else None
        given = next((k.value for k in call.keywords if k.arg == "optimizer"), positional)
        if given is None or (isinstance(given, ast.Constant) and given.value is None):
            continue
        built_call = given if isinstance(given, ast.Call) else \
            built.get(given.id, ("", None))[1] if isinstance(given, ast.Name) else None
        name = _callee(given) if isinstance(given, ast.Call) else \
            built.get(given.id, ("", None))[0] if isinstance(given, ast.Name) else ""
        read = built_call is not None and name in TORCH_STEP_CLASSES
        decay = call_weight_decay(built_call, name) if read else "decoupled"  # type: ignore[arg-type]
        step = torch_step_impl(built_call, name) if read else "sgd" if name == "SGD" else "foreach"  # type: ignore[arg-type]
        return name, f"{script} line {call.lineno}", decay, step
    return None


def _dotted(func: ast.AST) -> str:
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return f"{func.value.id}.{func.attr}"
    return func.id if isinstance(func, ast.Name) else ""


def _deepspeed_initializers(tree: ast.AST) -> set[str]:
    """How the script names deepspeed.initialize: `deepspeed.initialize`, `<alias>.initialize` after `import deepspeed
    as <alias>`, `<name>` after `from deepspeed import initialize as <name>`."""
    names = {"deepspeed.initialize"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {f"{a.asname}.initialize" for a in node.names if a.name == "deepspeed" and a.asname}
        elif isinstance(node, ast.ImportFrom) and node.module == "deepspeed":
            names |= {a.asname or a.name for a in node.names if a.name == "initialize"}
    return names
