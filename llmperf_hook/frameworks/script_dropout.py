"""The dropout a user's own training script runs, read from its code (parsed, never run).

Megatron's entry points, and scripts that import megatron, build Megatron's layers with --hidden-dropout and
--attention-dropout, default 0.1 each (megatron-core transformer_config.py TransformerConfig.hidden_dropout and
attention_dropout: 0.1; Megatron-LM HEAD d98e8a64dd lines 188 and 191). A script of the user's own that only takes
Megatron's shape flags (examples/cpu-testbed/train_gpt.py) runs the dropout its own code writes, which may be none.
It is read here from the script's syntax tree (frameworks/script_tree.py), with torch's defaults where a call
leaves the probability out:

| code                                                   | probability, when left out | priced as                 |
| ------------------------------------------------------ | -------------------------- | ------------------------- |
| nn.Dropout(p), F.dropout(x, p), torch.dropout(x, p, t) | 0.5 (torch's default)      | hidden; attention where   |
|                                                        |                            | bound to an attn name     |
| F.scaled_dot_product_attention(..., dropout_p=p)       | 0.0                        | attention                 |
| nn.MultiheadAttention(..., dropout=p)                  | 0.0                        | attention                 |
| nn.TransformerEncoderLayer / DecoderLayer / Transformer | 0.1                       | both                      |
| a transformers `*Config(..., *dropout*=p / *pdrop=p)`  | class default: gives up    | attention where the name  |
|                                                        |                            | has attn, else hidden     |

The largest probability of each kind is the one priced. The reading gives up (the Megatron defaults stay, and the
explain output says why) where the code cannot tell: a probability that is not a literal, a model built by
Hugging Face transformers without both kinds given in its config call (class defaults and config.json are not
read) or loaded from_pretrained, a module it imports beyond the standard library, torch and a few packages that build
no layer (_NO_LAYERS; the model may live there, wherever it is installed), a torch dropout reached other than by a
plain call (an alias, functools.partial, getattr, a star import, exec, `.p = ...`), or a file that cannot be read:
a false "no dropout" would price too little.
A script whose argparse defines a dropout option keeps today's reading of the flags too: its value is the option's.
Read for the jobs assembled from Megatron's flags (assemble.assemble_megatron); plain DeepSpeed and Hugging Face
scripts keep TrainingConfig's 0.1.
"""

from __future__ import annotations

import ast
import os
import sys
from dataclasses import dataclass

from llmperf_hook.frameworks.flags import FlagValues
from llmperf_hook.frameworks.megatron_entry_points import megatron_entry_point
from llmperf_hook.frameworks.script_tree import script_parse_error, script_tree
from llmperf_hook.provenance import Source, SourceKind

MEGATRON_DROPOUT = 0.1
"""--hidden-dropout and --attention-dropout when absent (TransformerConfig; megatron/training/arguments.py)."""

_TORCH_DEFAULTS = {"Dropout": 0.5, "dropout": 0.5, "scaled_dot_product_attention": 0.0, "MultiheadAttention": 0.0,
                   "TransformerEncoderLayer": 0.1, "TransformerDecoderLayer": 0.1, "Transformer": 0.1}
"""The dropout probability each torch callable uses when the call does not give one (torch/nn/modules/dropout.py
_DropoutNd p=0.5; nn/functional.py dropout p=0.5, scaled_dot_product_attention dropout_p=0.0;
nn/modules/activation.py MultiheadAttention dropout=0.0; nn/modules/transformer.py dropout=0.1)."""
_POSITION = {"Dropout": 0, "dropout": 1, "scaled_dot_product_attention": 4, "MultiheadAttention": 2,
             "TransformerEncoderLayer": 3, "TransformerDecoderLayer": 3, "Transformer": 5}
"""The probability's positional index in each signature (after `input` for the functional dropout)."""
_KEYWORD = {"Dropout": "p", "dropout": "p", "scaled_dot_product_attention": "dropout_p"}
"""The probability's keyword where it is not `dropout`."""
_NO_LAYERS = frozenset({"torch", "numpy", "deepspeed", "transformers", "tqdm", "wandb", "tensorboard", "tensorboardX",
                        "yaml", "datasets", "tokenizers", "sentencepiece", "tiktoken", "psutil", "pandas", "mpi4py",
                        "safetensors", "accelerate"})
