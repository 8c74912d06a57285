"""`sbatch [options] SCRIPT` -> the launch line inside SCRIPT, run in the allocation the options ask for.

What a user means by `llmperf predict -- sbatch job.sh` is "the job this script will run". sbatch
(slurm.schedmd.com/sbatch.html) reads `#SBATCH` lines at the top of the script, up to its first command, and
options on its own command line win over them. The script then runs on the first node with the allocation in
SLURM_* variables (SLURM_NNODES / SLURM_JOB_NUM_NODES, SLURM_NTASKS_PER_NODE, SLURM_NTASKS, SLURM_GPUS_ON_NODE),
which the srun or launcher line inside inherits. So: the allocation becomes those variables (only for what the
options state; the rest comes from the submitting environment, which sbatch exports by default), plain
`NAME=value` / `export NAME=value` lines of the script are applied in order, and the one launch line (srun,
torchrun, deepspeed, accelerate, mpirun, or python running a launcher module) is parsed in that environment; a
script without one but with one `python train.py` line runs that once, on the first node (one process).
A script with no such line, or several, exits 2 naming them: pass the line itself after `--`.
`llmperf run -- sbatch job.sh` still submits the script unchanged.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Sequence

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.argv_words import expand_env_refs
from llmperf_hook.launch.options import Option, scan_options
from llmperf_hook.launch.slurm import SRUN_OPTIONS

SBATCH_OPTIONS: dict[str, Option] = {
    **SRUN_OPTIONS, "--wrap": Option("wrap"), "-a": Option("array"), "--array": Option("array"),
    "-d": Option("dependency"), "--dependency": Option("dependency"), "--mail-type": Option("mail_type"),
    "--mail-user": Option("mail_user"), "--gpus-per-socket": Option("gpus_per_socket"),
    "--requeue": Option("requeue", takes_value=False), "--parsable": Option("parsable", takes_value=False),
}
SBATCH_JOB_ID = "llmperf-sbatch"
"""SLURM_JOB_ID given to the script's launch line: the job does not exist yet (sbatch has not run)."""
_LAUNCH_HEADS = frozenset({"srun", "torchrun", "deepspeed", "accelerate", "accelerate-launch", "mpirun", "mpiexec",
                           "orterun", "prterun", "mpiexec.hydra"})
_TASK_LAYOUT = ("SLURM_NTASKS_PER_NODE", "SLURM_NTASKS", "SLURM_GPUS_ON_NODE")
_ASSIGN = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_PY_SCRIPT = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*\S*python[0-9.]*\s+(?:-\S+\s+)*\S+\.py\b")
_PY_LAUNCH = re.compile(r"\bpython[0-9.]*\s+(?:-\S+\s+)*-m\s+(?:torch\.distributed\.(?:run|launch)|deepspeed\.launcher"
                        r"\.runner|accelerate\.commands\.launch)\b")


