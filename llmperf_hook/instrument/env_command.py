"""A job launched through `env` keeps the hook: `env PYTHONPATH=/opt/code python train.py` sets its own PYTHONPATH.

The hook reaches a job through PYTHONPATH (bootstrap.py). `env NAME=VALUE ... PROGRAM` runs PROGRAM with NAME set
to VALUE, replacing what it inherited, and `env -i` (or `-u PYTHONPATH`) starts it without ours: in both cases no
Python process of the job would import the generated sitecustomize. So before the launch, in every `env` at the
front of the command (GNU coreutils env: options, then NAME=VALUE words, then the program; `env` may follow
`env`), the hook's folder is put first in each PYTHONPATH it sets, and PYTHONPATH=<hook folder> is added where it
drops the inherited one and sets none. The job's own entries stay, in order, after ours, as with an inherited
PYTHONPATH (session.build_child_env). Only the launched argument list changes; the session records the user's.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Sequence

_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_VALUED = frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"})
"""env options whose value is the next word (coreutils env.c long options and `u:C:S:`)."""
_DROPS_ALL = frozenset({"-i", "--ignore-environment", "-"})


def keep_hook_in_env_command(argv: Sequence[str], hook_dir: Path) -> list[str]:
    """`argv` with the hook's folder first in the PYTHONPATH every leading `env` sets (module docstring)."""
    words = list(argv)
    i = 0
    while i < len(words) and os.path.basename(words[i]) == "env":
        i = _keep_hook_in_one_env(words, i + 1, str(hook_dir))
    return words


def _drops_python_path(words: list[str], i: int) -> bool:
    """Whether the option at words[i] makes env start the program without the inherited PYTHONPATH."""
    word = words[i]
    if word in _DROPS_ALL or (re.fullmatch(r"-[0iv]+", word) is not None and "i" in word):
        return True
    if word in ("-u", "--unset"):
        return words[i + 1:i + 2] == ["PYTHONPATH"]
    return word in ("-uPYTHONPATH", "--unset=PYTHONPATH")


def _keep_hook_in_one_env(words: list[str], i: int, hook: str) -> int:
    """Rewrites one env's words from words[i] on, in place; returns the index of the program it runs. env reads
    options up to the first other word or `--` (getopt_long with "+C:iS:u:v0"), then NAME=VALUE words."""
    drops, sets, options = False, False, True
    while i < len(words):
        word = words[i]
        if options and word == "--":
            options = False
        elif options and word.startswith("-"):
            drops = drops or _drops_python_path(words, i)
            i += 2 if word in _VALUED else 1
            continue
        elif _ASSIGN.match(word):
            options = False
            name, value = word.split("=", 1)
            if name == "PYTHONPATH":
                words[i] = f"PYTHONPATH={hook}" + (os.pathsep + value if value else "")
                sets = True
        else:
            break
        i += 1
    if drops and not sets:
        words.insert(i, f"PYTHONPATH={hook}")
        i += 1
    return i
