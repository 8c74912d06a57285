"""bash's arithmetic commands, `(( expr ))` and `let expr ...` (bash manual 3.2.5.2 Conditional Constructs, 4.2 Bash
Builtins `let`), as a script's variables see them: an expression that assigns (`NAME = e`, `NAME op= e`, `NAME++`,
`--NAME`; several joined by `,`) sets NAME, evaluated as `$(( ))` is (launch/shell_arithmetic.py). One llmperf cannot
evaluate (another operator, a value only running the script gives, a branch that may not run) leaves NAME unknown, so
the launch line names it instead of using its stale value: `(( NP /= 2 ))` left NP as it was.
"""

from __future__ import annotations

import re
from typing import Any

from llmperf_hook.launch.shell_arithmetic import arithmetic
from llmperf_hook.launch.top_level_split import split_outside

_ASSIGNMENT = re.compile(r"\s*([A-Za-z_]\w*)\s*(<<|>>|[-+*/%&^|])?=(?!=)(.*)", re.DOTALL)
"""`NAME = expr` or `NAME op= expr` (bash manual 6.5: `*= /= %= += -= <<= >>= &= ^= |=`)."""
_STEP = re.compile(r"\s*(?:(\+\+|--)\s*([A-Za-z_]\w*)|([A-Za-z_]\w*)\s*(\+\+|--))\s*")
"""`++NAME`, `--NAME`, `NAME++`, `NAME--`."""
_ASSIGNED = re.compile(r"([A-Za-z_]\w*)\s*(?:<<|>>|[-+*/%&^|])?=(?!=)|(?:\+\+|--)\s*([A-Za-z_]\w*)|"
                       r"([A-Za-z_]\w*)\s*(?:\+\+|--)")
"""Every name an expression assigns, by any of bash's assignment operators (6.5 Shell Arithmetic)."""


def arithmetic_expressions(words: list[str]) -> list[str] | None:
    """The expressions of `(( expr ))` (split into words or not) or `let expr ...`; None for another command."""
    if words and words[0] == "let":
        return words[1:]
    text = " ".join(words)
    if text.startswith("((") and text.endswith("))"):
        return [text[2:-2]]
    return None


def _parts(expr: str) -> list[str]:
    """`expr` split at its `,` operators outside parentheses (bash evaluates them left to right)."""
    return split_outside(expr, ",", "()")


def run_arithmetic(reading: Any, words: list[str], uncertain: bool) -> bool:
    """Apply the arithmetic command `words` to the reading's variables (a batch_script._Reading); `uncertain`: it runs
    only on a condition llmperf could not decide, so what it assigns is unknown. True when `words` is one."""
    expressions = arithmetic_expressions(words)
    if expressions is None:
        return False
    for part in (part for expr in expressions for part in _parts(expr)):
        step, assignment = _STEP.fullmatch(part), _ASSIGNMENT.fullmatch(part)
        if step:
            name, op, value = step.group(2) or step.group(3), (step.group(1) or step.group(4))[0], "1"
        elif assignment:
            name, op, value = assignment.group(1), assignment.group(2) or "", assignment.group(3)
        else:
            forget_assigned(reading, part)
            continue
        new_value = None if uncertain else _evaluate(reading, name, op, value)
        forget_assigned(reading, value)  # `X = NP++`, `X = (NP = 4)`: bash changes NP too
        _set(reading, name, new_value)
    return True


def forget_assigned(reading: Any, expr: str) -> None:
    """Every name the arithmetic `expr` assigns (`NP++`, `NP += 2`) made unknown: an expression llmperf does not apply
    (inside another's value, a `$(( ))` of a command's words, the test of an `if`) still changes them in bash."""
    for found in _ASSIGNED.finditer(expr):
        _set(reading, next(filter(None, found.groups())), None)


def _evaluate(reading: Any, name: str, op: str, value: str) -> str | None:
    """NAME's new value after `NAME op= value`; None where llmperf cannot tell it."""
    if _ASSIGNED.search(value) or (op and (name in reading.undecidable or name not in reading.env)):
        return None
    expr = f"({reading.env[name]}) {op} ({value})" if op else value
    result = arithmetic(reading.expand(expr), reading.env)
    return None if result.startswith("$((") else result


def _set(reading: Any, name: str, value: str | None) -> None:
    """NAME set to `value`, or made unknown (None)."""
    if value is None:
        reading.env.pop(name, None)
        reading.undecidable.add(name)
    else:
        reading.env[name] = value
        reading.undecidable.discard(name)
    if reading.allexport:
        reading.exported.add(name)
