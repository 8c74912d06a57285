"""Which command of a script starts the training job: a distributed launcher, a submission, or python running one.

A script holds many commands (`mkdir -p`, `echo`, `cat <<EOT > ds.json`); the one llmperf predicts is the command
whose program, past `VAR=value` prefixes, `env` and wrappers (launch/wrappers.py), is a launcher, or a python that
runs a launcher module (`python -u -m torch.distributed.run ...`), or a shell given such a command as its command
string (`bash -c "$LAUNCHER train.py ..."`), on its standard input (`bash <<EOF` ... `EOF`) or in the script file it
runs (`bash ds_pretrain_gpt2.sh ARGS`). A `python train.py` line is a single run.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Sequence

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.shell_script import ASSIGN
from llmperf_hook.launch.slurm import scan_srun
from llmperf_hook.launch.wrappers import env_options, remote_command, unwrap

LAUNCH_HEADS = frozenset({"srun", "torchrun", "ft_launcher", "deepspeed", "accelerate", "accelerate-launch", "mpirun", "mpiexec",
                          "orterun", "prterun", "mpiexec.hydra", "sbatch"})
"""Commands that start the training job; `sbatch job.sh` from a script that submits it (Megatron-LM's
examples/academic_paper_scripts/sc21: run_figure_*.sh sources SBATCH.sh, whose `sbatch ... SRUN.sh` is the launch)."""
SHELLS = frozenset({"sh", "bash", "zsh", "dash"})
ACCELERATE_MODULE = "accelerate.commands.launch"
"""The module `accelerate launch` runs (`python -m accelerate.commands.launch`). It and accelerate_options_start live
here, not in launch/accelerate.py, so that telling an accelerate command apart loads accelerate's reader (and yaml)
for accelerate's commands only."""
_COMMAND_START = r"(?:^|[;&|(`]|\b(?:then|do|else|exec|nohup|time|eval)\s|=[\"']?|-c\s+[\"']?)\s*"
"""Where a shell's commands start a command: a line's start, after `;`, `&`, `|`, `(`, a keyword or a wrapper, or
in a value assigned (`run_cmd="deepspeed ..."`, eval'd later) or given to -c."""
_NAMED_HEAD = re.compile(_COMMAND_START + r"(?:[A-Za-z_]\w*=\S*\s+)*(?:\S*/)?(?:" +
                         "|".join(map(re.escape, sorted(LAUNCH_HEADS))) + r")(?=$|[\s\"';&|)`])", re.MULTILINE)
"""A launch head where a shell's commands would run it (`echo torchrun` names none)."""
_PY_OPTIONS = r"(?:-[WX]\s+\S+\s+|-\S+\s+)*"
"""python's own options before its script or -m (`-u`, `-X dev`, `-W ignore`)."""
PY_SCRIPT = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*\S*python[0-9.]*\s+" + _PY_OPTIONS + r"\S+\.py\b")
"""A `python train.py` line (after `VAR=value` prefixes): one process, unless nothing else launches."""
_PY_LAUNCH = re.compile(r"\bpython[0-9.]*\s+" + _PY_OPTIONS + r"-[A-Za-z]*m\s*"  # `-m MOD`, `-um MOD`, `-mMOD`
                        r"(?:torch\.distributed\.(?:run|launch)|deepspeed\.launcher\.runner|accelerate\.commands\.launch"
                        r"|nvidia_resiliency_ext\.fault_tolerance\.launcher)\b")
_SHELL_VALUED = frozenset({"-o", "+o", "-O", "+O", "--init-file", "--rcfile"})
"""Shell options that take the next word as their value (`bash -o pipefail train.sh`, `bash --rcfile F ...`)."""


def accelerate_options_start(words: Sequence[str], i: int) -> int | None:
    """Index of accelerate's first option when words[i] starts `accelerate launch`, `accelerate-launch` or
    `-m accelerate.commands.launch` (after `python`), else None."""
    name = os.path.basename(words[i])
    if name == "accelerate" and i + 1 < len(words) and words[i + 1] == "launch":
        return i + 2
    if name == "accelerate-launch":
        return i + 1
    if words[i] == "-m" and i + 1 < len(words) and words[i + 1] == ACCELERATE_MODULE:
        return i + 2
    return None


def shell_operand(words: Sequence[str], i: int) -> tuple[int, str]:
    """For a shell at words[i] (sh, bash, zsh, dash): the index of its first operand past its own options (`bash -x
    -e train.sh`, `bash -o pipefail train.sh`, `bash -- train.sh`) and the single-letter options it was given (bash
    manual 6.1 Invoking Bash: -c reads the command from the operand, -s from standard input)."""
    j, letters = i + 1, ""
    while j < len(words) and words[j][:1] in "-+" and len(words[j]) > 1:
        word = words[j]
        if word == "--":
            return j + 1, letters
        j += 1
        if word in _SHELL_VALUED or (not word.startswith("--") and word[1:].count("o") + word[1:].count("O")):
            j += 1  # a cluster like -eo takes its value from the next word
        if not word.startswith("--"):
            letters += word[1:]
    return j, letters


def shell_command_index(words: Sequence[str], i: int) -> int | None:
    """For a shell at words[i] given -c (sh, bash, zsh, dash): the index of CMD, its first operand past all its own
    options (`bash -c CMD`, `bash -lc CMD`, `bash -x -c CMD`, `bash -o pipefail -c CMD`; bash manual 6.1 Invoking
    Bash: with -c the commands are read from the first non-option argument); None for any other command."""
    if os.path.basename(words[i]) not in SHELLS:
        return None
    operand, letters = shell_operand(words, i)
    return operand if "c" in letters and operand < len(words) else None


