"""Which command of a script starts the training job: a distributed launcher, a submission, or python running one.

A script holds many commands (`mkdir -p`, `echo`, `cat <<EOT > ds.json`); the one llmperf predicts is the command
whose program, past `VAR=value` prefixes, `env` and wrappers (launch/wrappers.py), is a launcher, or a python that
runs a launcher module (`python -u -m torch.distributed.run ...`). A `python train.py` line is a single run.
"""

from __future__ import annotations

import os
import re
from typing import Sequence

from llmperf_hook.launch.shell_variables import ASSIGN
from llmperf_hook.launch.wrappers import unwrap

LAUNCH_HEADS = frozenset({"srun", "torchrun", "ft_launcher", "deepspeed", "accelerate", "accelerate-launch", "mpirun", "mpiexec",
                          "orterun", "prterun", "mpiexec.hydra", "sbatch"})
"""Commands that start the training job; `sbatch job.sh` from a script that submits it (Megatron-LM's
examples/academic_paper_scripts/sc21: run_figure_*.sh sources SBATCH.sh, whose `sbatch ... SRUN.sh` is the launch)."""
_PY_OPTIONS = r"(?:-[WX]\s+\S+\s+|-\S+\s+)*"
"""python's own options before its script or -m (`-u`, `-X dev`, `-W ignore`)."""
PY_SCRIPT = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*\S*python[0-9.]*\s+" + _PY_OPTIONS + r"\S+\.py\b")
"""A `python train.py` line (after `VAR=value` prefixes): one process, unless nothing else launches."""
_PY_LAUNCH = re.compile(r"\bpython[0-9.]*\s+" + _PY_OPTIONS + r"-[A-Za-z]*m\s*"  # `-m MOD`, `-um MOD`, `-mMOD`
                        r"(?:torch\.distributed\.(?:run|launch)|deepspeed\.launcher\.runner|accelerate\.commands\.launch"
                        r"|nvidia_resiliency_ext\.fault_tolerance\.launcher)\b")


def command_head(words: Sequence[str]) -> str:
    """The program a command runs, past `VAR=value` prefixes, `env` and wrappers (`nohup torchrun ... &`, `exec srun
    ...`, `time deepspeed ...`)."""
    i = 0
    while i < len(words) and (ASSIGN.match(words[i]) or words[i] == "env"):
        i += 1
    i = unwrap(words, i) if i < len(words) else i
    return os.path.basename(words[i]) if i < len(words) else ""


def is_launch(words: Sequence[str], line: str) -> bool:
    """The command starts a distributed launcher (after `VAR=value` prefixes), or python runs one as a module."""
    return command_head(words) in LAUNCH_HEADS or bool(_PY_LAUNCH.search(line))
