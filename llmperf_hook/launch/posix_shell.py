"""Which shell reads a launch script, and the bash-only constructs a POSIX `sh` (dash) does not read as bash does.

`sh train.sh` runs /bin/sh: bash in POSIX mode on RHEL-like systems (where bash's arrays, `[[`, `${X//a/b}` and
`$'...'` still work) but dash on Debian and Ubuntu, which has none of them (dash 0.5.12: `A=(1 2)` is `Syntax error:
"(" unexpected` and the script stops; `${X//a/b}`, `${X:1}`, `${X^^}`, `${!X}` are `Bad substitution` and the script
exits when the line runs; `[[`, `source`, `declare` and `X+=1` are commands that are `not found`, so a test on them is
false and the script goes on; `$'a\\tb'` is `$` followed by a single-quoted string). Most `sh` scripts are
bash-compatible, and llmperf reads scripts with bash's rules. Where the shell that runs the script is dash (named `dash`, or `sh` / a `#!/bin/sh` first line resolving to dash here), a bash-only
construct on a line dash reaches before the launch is refused, naming the line, instead of being read as bash would
read it: the user expects the script to do what it says, and dash would not.
"""

from __future__ import annotations

import os
import re
import shutil

from llmperf_hook.errors import UsageError

_SHEBANG = re.compile(r"^#!\s*(\S+)(?:\s+(\S+))?")
_CMD = r"(?:^|[;&|(]|\b(?:then|do|else|if|while|until)\s)\s*"
"""Where a command starts: the line's start, after `;`, `&&`, `||`, `|`, `(` or a keyword."""
_SYNTAX = (  # a parse error: dash stops at the line whether it would run it or not (quoted text blanked)
    (re.compile(_CMD + r"(?:export\s+|local\s+)?[A-Za-z_]\w*\+?=\("), "a bash array assignment `NAME=(...)`",
     'Syntax error: "(" unexpected, and the script stops there'),
    (re.compile(_CMD + r"function\s+[A-Za-z_][\w-]*"), "the bash `function NAME` keyword",
     "a syntax error, and the script stops there"),
    (re.compile(r"<<<"), "a bash here-string `<<<`", "Syntax error: redirection unexpected, and the script stops"),
)
_EXPANSIONS = (  # what dash does when it runs the line (double-quoted text kept: it is expanded there)
    (re.compile(r"\$\{![A-Za-z_]"), "bash's indirect expansion `${!NAME}`", "Bad substitution, and the script exits"),
    (re.compile(r"\$\{[A-Za-z_]\w*\["), "a bash array reference `${NAME[...]}`", "Bad substitution, and the script exits"),
    (re.compile(r"\$\{[A-Za-z_]\w*(?:/|\^|,|:[^-=?+])"), "a bash expansion (`${X/a/b}`, `${X:1:2}`, `${X^^}`)",
     "Bad substitution, and the script exits"),
    (re.compile(r"\$'"), "bash's `$'...'` quoting", "a `$` followed by a single-quoted string, a different word"),
)
_COMMANDS = (  # what dash does when it runs the line (quoted text blanked)
    (re.compile(_CMD + r"(?:!\s+)?\[\[\s"), "bash's `[[ ... ]]` test",
     "`[[: not found`, so the test is false and the script goes on without its branch"),
    (re.compile(_CMD + r"(?:source|declare|typeset|shopt)\s"), "a bash builtin (source, declare, typeset, shopt)",
     "`not found`, and the script goes on without it"),
    (re.compile(_CMD + r"(?:export\s+)?[A-Za-z_]\w*\+="), "bash's `NAME+=value`", "`not found`, so NAME keeps its value"),
)
# Not refused: `cmd &> log`, which dash runs as `cmd &` then `> log` (the same command, in the background, its output
# not in the log): the job it starts is the one bash starts.


def script_shell(shell_word: str | None, text: str) -> tuple[str, str]:
    """("bash" or "dash", what said so) for a script run by `shell_word` (sh, dash, bash ...), or by the first line of
    its text when run as a file (`./train.sh`, `sbatch job.sh`: the kernel runs the `#!` interpreter)."""
    if shell_word is None:
        match = _SHEBANG.match(text)
        if match is None:
            return "bash", "no #! line (the calling shell, bash, runs it)"
        shell_word = match.group(2) if os.path.basename(match.group(1)) == "env" and match.group(2) else match.group(1)
    name = os.path.basename(shell_word)
    if name != "sh":
        return ("dash" if name == "dash" else "bash"), name
    path = shell_word if os.sep in shell_word else (shutil.which(shell_word) or "/bin/sh")
    resolved = os.path.basename(os.path.realpath(path))
    return ("dash" if resolved.startswith("dash") else "bash"), f"{shell_word}, which is {os.path.realpath(path)} here"


def _visible(text: str, keep_double: bool) -> str:
    """The line without its comment and single-quoted text (no expansion there; the `$'` of `$'...'` kept), and
    without its double-quoted text too unless `keep_double` (bash expands inside it); quotes become blanks."""
    out, i, quote = [], 0, ""
    while i < len(text):
        c = text[i]
        if c == "\\" and quote != "'":
            out.append("  " if quote and not keep_double else text[i:i + 2])
            i += 2
            continue
        if c == "'" and quote != '"':
            dollar = quote == "" and i > 0 and text[i - 1] == "$"
            quote = "" if quote == "'" else "'"
            out.append("'" if dollar else " ")
        elif c == '"' and quote != "'":
            quote = "" if quote == '"' else '"'
            out.append(" ")
        elif c == "#" and not quote and (i == 0 or text[i - 1] in " \t;&|"):
            break
        else:
            out.append(c if not quote or (quote == '"' and keep_double) else " ")
        i += 1
    return "".join(out)


def bash_only(text: str, runs: bool) -> tuple[str, str] | None:
    """(the construct, what dash does with it) for the first bash-only construct of a logical line, or None; `runs`:
    whether the line runs (a construct that fails only when run is harmless in a branch that does not)."""
    bare, expanded = _visible(text, False), _visible(text, True)
    checks = [(bare, c) for c in _SYNTAX]
    if runs:
        checks += [(expanded, c) for c in _EXPANSIONS] + [(bare, c) for c in _COMMANDS]
    for view, (pattern, what, dash_does) in checks:
        if pattern.search(view):
            return what, dash_does
    return None


def refuse_bash_only(kind: str, path: str, shell: str, number: int, text: str, found: tuple[str, str]) -> UsageError:
    """The refusal for a bash-only construct in a script dash runs."""
    what, dash_does = found
    return UsageError(
        f"{kind} {path} is run by {shell}, a POSIX sh (dash), but line {number} uses {what} "
        f"(`{text.strip()[:70]}`), which dash does not have: dash gives {dash_does}. llmperf reads a script as the "
        f"shell that runs it would and does not guess which the script means. Run it with bash (`bash {path}`), or "
        "make its first line `#!/bin/bash` when it runs as a file (./script, sbatch).")
