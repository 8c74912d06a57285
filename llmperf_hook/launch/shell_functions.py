"""Shell functions of a launch script: defined where the script defines them, run where it calls them.

bash and dash run a function's body when it is called, with the caller's variables as they are at the call and the
call's words as $1 ... "$@" (bash manual 3.3 Shell Functions; POSIX 2.9.5). A script that wraps its launch in one
(`launch() { torchrun --nproc_per_node $1 ...; }` then `launch 4`; `NP=2`, the function, `NP=4`, `launch`) launches
what the call gives, not what the definition's text reads as where it stands.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from llmperf_hook.launch.shell_script import ScriptLine

_START = re.compile(r"^\s*(?:function\s+([A-Za-z_][\w.-]*)\s*(?:\(\s*\))?|([A-Za-z_][\w.-]*)\s*\(\s*\))\s*\{(.*)$",
                    re.DOTALL)
"""`name() {`, `function name {`, `function name() {`, with what follows the brace on the line."""


@dataclass(frozen=True)
class Definition:
    name: str
    """The function's name."""
    body: tuple[ScriptLine, ...]
    """Its lines, as the script writes them (the closing brace left out)."""
    end: int
    """Index of the first script line after the definition."""
    path: str = ""
    """The file that defines it (a sourced file's own name), for the line numbers of messages about its body."""


def _one_line(rest: str) -> str | None:
    """The body of `name() { cmd; }` written on one line (what precedes its closing brace), else None."""
    stripped = rest.split(" #", 1)[0].rstrip()
    return stripped[:-1].rstrip().rstrip(";") if stripped.endswith("}") else None


def definition(lines: Sequence[ScriptLine], i: int) -> Definition | None:
    """The function lines[i] defines, up to its closing brace (a line of `}` at the definition's depth), or None."""
    match = _START.match(lines[i].text)
    if match is None:
        return None
    name, rest = match.group(1) or match.group(2), match.group(3)
    inline = _one_line(rest)
    if inline is not None:
        return Definition(name, (ScriptLine(lines[i].number, inline),) if inline.strip() else (), i + 1)
    body: list[ScriptLine] = [ScriptLine(lines[i].number, rest)] if rest.strip() else []
    depth = 1
    for j in range(i + 1, len(lines)):
        text = lines[j].text.strip()
        depth += _START.match(lines[j].text) is not None or text.endswith("{")
        depth -= text.startswith("}")
        if depth == 0:
            return Definition(name, tuple(body), j + 1)
        body.append(lines[j])
    return None  # no closing brace: not read as a function