"""Packages besides the standard library a script may import without the reading giving up: they build no dropout
layer of their own (torch's are read here; transformers' configs are read or given up on below)."""
_LOADS_CODE = frozenset({"importlib", "runpy", "pkgutil", "zipimport"})
"""Standard-library modules that load a model's code at run time: the reading gives up."""
_DEEPSPEED_LAYERS = ("deepspeed.ops.transformer", "deepspeed.module_inject", "deepspeed.runtime.domino",
                     "deepspeed.sequence.fpdt")
"""deepspeed's own layers with dropout (ops/transformer DeepSpeedTransformerLayer attn/hidden_dropout_ratio,
runtime/domino/transformer.py, sequence/fpdt_layer.py, module_inject's injected layers)."""
_CODE_CALLS = frozenset({"exec", "eval", "compile", "__import__", "getattr"})
"""Builtins through which a script reaches code or a dropout that its calls do not name."""
_TORCH_LOADERS = ("torch.hub", "torch.jit.load", "torch.package", "torch.export.load")
"""torch entry points that load a model whose code the script does not hold."""
_KINDS = {"scaled_dot_product_attention": ("attention",), "MultiheadAttention": ("attention",),
          "TransformerEncoderLayer": ("hidden", "attention"), "TransformerDecoderLayer": ("hidden", "attention"),
          "Transformer": ("hidden", "attention")}


@dataclass(frozen=True)
class ScriptDropout:
    """The dropout probabilities a script's own code runs."""

    hidden_dropout: float
    """Largest probability of a dropout over hidden states (embedding, residual branches, MLP)."""
    attention_dropout: float
    """Largest probability of a dropout over attention scores."""
    where: str
    """What was read ('train_gpt.py: no dropout in its code'), for explain."""


def script_dropout(script: str) -> ScriptDropout | str:
    """The dropout `script`'s code runs, or why it cannot be told (a sentence for explain)."""
    tree = script_tree(script)
    if tree is None:
        return f"{script} could not be read ({script_parse_error(script) or 'no such file here'})"
    own = _dropout_option(tree)
    if own:
        return f"{script} defines its own {own} option, whose default is not read"
    names = _imported_names(tree, "torch")
    unread = _unread_import(tree, os.path.dirname(os.path.abspath(script))) or _hidden_dropout(tree, names)
    if unread:
        return f"{script} {unread}"
    hf = _imports(tree, "transformers")
    bound = _bound_names(tree)
    sites = [site for call in ast.walk(tree) if isinstance(call, ast.Call) for site in _sites(call, names, bound, hf)]
    computed = next((line for _, p, line in sites if p is None), None)
    if computed is not None:
        return f"{script} line {computed}: the dropout probability is computed, not a literal"
    hidden = max((p for kind, p, _ in sites if kind == "hidden"), default=None)
    attention = max((p for kind, p, _ in sites if kind == "attention"), default=None)
    if hf and (hidden is None or attention is None or _calls(tree, "from_pretrained")):
        return (f"{script} imports Hugging Face transformers: a model built there takes its dropout from its config "
                "(class defaults, config.json or from_pretrained), not read")
    lines = sorted({line for _, p, line in sites if p})
    found = f"dropout at line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))}" if lines else \
        "no dropout in its code (no nn.Dropout, F.dropout or dropout_p above 0)"
    return ScriptDropout(hidden or 0.0, attention or 0.0, f"{script}: {found}")


