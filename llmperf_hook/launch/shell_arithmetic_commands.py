"""bash's arithmetic commands, `(( expr ))` and `let expr ...` (bash manual 3.2.5.2 Conditional Constructs, 4.2 Bash
Builtins `let`), as a script's variables see them: an expression that assigns (`NAME = e`, `NAME op= e`, `NAME++`,
`--NAME`; several joined by `,`) sets NAME, evaluated as `$(( ))` is (launch/shell_arithmetic.py). One llmperf cannot
evaluate (another operator, a value only running the script gives, a branch that may not run) leaves NAME unknown, so
the launch line names it instead of using its stale value: `(( NP /= 2 ))` left NP as it was.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from llmperf_hook.launch.argv_words import expand_env_refs
from llmperf_hook.launch.shell_arithmetic import arithmetic
from llmperf_hook.launch.shell_positional import expand_positional
from llmperf_hook.launch.top_level_split import split_outside

_ASSIGNMENT = re.compile(r"\s*([A-Za-z_]\w*)\s*(<<|>>|[-+*/%&^|])?=(?!=)(.*)", re.DOTALL)
"""`NAME = expr` or `NAME op= expr` (bash manual 6.5: `*= /= %= += -= <<= >>= &= ^= |=`)."""
_STEP = re.compile(r"\s*(?:(\+\+|--)\s*([A-Za-z_]\w*)|([A-Za-z_]\w*)\s*(\+\+|--))\s*")
"""`++NAME`, `--NAME`, `NAME++`, `NAME--`."""
ASSIGNED = re.compile(r"([A-Za-z_]\w*)\s*(?:<<|>>|[-+*/%&^|])?=(?!=)|(?:\+\+|--)\s*([A-Za-z_]\w*)|"
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
    _apply(reading, expressions, uncertain)
    return True


def arithmetic_status(reading: Any, words: list[str]) -> bool | None:
    """The exit status of the arithmetic command `words` (true: its last expression is not 0, bash manual 3.2.5.2 and
    4.2 `let`), worked out on a copy of the reading's variables, so that `if (( NP++ ))` tests NP's old value and the
    caller applies the assignment (run_arithmetic) once; None where llmperf cannot tell it or `words` is none."""
    expressions = arithmetic_expressions(words)
    if expressions is None:
        return None
    value = _apply(_Scratch(dict(reading.env), set(reading.undecidable), reading.positional), expressions, False)
    return None if value is None else value != "0"


@dataclass
class _Scratch:
    """A copy of a reading's variables that arithmetic_status may change."""

    env: dict[str, str]
    undecidable: set[str]
    positional: dict[str, str]
    allexport: bool = False
    exported: set[str] = field(default_factory=set)

    def expand(self, text: str) -> str:
        return expand_env_refs(expand_positional(text, self.positional), self.env, {}, self.undecidable)


def _apply(reading: Any, expressions: list[str], uncertain: bool) -> str | None:
    """Apply each expression's assignments in turn; the value of the last one (None where it is not known):
    `NAME++` is NAME's old value, `++NAME` and `NAME = e` the new one (bash manual 6.5)."""
    value: str | None = None
    for part in (part for expr in expressions for part in _parts(expr)):
        step, assignment = _STEP.fullmatch(part), _ASSIGNMENT.fullmatch(part)
        if step:
            name, op, operand = step.group(2) or step.group(3), (step.group(1) or step.group(4))[0], "1"
        elif assignment:
            name, op, operand = assignment.group(1), assignment.group(2) or "", assignment.group(3)
        else:
            value = None if ASSIGNED.search(part) else _value(reading, part)
            forget_assigned(reading, part)
            continue
        old = _value(reading, name) if step and step.group(3) else None
        new_value = None if uncertain else _evaluate(reading, name, op, operand)
        forget_assigned(reading, operand)  # `X = NP++`, `X = (NP = 4)`: bash changes NP too
        _set(reading, name, new_value)
        value = old if step and step.group(3) else new_value
    return value


def _value(reading: Any, expr: str) -> str | None:
    """The value of the arithmetic `expr` (no assignment in it) with the reading's variables; None if not known."""
    if any(name in reading.undecidable for name in re.findall(r"[A-Za-z_]\w*", expr)):
        return None
    result = arithmetic(reading.expand(expr), reading.env)
    return None if result.startswith("$((") else result


def forget_assigned(reading: Any, expr: str) -> None:
    """Every name the arithmetic `expr` assigns (`NP++`, `NP += 2`) made unknown: an expression llmperf does not apply
    (inside another's value, a `$(( ))` of a command's words, the test of an `if`) still changes them in bash."""
    for found in ASSIGNED.finditer(expr):
        _set(reading, next(filter(None, found.groups())), None)


def _evaluate(reading: Any, name: str, op: str, value: str) -> str | None:
    """NAME's new value after `NAME op= value`; None where llmperf cannot tell it."""
    if ASSIGNED.search(value) or (op and (name in reading.undecidable or name not in reading.env)):
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
