"""Command substitutions whose output is a path the script's own words give, worked out without running them.

Launch scripts find their own folder before sourcing their configuration: `SCRIPT_DIR="$(dirname "$(readlink -f
"$0")")"`, `$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)`, `$(realpath $0)`, `$(basename "$CKPT")` (Megatron-LM
examples/post_training/modelopt, examples/rl; bigscience). Those commands only transform a path: `dirname`,
`basename NAME [SUFFIX]`, `readlink -f`, `realpath`, `pwd`, and `cd DIR && pwd` (coreutils; bash manual 4.1 cd).
Innermost first, each is replaced by what it prints (its trailing newline removed, bash manual 3.5.4); anything else
stays a command substitution, whose variable batch_script leaves undecided. One more is worked out: the node count
of a Slurm allocation as scripts take it, `$(scontrol show hostnames $SLURM_JOB_NODELIST | wc -l)`: scontrol(1)
"hostnames: print the host names of a node list, one per line" (the list defaults to SLURM_JOB_NODELIST), so the
lines are the allocation's SLURM_JOB_NUM_NODES, which the sbatch directives give (launch/sbatch.py).
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Callable

_INNERMOST = re.compile(r"\$\(([^()`]*)\)")
_PLAIN_PATH = re.compile(r"[\w./+@:%,=-]*")
"""A result put back into the line as it is: no blank, quote or `$` that would read differently there."""


def _path_command(words: list[str], cwd: str) -> str | None:
    """What the path command `words` prints (None for any other command)."""
    if not words:
        return None
    name, args = words[0], words[1:]
    if name in ("dirname", "basename", "readlink", "realpath") and "--" in args:  # `dirname -- "$0"`: options end
        at = args.index("--")
        args = args[:at] + args[at + 1:]
    if name == "pwd" and all(arg in ("-L", "-P") for arg in args):
        return os.path.realpath(cwd) if args[-1:] == ["-P"] else cwd
    if name == "dirname" and len(args) == 1:
        return os.path.dirname(args[0].rstrip("/")) or ("/" if args[0].startswith("/") else ".")
    if name == "basename" and len(args) in (1, 2):
        base = os.path.basename(args[0].rstrip("/")) or args[0][:1]  # `/` for `/`, nothing for ""
        return base[:-len(args[1])] if len(args) == 2 and base.endswith(args[1]) and base != args[1] else base
    if (name == "readlink" and args[:1] in (["-f"], ["-e"], ["-m"]) and len(args) == 2) or \
            (name == "realpath" and len(args) == 1):
        resolved = os.path.realpath(os.path.join(cwd, args[-1]))
        # readlink -f and realpath need every folder on the way, -e the file too (else they print nothing), -m none
        must_exist = resolved if args[0] == "-e" else os.path.dirname(resolved) if args[0] != "-m" else "/"
        return resolved if os.path.exists(must_exist) else None
    return None


_NODE_COUNT = re.compile(r"\s*scontrol\s+show\s+hostnames(?:\s+(\S+))?\s*\|\s*wc\s+-l\s*")
_ALLOCATION_LISTS = frozenset({"$SLURM_JOB_NODELIST", "${SLURM_JOB_NODELIST}", "$SLURM_NODELIST", "${SLURM_NODELIST}"})
"""The allocation's node list (SLURM_NODELIST is its older name, sbatch(1) OUTPUT ENVIRONMENT VARIABLES)."""


def _allocation_nodes(text: str, expand: Callable[[str], str]) -> str | None:
    """`scontrol show hostnames [$SLURM_JOB_NODELIST] | wc -l`: the allocation's node count, when known."""
    match = _NODE_COUNT.fullmatch(text)
    if match is None or (match.group(1) or "$SLURM_JOB_NODELIST").strip("'\"") not in _ALLOCATION_LISTS:
        return None
    count = expand("$SLURM_JOB_NUM_NODES")
    return count if count.isdigit() else None


_QUIET = re.compile(r"\s(?:&>|[12]?>)\s*/dev/null\b|\s2>&1\b")
"""Redirections that only silence cd (`&> /dev/null`, `>/dev/null 2>&1`): its folder is the same."""


def _cd_and_pwd(text: str, cwd: str, split: Callable[[str], list[str]]) -> str | None:
    """`cd DIR && pwd` / `cd DIR; pwd` (cd -P resolves links): the folder it prints."""
    match = re.fullmatch(r"\s*cd\s+(.+?)\s*(?:&&|;)\s*pwd(\s+-[LP])?\s*", _QUIET.sub(" ", text))
    if match is None:
        return None
    words = [word for word in split(match.group(1)) if word != "--"]  # `cd -- "$(dirname ...)" &> /dev/null`
    physical = words[:1] == ["-P"] or (match.group(2) or "").strip() == "-P"
    words = words[1:] if words[:1] in (["-P"], ["-L"]) else words
    if len(words) != 1 or words[0] == "-" or not os.path.isdir(os.path.join(cwd, words[0])):
        return None  # `cd -` goes to $OLDPWD; a cd that fails prints nothing (&&) or leaves the folder (;)
    folder = os.path.normpath(os.path.join(cwd, words[0]))
    return os.path.realpath(folder) if physical else folder


def _expanded_at(text: str) -> set[int]:
    """Where a `$(` stands that bash expands: not inside single quotes, not escaped (`\\$(`)."""
    starts, quote, i = set(), "", 0
    while i < len(text):
        c = text[i]
        if quote == "'":
            quote = "" if c == "'" else quote
        elif c == "\\":
            i += 1
        elif c in "'\"" and quote in ("", c) and not (c == "'" and quote == '"'):
            quote = "" if quote else c
        elif text.startswith("$(", i):
            starts.add(i)
        i += 1
    return starts


def substitute_paths(text: str, cwd: str, expand: Callable[[str], str],
                     run_function: Callable[[list[str]], str | None] = lambda _: None) -> str:
    """`text` with each command substitution that only computes a path replaced by that path (innermost first);
    `expand` gives the script's value of a word's variables ($0, ${BASH_SOURCE[0]}, $SCRIPT_PATH); `run_function`
    what a call of one of the script's functions prints (launch/shell_function_output.py), None if not known."""
    def split(inner: str) -> list[str]:
        return [expand(word) for word in shlex.split(inner)]

    def one(found: re.Match[str]) -> str:
        inner = found.group(1)
        if found.start() not in expanded:  # `'$(dirname $0)'`: text, not a command
            return found.group(0)
        try:
            printed = _cd_and_pwd(inner, cwd, split)
            printed = printed if printed is not None else _allocation_nodes(inner, expand)
            printed = printed if printed is not None else _path_command(split(inner), cwd)
            printed = printed if printed is not None else run_function(split(inner))
        except ValueError:
            return found.group(0)
        return printed if printed is not None and _PLAIN_PATH.fullmatch(printed) else found.group(0)

    for _ in range(8):  # nested substitutions, innermost first
        expanded = _expanded_at(text)
        replaced = _INNERMOST.sub(one, text)
        if replaced == text:
            break
        text = replaced
    return text
