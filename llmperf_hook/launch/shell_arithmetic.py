"""bash's `$(( ))` arithmetic over a script's variables, evaluated without running anything (bash manual 6.5 Shell
Arithmetic): integers, `/` and `%` truncating toward zero, 64-bit values; anything else is left as written."""

from __future__ import annotations

import ast
import re

ARITH = re.compile(r"\$\(\(((?:[^()]|\((?:[^()]|\([^()]*\))*\))*)\)\)")
"""`$(( expr ))` with up to two levels of parentheses inside."""


def _c_div(a: int, b: int) -> int:
    """Integer division truncating toward zero, as C and bash divide."""
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


_ARITH_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
              ast.Div: _c_div, ast.Mod: lambda a, b: a - b * _c_div(a, b), ast.Pow: lambda a, b: a ** b,
              ast.LShift: lambda a, b: a << b, ast.RShift: lambda a, b: a >> b, ast.BitAnd: lambda a, b: a & b,
              ast.BitOr: lambda a, b: a | b, ast.BitXor: lambda a, b: a ^ b}
"""bash arithmetic (bash manual 6.5 Shell Arithmetic): integers; `/` and `%` truncate toward zero as in C."""
_COMPARISONS = {ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b,
                ast.GtE: lambda a, b: a >= b, ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b}
"""`<`, `<=`, `>`, `>=`, `==`, `!=`: 1 when true, else 0 (6.5); one at a time (C reads `a < b < c` as `(a < b) < c`,
Python as a chain, so a chain is left to bash)."""


def _int64(value: int) -> int:
    """bash computes on 64-bit signed integers (intmax_t) and wraps around: a value outside them is left to bash."""
    if not -2 ** 63 <= value < 2 ** 63:
        raise ValueError("outside 64-bit integers")
    return value


def _conditional(text: str) -> str:
    """`C ? A : B` (bash manual 6.5, the lowest precedence but assignment and `,`; `?:` nests to the right) written as
    Python's `(A) if (C) else (B)`; a `?` inside parentheses is left, and Python refuses it (the value stays bash's)."""
    depth, asked = 0, -1
    for i, c in enumerate(text):
        depth += (c == "(") - (c == ")")
        if depth == 0 and c == "?" and asked < 0:
            asked, nested = i, 0
        elif depth == 0 and asked >= 0 and c == "?":
            nested += 1
        elif depth == 0 and asked >= 0 and c == ":":
            if nested == 0:
                return f"({_conditional(text[asked + 1:i])}) if ({text[:asked]}) else ({_conditional(text[i + 1:])})"
            nested -= 1
    return text


def _arith_value(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return _int64(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _arith_value(node.operand)
        return _int64(-value) if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.IfExp):
        return _arith_value(node.body) if _arith_value(node.test) != 0 else _arith_value(node.orelse)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARISONS:
        return int(_COMPARISONS[type(node.ops[0])](_arith_value(node.left), _arith_value(node.comparators[0])))
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITH_OPS:
        right = _arith_value(node.right)
        if (isinstance(node.op, (ast.Div, ast.Mod)) and right == 0) or (isinstance(node.op, ast.Pow)
                                                                       and not 0 <= right <= 64) or \
                (isinstance(node.op, (ast.LShift, ast.RShift)) and not 0 <= right < 64):
            raise ValueError("division by zero, a large power or shift")
        return _int64(_ARITH_OPS[type(node.op)](_arith_value(node.left), right))
    raise ValueError("not plain integer arithmetic")


_NOT_PYTHON = re.compile(r"&&|\|\||(?<![<>=!])=(?!=)")
"""`&&`, `||` and an assignment, which Python's expressions do not read as bash does."""
_BITWISE, _COMPARED = re.compile(r"[&|^]"), re.compile(r"==|!=|<=|>=|(?<![<>])[<>](?![<>=])")
"""C (and bash) bind `&`, `^`, `|` looser than a comparison, Python tighter: a mix of both is left to bash."""


def arithmetic(expr: str, env: dict[str, str]) -> str:
    """The value of `$(( expr ))` (its `$VARS` already expanded, as text; a bare NAME is the variable's value
    evaluated on its own, as bash does: X=2+3 makes X*2 10), or the text unchanged (the variable is then left unset)
    when it is not plain integer arithmetic over known values."""
    text = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: f"({env[m.group(0)]})" if m.group(0) in env else m.group(0),
                  expr).strip()
    if not re.fullmatch(r"[0-9+\-*/%()<>=!&|^?: \t]+", text) or "//" in text or _NOT_PYTHON.search(text) or \
            (_BITWISE.search(text) and _COMPARED.search(text)):
        return f"$(({expr}))"
    try:
        return str(_arith_value(ast.parse(_conditional(text), mode="eval").body))
    except (ValueError, SyntaxError, RecursionError):
        return f"$(({expr}))"