def _read_script(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except FileNotFoundError:
        raise UsageError(f"sbatch script {path} does not exist (relative paths are read from {os.getcwd()}). Run llmperf "
                         "from the directory you submit from, or give the path.") from None
    except OSError as err:
        raise UsageError(f"cannot read sbatch script {path}: {err.strerror or err}.") from None


def _lines(text: str) -> list[tuple[int, str]]:
    """(line number, logical line) with backslash continuations joined, as bash reads them: not after a comment
    line (bigscience tr11-176B-ml.slurm has `#    --universal-checkpoint \\` right above `export CMD=...`)."""
    out: list[tuple[int, str]] = []
    pending, first = "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if not pending:
            first = number
            if line.lstrip().startswith("#"):  # a comment ends at its newline: its trailing backslash joins nothing
                out.append((number, line))
                continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append((first, pending + line))
        pending = ""
    if pending:
        out.append((first, pending))
    return out


def _header_options(lines: list[tuple[int, str]]) -> list[str]:
    """#SBATCH words before the script's first command (sbatch stops reading directives there)."""
    words: list[str] = []
    for _, line in lines:
        stripped = line.strip()
        if stripped.startswith("#SBATCH"):
            try:
                words += shlex.split(stripped[len("#SBATCH"):], comments=True)
            except ValueError:
                continue
        elif stripped and not stripped.startswith("#"):
            break
    return words


def _allocation_env(values: dict[str, str]) -> dict[str, str]:
    """The SLURM_* variables the batch step sees for what the sbatch options state."""
    env: dict[str, str] = {"SLURM_JOB_ID": SBATCH_JOB_ID}
    if "nodes" in values:
        nodes = values["nodes"].split("-")[-1]
        env["SLURM_NNODES"] = env["SLURM_JOB_NUM_NODES"] = nodes
    if "ntasks_per_node" in values:
        env["SLURM_NTASKS_PER_NODE"] = values["ntasks_per_node"]
    if "ntasks" in values:
        env["SLURM_NTASKS"] = values["ntasks"]
    gpus = values.get("gpus_per_node") or (values["gres"] if "gpu" in values.get("gres", "") else None)
    if gpus:
        env["SLURM_GPUS_ON_NODE"] = gpus.split(",")[0].split(":")[-1]
    elif _digits(values.get("gpus_per_task")) and _digits(values.get("ntasks_per_node")):
        env["SLURM_GPUS_ON_NODE"] = str(int(_digits(values["gpus_per_task"])) * int(_digits(values["ntasks_per_node"])))
    elif _digits(values.get("gpus")) and _digits(values.get("nodes", "1").split("-")[-1]):  # -G total over the nodes
        nodes = int(_digits(values.get("nodes", "1").split("-")[-1]))
        env["SLURM_GPUS_ON_NODE"] = str(-(-int(_digits(values["gpus"])) // max(nodes, 1)))
    return env


def _digits(value: str | None) -> str:
    """The count of a GPU option ("h100:8" -> "8"), or "" when it is not a number."""
    text = (value or "").split(",")[0].split(":")[-1]
    return text if text.isdigit() else ""


def _is_launch(words: Sequence[str], line: str) -> bool:
    i = 0
    while i < len(words) and _ASSIGN.match(words[i]):
        i += 1
    head = os.path.basename(words[i]) if i < len(words) else ""
    return head in _LAUNCH_HEADS or bool(_PY_LAUNCH.search(line))


def _script_launch(lines: list[tuple[int, str]], env: dict[str, str], used: dict[str, str], path: str) -> list[str]:
    """Apply the script's plain assignments in order; return the words of its one launch line."""
    found: list[tuple[int, list[str]]] = []
    single: list[tuple[int, list[str]]] = []
    for number, line in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            words = shlex.split(stripped, comments=True)
        except ValueError:
            continue
        assign = _ASSIGN.match(" ".join(words[-2:])) if words[:1] == ["export"] and len(words) == 2 else \
            _ASSIGN.match(words[0]) if len(words) == 1 else None
        if assign:
            if not found and "$(" not in assign.group(2) and "`" not in assign.group(2):
                env[assign.group(1)] = expand_env_refs(assign.group(2), env, used)  # command substitutions stay unset
            continue
        if words and _is_launch(words, stripped):
            found.append((number, words))
        elif words and _PY_SCRIPT.match(stripped):
            single.append((number, words))
    found = found or single  # no launcher: a `python train.py` line runs once, on the first node
    if len(found) != 1:
        listed = "; ".join(f"line {n}: {' '.join(w)[:80]}" for n, w in found[:4])
        what = f"{len(found)} launch lines ({listed})" if found else "no launch line (srun, torchrun, deepspeed, accelerate " \
            "launch, mpirun or python -m torch.distributed.run)"
        raise UsageError(f"sbatch script {path} has {what}; llmperf predicts one training launch. Give that line after `--` "
                         "(e.g. `llmperf predict --nnodes N -- srun ... python pretrain_gpt.py ...`).")
    return found[0][1]


def sbatch_launch(words: Sequence[str], i: int, env: dict[str, str], used: dict[str, str]) -> list[str]:
    """The launch words sbatch's script (or --wrap command) runs; `env` gains the allocation and the script's
    assignments. Command-line options win over #SBATCH lines."""
    cli = scan_options(words, i + 1, SBATCH_OPTIONS, "sbatch")
    if "wrap" in cli.values:
        text, path = cli.values["wrap"], "--wrap"
        lines, header = [(1, text)], cli.values
    else:
        if cli.rest >= len(words):
            raise UsageError("sbatch is given no script: write `sbatch [options] job.sh` or `sbatch --wrap \"CMD\"`.")
        path = words[cli.rest]
        lines = _lines(_read_script(path))
        header = {**scan_options(_header_options(lines), 0, SBATCH_OPTIONS, f"sbatch script {path} #SBATCH").values,
                  **cli.values}
    allocation = _allocation_env(header)
    env.update(allocation)
    used.update(allocation)
    words = _script_launch(lines, env, used, path)
    if not _is_launch(words, " ".join(words)):  # the batch step runs a bare python once: not the allocation's tasks
        for name in _TASK_LAYOUT:
            if name in allocation:
                env.pop(name, None)
                used.pop(name, None)
    return words