def apply_script_dropout(fields: dict[str, object], script: str, flags: FlagValues,
                         src: dict[str, Source]) -> dict[str, object]:
    """step_fusions' fields with the dropout a user's script runs (script_dropout) in place of Megatron's flags and
    defaults, for a script that is no Megatron entry point and imports no megatron. Where the code cannot tell,
    the fields stay and their sources say why, so explain shows that the defaults are a guess."""
    if megatron_entry_point(script) or _imports_megatron(script):
        return fields
    found = script_dropout(script)
    if isinstance(found, ScriptDropout):
        origin = Source(SourceKind.DERIVED, found.where)
        src.update(hidden_dropout=origin, attention_dropout=origin)
        return {**fields, "hidden_dropout": found.hidden_dropout, "attention_dropout": found.attention_dropout}
    for dest in ("hidden_dropout", "attention_dropout"):
        src[dest] = flags.source(dest) if flags.has(dest) else Source(
            SourceKind.DEFAULT, f"Megatron: {MEGATRON_DROPOUT}; the dropout the script runs is not known: {found}")
    return fields


def _sites(call: ast.Call, names: dict[str, str], bound: dict[int, str],
           hf: bool) -> list[tuple[str, float | None, int]]:
    """(kind, probability or None when computed, line) of each dropout this call sets up."""
    qualified = _qualified(call.func, names)
    name = _torch_callable(qualified)
    if name:
        if name == "dropout" and _not_training(call):
            return []  # F.dropout(x, p, training=False) returns its input
        kinds = _KINDS.get(name) or (("attention",) if _attention_name(bound.get(id(call), "")) else ("hidden",))
        return [(kind, _probability(call, name), call.lineno) for kind in kinds]
    if hf and _callee(call.func).endswith("Config"):  # a transformers config built in the script
        return [("attention" if _attention_name(k.arg) else "hidden", _literal(k.value), call.lineno)
                for k in call.keywords if k.arg and ("dropout" in k.arg or "pdrop" in k.arg) and "lora" not in k.arg]
    return []


def _torch_callable(qualified: str) -> str:
    """The row of _TORCH_DEFAULTS a torch callable belongs to ('torch.nn.Dropout2d' -> 'Dropout'), else ""."""
    if not qualified.startswith("torch."):
        return ""
    last = qualified.rsplit(".", 1)[-1]
    if last in _TORCH_DEFAULTS:
        return last
    if "dropout" in last.lower():  # Dropout1d/2d/3d, AlphaDropout, F.dropout2d, F.alpha_dropout: p as Dropout's
        return "Dropout" if last[0].isupper() else "dropout"
    return ""


def _not_training(call: ast.Call) -> bool:
    given = next((k.value for k in call.keywords if k.arg in ("training", "train")), None)
    if given is None and len(call.args) > 2:
        given = call.args[2]
    return isinstance(given, ast.Constant) and given.value is False


def _probability(call: ast.Call, name: str) -> float | None:
    if any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
        return None  # **kwargs / *args: the probability may be among them
    keyword = _KEYWORD.get(name, "dropout")
    given = next((k.value for k in call.keywords if k.arg == keyword), None)
    index = _POSITION[name]
    if given is None and len(call.args) > index:
        given = call.args[index]
    return _TORCH_DEFAULTS[name] if given is None else _literal(given)


def _literal(node: ast.AST) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    return None


def _attention_name(name: str) -> bool:
    return "attn" in name.lower() or "attention" in name.lower()


def _bound_names(tree: ast.Module) -> dict[int, str]:
    """id(call) -> the name or attribute a call's result is assigned to (`self.attn_drop = nn.Dropout(0.1)`)."""
    out: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            target = node.targets[0]
            out[id(node.value)] = target.attr if isinstance(target, ast.Attribute) else \
                target.id if isinstance(target, ast.Name) else ""
    return out


def _callee(func: ast.AST) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _imported_names(tree: ast.Module, package: str) -> dict[str, str]:
    """Local name -> what it names in `package`: `import torch.nn as nn` nn -> torch.nn, `from torch.nn import
    functional as F` F -> torch.nn.functional, `import torch` torch -> torch."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update({a.asname or a.name.split(".")[0]: a.name if a.asname else a.name.split(".")[0]
                        for a in node.names if a.name.split(".")[0] == package})
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == package:
            out.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
    return out


def _qualified(func: ast.AST, names: dict[str, str]) -> str:
    """`nn.functional.dropout` -> 'torch.nn.functional.dropout' when `nn` is torch's; "" when the root is no torch name
    (`self.dropout(x)` calls a module the script built)."""
    parts: list[str] = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name) or func.id not in names:
        return ""
    return ".".join([names[func.id], *reversed(parts)])


def _dropout_option(tree: ast.Module) -> str:
    """The first option of an add_argument call with 'dropout' in its name, else ""."""
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call) and _callee(n.func) == "add_argument"):
        for arg in call.args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and "dropout" in arg.value:
                return arg.value
    return ""


def _imports(tree: ast.Module, package: str) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == package for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == package:
            return True
    return False


def _imports_megatron(script: str) -> bool:
    """Megatron's parser and layers run (its defaults hold) in a script that imports megatron."""
    tree = script_tree(script)
    return tree is not None and _imports(tree, "megatron")


