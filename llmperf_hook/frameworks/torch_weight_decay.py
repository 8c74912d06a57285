"""Whether a torch.optim Adam step runs a weight-decay pass, read from the optimizer's construction (never run).

torch/optim/adam.py _multi_tensor_adam (torch 2.x; AdamW is Adam(decoupled_weight_decay=True)) runs
`if weight_decay != 0:` either AdamW's _foreach_mul_(params, 1 - lr * wd) ("decoupled") or Adam's L2 term
_foreach_add(grads, params, alpha=wd) ("l2"), and nothing for weight_decay 0 ("none"), per parameter group. The
class defaults: AdamW weight_decay=1e-2, Adam 0 (torch/optim/adamw.py, adam.py). DeepSpeed's torch_adam builds
torch.optim.AdamW when adam_w_mode (default True), else Adam (engine.py _configure_basic_optimizer).
"""

from __future__ import annotations

import ast
from typing import Any

DECAY_DEFAULTS = {"AdamW": 1e-2, "Adam": 0.0}
"""torch.optim's default weight_decay by class."""


def decay_kind(weight_decay: Any, decoupled: bool) -> str:
    """"none" for a literal 0, else "decoupled" (AdamW) or "l2" (Adam); a value that is not a number (an expression
    the script computes) is taken for a decay that is on."""
    if isinstance(weight_decay, (int, float)) and not isinstance(weight_decay, bool) and weight_decay == 0:
        return "none"
    return "decoupled" if decoupled else "l2"


def _literal(node: ast.AST | None) -> Any:
    """The number a node is written as, "?" for any other expression, None where there is no node."""
    if node is None:
        return None
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return "?"
    return value if isinstance(value, (int, float)) else "?"


def _group_decays(first: ast.AST | None) -> list[Any]:
    """weight_decay of each group of a parameter-group list ([{"params": ..., "weight_decay": 0.1}, ...]); None for a
    group that does not set it as a dict literal (torch gives it the optimizer's own value); [] when the argument is
    not such a list."""
    if not isinstance(first, (ast.List, ast.Tuple)):
        return []
    out = []
    for group in first.elts:
        value = next((v for k, v in zip(group.keys, group.values)
                      if isinstance(k, ast.Constant) and k.value == "weight_decay"), None) \
            if isinstance(group, ast.Dict) else None
        out.append(_literal(value))
    return out


def call_weight_decay(call: ast.Call, class_name: str) -> str:
    """The weight-decay kind of `torch.optim.<class_name>(...)`: on where any parameter group's weight_decay is not
    0 (a group's own, else the weight_decay keyword or fifth positional argument, else the class default);
    decoupled_weight_decay=True makes Adam AdamW."""
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    decoupled = class_name == "AdamW" or _literal(keywords.get("decoupled_weight_decay")) == 1
    # Adam(params, lr, betas, eps, weight_decay, ...): the fifth positional argument
    given = _literal(keywords.get("weight_decay", call.args[4] if len(call.args) > 4 else None))
    default = DECAY_DEFAULTS.get(class_name, 0.0) if given is None else given
    first = call.args[0] if call.args else keywords.get("params")
    values = [default if v is None else v for v in _group_decays(first)] or [default]
    if all(decay_kind(v, decoupled) == "none" for v in values):
        return "none"
    return "decoupled" if decoupled else "l2"
