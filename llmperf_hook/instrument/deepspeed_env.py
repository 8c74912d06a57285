"""Keep the hook's PYTHONPATH in what DeepSpeed's multi-node runners export when `.deepspeed_env` sets its own.

deepspeed/launcher/runner.py (DeepSpeed 0.19.8, unchanged on master edaa722, 2026-08): on a multi-node launch
(pdsh, OpenMPI, MPICH, Intel MPI, MVAPICH, Slurm; `--force_multi` too) the runner exports to every node each
variable whose name starts with PYTHON (EXPORT_ENVS), PYTHONPATH with the working directory put first, and
then every `KEY=VALUE` line of the environment files: the name in $DS_ENV_FILE (default `.deepspeed_env`),
joined to the home folder and then to the working directory (DEEPSPEED_ENVIRONMENT_PATHS). Each export replaces
an earlier one of the same name (MultiNodeRunner.add_export fills a dict), so a PYTHONPATH line in such a file
replaces ours on every node and no rank would load the hook. (A single-node launch reads no file: the ranks
inherit the runner's environment.)

When a file the runner would read sets PYTHONPATH, the session writes jobs/<id>/deepspeed_env: the lines of
those files in the runner's order, unchanged, then `PYTHONPATH=<hook folder>:<the value they set>`, and points
DS_ENV_FILE at it. An absolute DS_ENV_FILE is what both joins return (os.path.join(home, "/abs") == "/abs"), so
the runner reads our file (twice, to the same effect) and nothing else. The user's files are left untouched.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

DS_ENV_FILE = "DS_ENV_FILE"
"""Variable naming DeepSpeed's environment file (runner.py: DEEPSPEED_ENVIRONMENT_NAME)."""
DEFAULT_ENV_FILE_NAME = ".deepspeed_env"
JOB_ENV_FILE = "deepspeed_env"
"""Our copy, in jobs/<job id>/."""


def runner_env_files(env: Mapping[str, str], cwd: Path) -> list[Path]:
    """The files DeepSpeed's runner would read, in its order: <home>/<name>, then <cwd>/<name>, those that exist."""
    name = env.get(DS_ENV_FILE) or DEFAULT_ENV_FILE_NAME
    home = env.get("HOME") or os.path.expanduser("~")
    found = []
    for folder in (Path(home), cwd):
        path = folder / name  # an absolute name replaces the folder, as os.path.join does
        if path.is_file():
            found.append(path)
    return found


def _read_lines(files: list[Path]) -> list[str]:
    """The files' lines as the runner's readlines() gives them, one file after the other: a value keeps its
    line's newline (the runner does not strip it); a file's unterminated last line gets one when another file
    follows, so that file's first line stays a line of its own."""
    lines: list[str] = []
    for path in files:
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        try:
            with open(path) as fd:  # as the runner opens and reads it
                lines += fd.readlines()
        except (OSError, UnicodeDecodeError):
            pass  # the runner fails on it too, with its own message
    return lines


def _is_python_path(line: str) -> bool:
    key, sep, _ = line.partition("=")
    return bool(sep) and key.strip() == "PYTHONPATH"


def runner_sets_python_path(env: Mapping[str, str], cwd: Path) -> bool:
    """Whether an environment file DeepSpeed's runner would read sets PYTHONPATH (then the session writes ours)."""
    return any(_is_python_path(line) for line in _read_lines(runner_env_files(env, cwd)))


def keep_hook_in_deepspeed_env(env: Mapping[str, str], hook_dir: Path, job_dir: Path, cwd: Path) -> dict[str, str]:
    """{DS_ENV_FILE: our copy} when an environment file the runner would read sets PYTHONPATH, else {}.

    Our copy holds the files' lines in the runner's order with one PYTHONPATH line, the last one they hold (whose
    value the runner exports; where it exports it is fixed by the environment's PYTHONPATH, exported first), with
    the hook's folder put first in its value and the rest of the line, its ending included, kept as it was."""
    lines = _read_lines(runner_env_files(env, cwd))
    kept = [i for i, line in enumerate(lines) if _is_python_path(line)]
    if not kept:
        return {}
    last = lines[kept[-1]]
    value = last.partition("=")[2]
    lines[kept[-1]] = f"PYTHONPATH={hook_dir}{os.pathsep if value.strip() else ''}{value}"
    ours = job_dir / JOB_ENV_FILE
    ours.write_text("".join(line for i, line in enumerate(lines) if i not in kept[:-1]))
    return {DS_ENV_FILE: str(ours.resolve())}
