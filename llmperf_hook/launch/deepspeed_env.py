"""The `.deepspeed_env` files the deepspeed launcher exports to every rank of a multi-node launch.

deepspeed/launcher/runner.py (DeepSpeed 0.19) names the file DS_ENV_FILE from the launcher's environment, default
`.deepspeed_env`, and looks for it in `~` and then in the current folder (DEEPSPEED_ENVIRONMENT_PATHS), both read, the
latter winning: each line is split at its first `=` (`key, val = var.split('=', maxsplit=1)`) and handed to the
multi-node runner's add_export (key and value stripped), which exports it on every node (pdsh `export K=V;`, mpirun
`-x K=V`, srun `--export=ALL,K=V`) after the launcher's own NCCL* / PYTHON* / UCX* / MLFLOW* / MV2* variables. This
happens only when the launch goes through that runner, `(--force_multi or more than one host) and not --no_ssh`; a
single-node launch hands the processes the launcher's own environment and never opens the file.
"""

from __future__ import annotations

import os
import re
from typing import Mapping

from llmperf_hook.errors import UsageError

ENV_FILE_VAR = "DS_ENV_FILE"
DEFAULT_ENV_FILE = ".deepspeed_env"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_file_paths(env: Mapping[str, str]) -> list[str]:
    """The files runner.py reads, in its order (`~`, then the current folder): those that exist."""
    name = env.get(ENV_FILE_VAR) or DEFAULT_ENV_FILE
    home = env.get("HOME") or os.path.expanduser("~")
    paths = [os.path.join(home, name), os.path.join(".", name)]
    return [p for k, p in enumerate(paths) if os.path.isfile(p) and p not in paths[:k]]


def read_env_file(path: str, warnings: list[str]) -> dict[str, str]:
    """The variables one file exports; a line without `=` (a blank line or a comment too) is refused, as runner.py
    stops there with a ValueError before launching."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.readlines()
    except OSError as err:
        raise UsageError(f"cannot read the deepspeed environment file {path}: {err.strerror or err}.") from None
    out: dict[str, str] = {}
    for number, line in enumerate(lines, start=1):
        if "=" not in line:
            raise UsageError(
                f"{path} line {number} ({line.rstrip(chr(10))!r}) has no '=': the deepspeed launcher splits every line "
                "of its environment file at the first '=' (runner.py: key, val = var.split('=', maxsplit=1)) and "
                "stops with a ValueError before launching. Write each line as NAME=value, with no blank or comment "
                "lines.")
        key, value = (part.strip() for part in line.split("=", 1))
        if not _NAME.fullmatch(key):
            warnings.append(f"{path} line {number}: {key!r} is not a variable name; the deepspeed launcher exports it "
                            "as written (`export {key}=...` for pdsh), which no rank reads as a variable: ignored")
            continue
        out[key] = value
    return out


def apply_rank_exports(env: dict[str, str], used: dict[str, str], multi_node: bool) -> list[str]:
    """Put what the environment files export into the job's environment (`env`, and `used`: the ranks read them)
    for a multi-node launch; the warnings (a file a single-node launch does not read, a line no rank reads)."""
    paths = env_file_paths(env)
    if ENV_FILE_VAR in env:
        used[ENV_FILE_VAR] = env[ENV_FILE_VAR]
    if not multi_node:
        return [f"{path} is not read: the deepspeed launcher exports it only to a multi-node launch (more than one "
                "host, or --force_multi, without --no_ssh); these processes get the launcher's own environment"
                for path in paths]
    warnings: list[str] = []
    for path in paths:
        exported = read_env_file(path, warnings)
        env.update(exported)
        used.update(exported)
    return warnings