def reads_standard_input(words: Sequence[str], i: int) -> bool:
    """A shell at words[i] reads its commands from standard input: no -c and no script operand, or -s (bash manual
    6.1: `bash <<EOF`, `bash -s ARGS <<EOF`)."""
    if os.path.basename(words[i]) not in SHELLS:
        return False
    operand, letters = shell_operand(words, i)
    return "c" not in letters and ("s" in letters or operand >= len(words))


def apply_prefixes(words: Sequence[str], env: dict[str, str]) -> int:
    """`VAR=value` words and `env [options]` before a command's program applied to `env`, the environment it runs in
    (bash manual 3.7.4: `VAR=x cmd` puts VAR in cmd's environment only); the index past them."""
    i = 0
    while i < len(words) and (ASSIGN.match(words[i]) or words[i] == "env"):
        if words[i] == "env":
            i = env_options(words, i, env)
        else:
            name, value = words[i].split("=", 1)
            env[name] = value
            i += 1
    return i


def _head_index(words: Sequence[str]) -> int:
    """Index of the program a command runs, past `VAR=value` prefixes, `env` and wrappers."""
    i = apply_prefixes(words, {})
    return unwrap(words, i) if i < len(words) else i


def command_head(words: Sequence[str]) -> str:
    """The program a command runs, past `VAR=value` prefixes, `env` and wrappers (`nohup torchrun ... &`, `exec srun
    ...`, `time deepspeed ...`)."""
    i = _head_index(words)
    return os.path.basename(words[i]) if i < len(words) else ""


def shell_commands(words: Sequence[str], stdin: str | None) -> str | None:
    """The commands the shell that `words` runs (past prefixes and wrappers) reads: its -c command string, or `stdin`
    (a here-document's text) when it reads its standard input, or the command an `ssh` runs on its host (a remote
    shell's -c string, wrappers.remote_command); None for any other command, or a shell's script file."""
    i = apply_prefixes(words, {})
    i = unwrap(words, i, through_ssh=False) if i < len(words) else i
    remote = remote_command(words, i) if i < len(words) else None
    if remote is not None:  # `ssh node "cd /w && torchrun ..."`: the remote shell's -c string
        return remote
    i = _head_index(words)
    if i >= len(words) or os.path.basename(words[i]) not in SHELLS:
        return None
    k = shell_command_index(words, i)
    return words[k] if k is not None else stdin if reads_standard_input(words, i) else None


def shell_script_index(words: Sequence[str], i: int) -> int | None:
    """The index of the script file in `bash train.sh ...` / `bash -x -e train.sh` / `sh train.sh` (past the shell's
    own options; not -c or -s, which take no script file) or `./train.sh ...`; None when words[i] runs no script."""
    head = os.path.basename(words[i])
    if head in SHELLS:
        operand, letters = shell_operand(words, i)
        return operand if operand < len(words) and not {"c", "s"} & set(letters) else None
    return i if head.endswith(".sh") else None


def script_file(words: Sequence[str]) -> int | None:
    """The index of the script file the command runs (`bash run.sh ARGS`, `./run.sh`), past prefixes and wrappers."""
    i = _head_index(words)
    return shell_script_index(words, i) if i < len(words) else None


def is_launch(words: Sequence[str], line: str, child: str | None = None) -> bool:
    """The command starts a distributed launcher (after `VAR=value` prefixes), or python runs one as a module; or it
    runs a shell, whose commands `child` (as that shell will read them: its -c string, its standard input, its script
    file) name one (`bash -c "torchrun ..."`, `bash <<EOF`, `bash ds_pretrain_gpt2.sh ARGS`)."""
    if child is not None:
        commands = "\n".join(text for text in child.splitlines() if not text.lstrip().startswith("#"))
        return bool(_NAMED_HEAD.search(commands) or _PY_LAUNCH.search(commands))
    i = _head_index(words)
    program = " ".join([os.path.basename(words[i]), *words[i + 1:]]) if i < len(words) else ""
    return command_head(words) in LAUNCH_HEADS or bool(_PY_LAUNCH.search(line) or _PY_LAUNCH.match(program))


def _runs_python_code(words: Sequence[str]) -> bool:
    """`python [options] -c CODE` (past prefixes and wrappers): python runs CODE, no script (an option cluster like
    `-uc` too). The first word that is no option is a script, -m a module; after -W / -X (which take a value)
    llmperf does not look further, and the command counts as no inline code."""
    i = _head_index(words)
    if i >= len(words) or not re.fullmatch(r"python[0-9.]*", os.path.basename(words[i])):
        return False
    for word in words[i + 1:]:
        if not word.startswith("-") or word.startswith("--") or word == "-":
            return False
        for letter in word[1:]:
            if letter in "cmWX":
                return letter == "c"
    return False


def python_code_step(words: Sequence[str]) -> bool:
    """`srun ... python -c CODE`, or `srun ... bash -c 'python -c "CODE"'`: a step that runs inline code on each task
    (bigscience's .slurm scripts check every node's GPU this way, 'testing for potential faulty nodes', before their
    launch line), not the training launch."""
    i = _head_index(words)
    if i >= len(words) or os.path.basename(words[i]) != "srun":
        return False
    try:
        inner = list(words[scan_srun(words, i + 1)[2]:])
        k = shell_command_index(inner, _head_index(inner))
        inner = shlex.split(inner[k]) if k is not None else inner
    except (UsageError, ValueError, IndexError):
        return False
    return _runs_python_code(inner)
