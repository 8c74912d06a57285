"""Whether a training script's own code drives Accelerate's `Accelerator` rather than the Hugging Face Trainer.

Read from the script's syntax tree (frameworks/script_tree.py: never imported or run), so a comment or a docstring
that mentions `Accelerator(` counts for nothing, and the class is followed through the ways a script names it:
`from accelerate import Accelerator [as A]`, `from accelerate import *`, `import accelerate [as acc]` then
`acc.Accelerator(...)`, or `from accelerate.accelerator import Accelerator`. A script that also builds a Trainer (any
class named `*Trainer` from transformers, trl and the like: Trainer, Seq2SeqTrainer, SFTTrainer) is the Trainer's:
the Trainer creates its own Accelerator (transformers trainer.py create_accelerator_and_postprocess) and checks the
ds_config against its arguments.
"""

from __future__ import annotations

import ast

from llmperf_hook.frameworks.script_tree import script_tree

_MODULES = ("accelerate", "accelerate.accelerator")
"""Where `Accelerator` is defined and re-exported (accelerate/__init__.py: from .accelerator import Accelerator)."""


def drives_accelerator(script: str) -> bool:
    """The script constructs an Accelerator itself and no Trainer (False when it cannot be read or parsed)."""
    tree = script_tree(script)
    if tree is None:
        return False
    names, modules = _accelerator_names(tree)
    built = {_called(node) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    accelerator = any(c in names or (c.rpartition(".")[0] in modules and c.endswith(".Accelerator")) for c in built)
    return accelerator and not any(c.rpartition(".")[2].endswith("Trainer") for c in built)


def _accelerator_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(names the class is bound to, names the accelerate modules are bound to)."""
    names: set[str] = set()
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in _MODULES and not node.level:
            for alias in node.names:
                if alias.name == "*":
                    names.add("Accelerator")
                elif alias.name == "Accelerator":
                    names.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in _MODULES:
                    modules.add(alias.asname or alias.name)
    return names, modules


def _called(call: ast.Call) -> str:
    """'acc.Accelerator' of `acc.Accelerator(...)`, 'A' of `A(...)`; '' for anything else (a call of a call)."""
    parts: list[str] = []
    node: ast.AST = call.func
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""