def _unread_import(tree: ast.Module, folder: str) -> str:
    """What the script imports whose code may build its model ('imports gpt, whose code is not read'), else "": a
    relative import or a module of its own folder, anything beyond the standard library and _NO_LAYERS (installed,
    or on a sys.path the script extends), a run-time loader (_LOADS_CODE), deepspeed's own layers."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            return f"imports {'.' * node.level}{node.module or ''} from its own folder, whose code is not read"
        for name in _module_names(node):
            top = name.split(".")[0]
            if os.path.isfile(os.path.join(folder, top + ".py")) or os.path.isdir(os.path.join(folder, top)):
                return f"imports {name} from its own folder, whose code is not read"
            if top in _LOADS_CODE or top not in _NO_LAYERS and top not in sys.stdlib_module_names:
                return f"imports {name}, whose code is not read"
    used = [*_imported_names(tree, "deepspeed").values(), *_dotted_uses(tree, _imported_names(tree, "deepspeed"))]
    layer = next((name for name in used if name.startswith(_DEEPSPEED_LAYERS)), "")
    return f"uses {layer}, a deepspeed layer whose dropout is not read" if layer else ""


def _module_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    return [node.module] if isinstance(node, ast.ImportFrom) and node.module else []


def _hidden_dropout(tree: ast.Module, names: dict[str, str]) -> str:
    """How the script may reach a torch dropout that no plain call shows, else "": a star import from torch, a
    dropout callable used other than called (an alias, functools.partial, isinstance), exec / eval / getattr of a
    dropout, a model loaded by torch.hub or torch.jit, or an assignment to a module's `.p`."""
    star = next((name for alias, name in names.items() if alias == "*"), "")
    if star:
        return f"does from {star.rsplit('.', 1)[0]} import *, whose names are not read"
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    prefixes = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _reaches_code(node, names):
            return f"line {node.lineno}: {_callee(node.func)}(...) may reach a dropout that is not read"
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "p" for t in node.targets):
            return f"line {node.lineno}: sets a dropout probability (.p = ...) that is not read"
        qualified = _qualified(node, names) if isinstance(node, (ast.Name, ast.Attribute)) else ""
        if qualified.startswith(_TORCH_LOADERS) and id(node) not in prefixes:
            return f"line {node.lineno}: {qualified} loads a model whose code is not read"
        if qualified and _torch_callable(qualified) and id(node) not in called | prefixes:
            return f"line {node.lineno}: {qualified} is used other than called, so its probability is not read"
    return ""


def _reaches_code(call: ast.Call, names: dict[str, str]) -> bool:
    """exec / eval / compile / __import__, or getattr of a torch name or of an attribute named *dropout*."""
    if not isinstance(call.func, ast.Name) or call.func.id not in _CODE_CALLS:
        return False
    if call.func.id != "getattr":
        return True
    attr = call.args[1] if len(call.args) > 1 else None
    literal = isinstance(attr, ast.Constant) and isinstance(attr.value, str)
    if literal and "dropout" in attr.value.lower():
        return True
    return bool(call.args and _qualified(call.args[0], names)) and not literal


def _dotted_uses(tree: ast.Module, names: dict[str, str]) -> list[str]:
    return [q for n in ast.walk(tree) if isinstance(n, ast.Attribute) for q in [_qualified(n, names)] if q]


def _calls(tree: ast.Module, callee: str) -> bool:
    return any(isinstance(n, ast.Call) and _callee(n.func) == callee for n in ast.walk(tree))
