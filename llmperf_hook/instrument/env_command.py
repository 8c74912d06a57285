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
_VALUED_LONG = ("--unset", "--chdir", "--split-string", "--argv0")
"""env's long options whose value is the next word unless given as --NAME=VALUE (coreutils env.c longopts)."""
_VALUED_SHORT = "uCSa"
"""env's short options that take a value (getopt "+C:iS:u:v0"; -a since coreutils 9.6): the rest of their cluster,
or else the next word."""


def keep_hook_in_env_command(argv: Sequence[str], hook_dir: Path) -> list[str]:
    """`argv` with the hook's folder first in the PYTHONPATH every leading `env` sets (module docstring)."""
    words = list(argv)
    i = 0
    while i < len(words) and os.path.basename(words[i]) == "env":
        i = _keep_hook_in_one_env(words, i + 1, str(hook_dir))
    return words


def _read_option(words: list[str], i: int) -> tuple[int, bool]:
    """(how many words the option at words[i] spans, whether it makes env start the program without the inherited
    PYTHONPATH: -i / --ignore-environment / a lone `-`, or unsetting PYTHONPATH). A short-option cluster (`-iv`,
    `-vu NAME`, `-uNAME`, `-iC DIR`) is read as getopt does: letters up to the first that takes a value, whose
    value is the rest of the cluster or else the next word."""
    word, after = words[i], words[i + 1:i + 2]
    if word == "-" or word.startswith("--"):
        name, has_value, value = word.partition("=")
        spans = 2 if name in _VALUED_LONG and not has_value and after else 1
        value = value if has_value else "".join(after)
        return spans, word in ("-", "--ignore-environment") or (name == "--unset" and value == "PYTHONPATH")
    letters = word[1:]
    cut = next((k for k, letter in enumerate(letters) if letter in _VALUED_SHORT), len(letters))
    value, spans = letters[cut + 1:], 1
    if cut < len(letters) and not value and after:
        value, spans = after[0], 2
    return spans, "i" in letters[:cut] or (letters[cut:cut + 1] == "u" and value == "PYTHONPATH")


def _keep_hook_in_one_env(words: list[str], i: int, hook: str) -> int:
    """Rewrites one env's words from words[i] on, in place; returns the index of the program it runs. env reads
    options up to the first other word or `--` (getopt_long, _read_option), then NAME=VALUE words."""
    drops, sets, options = False, False, True
    while i < len(words):
        word = words[i]
        if options and word == "--":
            options = False
        elif options and word.startswith("-"):
            spans, drops_here = _read_option(words, i)
            drops, i = drops or drops_here, i + spans
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
