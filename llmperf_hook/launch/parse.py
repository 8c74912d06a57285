"""Stage [1]: launch command (argv + env) -> ParsedJob.

Recognised launchers: `torchrun`, `python -m torch.distributed.run`, legacy `python -m torch.distributed.launch`,
nvidia-resiliency-ext's `ft_launcher` (torchrun's options plus fault-tolerance ones),
`deepspeed`, `accelerate launch`, `srun` and `mpirun`/`mpiexec` (running a launcher or the training script directly),
`sbatch SCRIPT` (the script's launch line in the allocation its #SBATCH / command-line options ask for) and a plain
`python train.py`
(WORLD_SIZE when set, else one process). Leading `VAR=value` words and an `env VAR=value` prefix set
environment variables for the command, as a shell would; wrappers such as `nohup`, `numactl`, `taskset`, `uv run`
or `apptainer exec IMAGE` are skipped (launch/wrappers.py). A script is read with bash's rules unless dash runs it
(`dash train.sh`, `sh train.sh` where sh is dash, a `#!/bin/sh` script): then its bash-only constructs are refused
(launch/posix_shell.py).
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Mapping, Sequence

from llmperf_hook.errors import LlmperfError, UsageError
from llmperf_hook.launch.argv_words import expand_env_refs, normalise_argv, without_env_hint
from llmperf_hook.launch.deepspeed_launcher import parse_deepspeed_launcher
from llmperf_hook.launch.mpirun import MPI_LAUNCHERS, scan_mpirun, size_mpirun
from llmperf_hook.launch.parsed_job import ParsedJob, ScriptFile
from llmperf_hook.launch.launch_line import (ACCELERATE_MODULE, accelerate_options_start, apply_prefixes,
                                             reads_standard_input, shell_command_index, shell_operand,
                                             shell_script_index as _shell_script_index)
from llmperf_hook.launch.shell_script import (LITERAL_DOLLAR, logical_lines, pipelines, quoted_words, restore_dollars,
                                              shell_split, strip_redirections)
from llmperf_hook.launch.sizing import LaunchSize, Sized, finish_job
from llmperf_hook.launch.slurm import (apply_export, het_group_env, launchers_per_node, scan_srun, size_from_env,
                                      size_srun_tasks)
from llmperf_hook.launch.torchrun import parse_torchrun
from llmperf_hook.launch.wrappers import remote_command, unwrap
from llmperf_hook.provenance import Source, SourceKind

if TYPE_CHECKING:  # the shell-script reader (batch_script, sbatch, shell_variables and what they import, ~30 ms)
    # loads only where a command runs a shell (`bash run.sh`, `sbatch job.sh`, `srun bash -c "A; B"`): inside the
    # functions below, past their early returns; a plain torchrun line never needs it
    from llmperf_hook.launch.script_launch import ScriptLaunch

_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_UNSET_WORD = re.compile(r"\$\{?[A-Za-z_]\w*\}?")
"""A word that is still one variable reference once expanded: a variable the environment does not set."""
_MODULE_LAUNCHERS = {
    "torch.distributed.run": "torchrun", "torch.distributed.launch": "torch.distributed.launch",
    "deepspeed.launcher.runner": "deepspeed", ACCELERATE_MODULE: "accelerate",
    "nvidia_resiliency_ext.fault_tolerance.launcher": "ft_launcher",
}


def leading_assignments(words: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """(`VAR=value` words at the front as a mapping, the command after them): what a shell does with
    `FOO=1 torchrun ...` before it runs torchrun with FOO in its environment."""
    i = 0
    while i < len(words) and _ASSIGN.match(words[i]):
        i += 1
    return dict(w.split("=", 1) for w in words[:i]), list(words[i:])


def _is_python(word: str) -> bool:
    return re.fullmatch(r"python[0-9.]*", os.path.basename(word)) is not None


_PY_VALUED_LETTERS = "cmWX"
"""CPython's options that take an argument, attached (`-Wignore`, `-mtorch.distributed.run`) or the next word; the
others are letters that cluster (`-um torch.distributed.run` is -u -m; Python/getopt.c, `python -h`)."""


def _python_target(words: Sequence[str], i: int) -> tuple[int, str | None]:
    """For `python` at words[i]: (index of the script, or of the first word after `-m MODULE`; MODULE, or None for a
    script), past python's own options as CPython's getopt reads them (`-u`, `-X dev`, `-Wignore`, `-um MOD`, `--`)."""
    j = i + 1
    while j < len(words) and words[j].startswith("-") and words[j] != "-":
        word = words[j]
        if word == "--":
            return j + 1, None
        if word.startswith("--"):  # --check-hash-based-pycs MODE is the one long option with a value
            j += 2 if word == "--check-hash-based-pycs" else 1
            continue
        at = next((k for k, letter in enumerate(word[1:], start=1) if letter in _PY_VALUED_LETTERS), None)
        if at is None:
            j += 1
            continue
        attached = word[at + 1:]
        if word[at] == "m":
            return (j + 1, attached) if attached else (j + 2, words[j + 1] if j + 1 < len(words) else "")
        if word[at] == "c":  # `python -c CMD`: read as before, CMD in the script's place
            return (j, None) if attached else (j + 1, None)
        j += 1 if attached else 2
    return j, None


def _accelerate(words: Sequence[str], start: int, env: Mapping[str, str], used: dict[str, str],
                files: Mapping[str, ScriptFile] | None) -> LaunchSize:
    """`accelerate launch` from its first option: its reader (options, config file, yaml: ~20 ms) loads here, for
    accelerate's commands only, not for every predict."""
    from llmperf_hook.launch.accelerate import parse_accelerate

    return parse_accelerate(words, start, env, used, files)


def _python(words: Sequence[str], i: int, env: Mapping[str, str], used: dict[str, str],
            files: Mapping[str, ScriptFile] | None = None) -> LaunchSize:
    """`python [opts] -m MODULE ...` or `python [opts] script.py ...`."""
    j, module = _python_target(words, i)
    if module is not None:
        if not module:
            raise UsageError("`python -m` names no module.")
        launcher = _MODULE_LAUNCHERS.get(module)
        if launcher == "deepspeed":
            return parse_deepspeed_launcher(words, j, env, used, files)
        if launcher == "accelerate":
            return _accelerate(words, j, env, used, files)
        if launcher:
            return parse_torchrun(words, j, env, used, launcher)
        return _single_process(f"-m {module}", tuple(words[j:]), env, used)
    if j >= len(words):
        raise UsageError("the python command names no training script.")
    return _single_process(words[j], tuple(words[j + 1:]), env, used)


def _single_process(script: str, args: tuple[str, ...], env: Mapping[str, str], used: dict[str, str]) -> LaunchSize:
    sized = size_from_env(env, used)
    if sized is None:
        one = Sized(1, Source(SourceKind.DEFAULT, "plain python: one process"))
        return LaunchSize("python", one, one, one, script, args)
    nnodes, local, world, warnings = sized
    return LaunchSize("python", nnodes, local, world, script, args, tuple(warnings))


def _srun(words: Sequence[str], i: int, env: dict[str, str], used: dict[str, str]) -> LaunchSize:
    values, flags, rest, warnings = scan_srun(words, i + 1)
    if "het_group" in values:  # the step runs on that component of a heterogeneous job
        het_group_env(values["het_group"], env)
    export_env = next((name for name in ("SRUN_EXPORT_ENV", "SLURM_EXPORT_ENV") if env.get(name)), None)
    if "export" in values:
        apply_export(values["export"], env, used)
    elif export_env:  # srun's input variables for --export (src/srun/opt.c env_vars; SRUN_ wins); sbatch
        used[export_env] = env[export_env]  # --export=NONE leaves SLURM_EXPORT_ENV=NONE to the script's srun
        apply_export(env[export_env], env, used)
    words, inner = _inner_launch(words, rest, env, used, warnings)
    if inner is not None:
        many = launchers_per_node(values, flags, env, inner.launcher, inner.nproc_per_node.value)
        return replace(inner, warnings=(*inner.warnings, *many))
    nnodes, per_node, world, extra = size_srun_tasks(values, flags, env, used)
    script, args = _started_program(words, rest, env, "srun")
    return LaunchSize("srun", nnodes, per_node, world, script, args, tuple(warnings + extra))


def _mpirun(words: Sequence[str], i: int, env: dict[str, str], used: dict[str, str]) -> LaunchSize:
    """`mpirun [opts] PROGRAM`: a launcher it runs (one per node) sizes the job, else mpirun's own ranks do."""
    values, rest, warnings = scan_mpirun(words, i, env)
    words, inner = _inner_launch(words, rest, env, used, warnings)
    if inner is not None:
        return inner
    nodes, per_node, world = size_mpirun(values, words[i].split("/")[-1])
    script, args = _started_program(words, rest, env, words[i])
    return LaunchSize("mpirun", nodes, per_node, world, script, args, tuple(warnings))


def _inner_launch(words: Sequence[str], rest: int, env: dict[str, str], used: dict[str, str],
                  warnings: list[str]) -> tuple[Sequence[str], LaunchSize | None]:
    """srun/mpirun running words[rest] (`sh -c CMD` opened): the launcher it runs once per node, which sizes the job
    (the outer launcher's warnings first), or None when it starts the training script itself."""
    words = _shell_c(words, rest, env, used) or words
    words = _shell_file(words, rest, env, used) or words  # `srun bash -c "cd /w<newline>./run.sh"` runs a script too
    inner = _dispatch(words, rest, env, used, inside_srun=True)
    return words, (None if inner is None else replace(inner, warnings=(*warnings, *inner.warnings)))


def _started_program(words: Sequence[str], rest: int, env: dict[str, str], launcher: str) -> tuple[str, tuple[str, ...]]:
    """(training script, its arguments) that srun/mpirun starts as its tasks (past wrappers, `env` and `python [opts]`;
    `-m MODULE` for a module)."""
    rest = _skip_prefixes(words, rest, env)
    start, module = _python_target(words, rest) if _is_python(words[rest]) else (rest, None)
    if module:
        return f"-m {module}", tuple(words[start:])
    if start >= len(words):
        raise UsageError(f"the python command that {launcher} starts names no training script.")
    return words[start], tuple(words[start + 1:])


def _skip_prefixes(words: Sequence[str], i: int, env: dict[str, str]) -> int:
    """Past wrappers (`nohup`, `numactl ...`) and `env A=1` / `A=1` words before the program (`nohup env A=1
    torchrun ...`, `srun ... env OMP_NUM_THREADS=1 python ...`); assignments go into `env`."""
    while i < len(words):
        j = unwrap(words, i, through_ssh=False)  # an ssh's command is read by _dispatch, as the remote shell reads it
        if j == i and (os.path.basename(words[i]) == "env" or _ASSIGN.match(words[i])):
            j = i + apply_prefixes(list(words[i:]), env)
        if j == i or j >= len(words):
            return i
        i = j
    return i


def _shell_c(words: Sequence[str], i: int, env: dict[str, str], used: dict[str, str],
             written: dict[str, ScriptFile] | None = None) -> list[str] | None:
    """`sh -c "CMD"` / `bash -x -c "CMD"` (as in `srun ... sh -c "${CMD}"`) -> the words of CMD in place of the shell.
    A CMD of several commands (`TP=2; cd /w && torchrun ...`) is a script: read as batch scripts are, its
    one launch line (or `python train.py` line) taken, and the files it writes before it (`cat > ds.json <<EOF` in
    the string: a here-document makes it a script too) go to `written`. The shell is a child process: `env` holds
    only what the command that starts it exports (child_environment)."""
    k = shell_command_index(words, i)
    if k is None:
        return None
    from llmperf_hook.launch.shell_variables import child_environment  # a shell runs (TYPE_CHECKING note)
    if LITERAL_DOLLAR in words[k]:  # `bash -c '$LAUNCHER $CMD'`: the quoted `$` are that shell's to expand, and
        # the newlines of a value it expands are blanks to its word splitting (bash manual 3.5.7), never separators
        blanks = {name: value.replace("\n", " ") for name, value in env.items()}
        words = [*words[:k], expand_env_refs(restore_dollars(words[k]), blanks, used), *words[k + 1:]]
    # the string is a script: a newline ends a command as `;` does (bash manual 3.2.4 Lists), a `#` starts a comment
    # (`bash -c "cd /w # go there<newline>torchrun ..."` is two commands, `sh -c "<newline># don't forget<newline>..."`
    # one)
    hidden: frozenset[str] = frozenset()
    lines = logical_lines(words[k])
    commands = [line.text for line in lines if pipelines(line.text)]
    if sum(len(p) for text in commands for p in pipelines(text)) > 1 or any(line.heredoc for line in lines):
        from llmperf_hook.launch.batch_script import read_batch_script  # a script: load the reader (TYPE_CHECKING note)
        from llmperf_hook.launch.posix_shell import script_shell
        launch = read_batch_script(lines, env, used, f"{words[i]} -c {words[k][:60]!r}",
                                   "the command string of", words[k + 2:], script_shell(words[i], ""))
        inner, hidden = launch.words, launch.hidden
        if written is not None:
            written.update(launch.files)
    else:  # one command: bash takes its redirections off (`python train.py ... > log 2>&1`, bash manual 3.6)
        text = commands[0] if commands else ""
        try:
            inner = strip_redirections(shell_split(text), quoted_words(text))[0]
        except ValueError as err:
            raise UsageError(f"cannot split the command given to {words[i]} -c ({err}): {words[k]!r}.") from None
    inner = normalise_argv(inner, env, used)  # bash expands `X=1 cmd $X` before it assigns X for cmd
    child_environment(env, hidden)
    inner = inner[apply_prefixes(inner, env):]
    if not inner:
        raise UsageError(f"{words[i]} -c is given an empty command.")
    if _UNSET_WORD.fullmatch(inner[0]):
        raise UsageError(f"{words[i]} -c runs {inner[0]} as its command, a variable that shell does not have as "
                         "llmperf reads it (not in its environment, or set where only running the script gives its "
                         f"value: in a loop, or from a command's output); unset, it expands to nothing and `"
                         f"{' '.join(inner[1:3])} ...` runs as the command. Export it with a plain value, or write the "
                         "launcher itself.")
    return [*words[:i], *inner]


def _shell_file(words: Sequence[str], i: int, env: dict[str, str], used: dict[str, str]) -> list[str] | None:
    """`srun bash run.sh ARGS` / `srun ./run.sh ARGS` (past wrappers): each task runs the script, so its launch line
    (a launcher it starts once per task, or the python it runs as the task) takes the shell's place, as for `srun
    bash -c CMD`; None when words[i] runs no script file that is there to read."""
    i = _skip_prefixes(words, i, env)
    at = _shell_script_index(words, i) if i < len(words) else None
    if at is None or not os.path.isfile(words[at]):
        return None
    from llmperf_hook.launch.shell_variables import child_environment  # a script runs (TYPE_CHECKING note)
    launch = _script_launch(words, i, env, used, None)
    inner = normalise_argv(launch.words, env, used, set(launch.unknown))
    child_environment(env, launch.hidden)
    return [*words[:i], *inner]


def _dispatch(words: Sequence[str], i: int, env: dict[str, str], used: dict[str, str], inside_srun: bool = False,
              stdin: str | None = None, files: Mapping[str, ScriptFile] | None = None) -> LaunchSize | None:
    """The launch at words[i]; `env` is parse_launch's copy of the environment, which `VAR=value` words extend;
    `stdin` is the here-document a launch script gives the command (None: llmperf's own standard input), `files` what
    the script writes before it (a hostfile or accelerate config written with `cat > FILE <<EOF`)."""
    remote = remote_command(words, i)
    if remote is not None:  # `ssh node "cd /w && torchrun ..."`: the login shell there (bash, as a rule) runs them as -c
        return _dispatch([*words[:i], "bash", "-c", remote], i, env, used, inside_srun, stdin, files)
    if os.path.basename(words[i]) == "ssh":
        raise UsageError(f"`{' '.join(words[i:])}` gives ssh no command: it opens a login shell on the host, which "
                         "starts no training. Give the command it runs there (`ssh HOST \"cd DIR && torchrun ...\"`).")
    written: dict[str, ScriptFile] = {}
    unwrapped = _shell_c(words, i, env, used, written)
    if unwrapped is not None and not written:
        return _dispatch(unwrapped, i, env, used, inside_srun, files=files)
    if unwrapped is not None:  # `bash -c 'cat > ds.json <<EOF ... EOF; deepspeed ...'`: the job reads what it wrote
        size = _dispatch(unwrapped, i, env, used, inside_srun, files={**(files or {}), **written})
        return None if size is None else _literal_dollars(size, {**written, **size.script_files}, env, used)
    j = _skip_prefixes(words, i, env)
    if j != i:
        return _dispatch(words, j, env, used, inside_srun, stdin, files)
    head = os.path.basename(words[i])
    if head in ("torchrun", "ft_launcher"):
        return parse_torchrun(words, i + 1, env, used, head)
    if head == "deepspeed":
        return parse_deepspeed_launcher(words, i + 1, env, used, files)
    start = accelerate_options_start(words, i)
    if start is not None:
        return _accelerate(words, start, env, used, files)
    if _is_python(words[i]):
        module = _python_target(words, i)[1]  # past python's own options: `python -u -m torch.distributed.launch`
        if inside_srun and module not in _MODULE_LAUNCHERS:
            return None  # srun starts the script itself: srun sizes the job
        return _python(words, i, env, used, files)
    if inside_srun:
        return None
    if head == "srun":
        return _srun(words, i, env, used)
    if head == "sbatch" or _shell_script_index(words, i) is not None or reads_standard_input(words, i):
        return _script_job(words, i, env, used, stdin)
    if head in MPI_LAUNCHERS:
        return _mpirun(words, i, env, used)
    if head.endswith(".py"):
        return _single_process(words[i], tuple(words[i + 1:]), env, used)
    raise UsageError(
        f"llmperf does not know the launcher {words[i]!r}. Give the command that starts training: torchrun ..., "
        "python -m torch.distributed.run ..., ft_launcher ..., deepspeed ..., accelerate launch ..., srun ..., mpirun ..., "
        "sbatch job.sh, bash train.sh, or python train.py ...."
    )


def _script_launch(words: Sequence[str], i: int, env: dict[str, str], used: dict[str, str],
                   stdin: str | None) -> ScriptLaunch:
    """The launch of the script words[i] runs: sbatch's (launch/sbatch.py), a shell's script file, or the script a
    shell reads from its standard input (`bash -s ARGS <<EOF`, bash manual 6.1)."""
    from llmperf_hook.launch.sbatch import script_on_input, sbatch_launch, shell_script_launch  # TYPE_CHECKING note
    if os.path.basename(words[i]) == "sbatch":
        return sbatch_launch(words, i, env, used, stdin)
    script_at = _shell_script_index(words, i)
    if script_at is not None:
        return shell_script_launch(words[script_at], env, used, words[script_at + 1:],
                                   words[i] if script_at > i else None)
    operand, _ = shell_operand(words, i)
    text = script_on_input(stdin, words[i])
    return shell_script_launch(f"the standard input of {words[i]}", env, used, words[operand:], words[i], text)


def _script_job(words: Sequence[str], i: int, env: dict[str, str], used: dict[str, str],
                stdin: str | None) -> LaunchSize | None:
    """The job a script launches: its launch line expanded with all the script's variables, then started in the
    environment the script exports (child_environment)."""
    from llmperf_hook.launch.shell_positional import missing_arguments_note  # a script runs (TYPE_CHECKING note)
    from llmperf_hook.launch.shell_variables import (child_environment, not_exported_note, unknown_value_note,
                                                     unseen_warnings)
    hidden: dict[str, str] = {}
    launch: ScriptLaunch | None = None
    try:
        launch = _script_launch(words, i, env, used, stdin)
        inner = normalise_argv(launch.words, env, used, set(launch.unknown))
        hidden = child_environment(env, launch.hidden)
        size = _dispatch(inner, apply_prefixes(inner, env), env, used, stdin=launch.stdin, files=launch.files)
    except LlmperfError as err:  # a message quotes the script's words as bash has them (`'$NPROC'`), also in
        message = restore_dollars(str(err)).replace(_QUOTED_LITERAL_DOLLAR, "$")  # a repr() of one
        unknown, missing = (launch.unknown, launch.missing_arguments) if launch is not None else ({}, {})
        unknown_note = unknown_value_note(message, unknown)
        notes = not_exported_note(message, hidden) + unknown_note + missing_arguments_note(message, missing)
        raise type(err)(without_env_hint(message, unknown_note) + notes) from err.__cause__
    if size is not None:
        size = replace(size, warnings=(*launch.warnings, *size.warnings, *unseen_warnings(hidden)),
                       undecided=(*launch.undecided, *size.undecided),
                       undecided_options={**launch.undecided_options, **size.undecided_options},
                       unknown={**launch.unknown, **size.unknown},
                       missing_arguments={**launch.missing_arguments, **size.missing_arguments})
    return _literal_dollars(size, launch.files, env, used)


_QUOTED_LITERAL_DOLLAR = repr(LITERAL_DOLLAR)[1:-1]
"""LITERAL_DOLLAR as a message's `{value!r}` writes it (`\\ue024`: repr escapes an unprintable character)."""


def _literal_dollars(size: LaunchSize | None, files: dict[str, ScriptFile], env: dict[str, str],
                     used: dict[str, str]) -> LaunchSize | None:
    """A script's job with the `$` bash took literally (`'$HOME'`, `\\$X`) put back, now that nothing expands it."""
    for table in (env, used):
        table.update({name: restore_dollars(value) for name, value in table.items() if LITERAL_DOLLAR in value})
    files = {path: replace(file, text=restore_dollars(file.text), command=restore_dollars(file.command))
             for path, file in files.items()}
    if size is None:
        return None
    return replace(size, script=restore_dollars(size.script), script_args=tuple(map(restore_dollars, size.script_args)),
                   warnings=tuple(map(restore_dollars, size.warnings)),
                   **({"script_files": files} if files else {}))


def parse_launch(
    argv: Sequence[str], env: Mapping[str, str], nnodes: int | None = None, nproc_per_node: int | None = None,
    cluster_gpus_per_node: int | None = None,
) -> ParsedJob:
    """Parse a launch command; `nnodes`/`nproc_per_node` are llmperf's overrides (highest precedence);
    `cluster_gpus_per_node` (the --cluster's GPUs per node) is what 'every GPU of the node' means when neither the
    command nor its environment says."""
    env_all = dict(env)
    used: dict[str, str] = {}
    words = [str(w) for w in argv]
    start = apply_prefixes(words, env_all)
    words = words[:start] + normalise_argv(words[start:], env_all, used)
    if start >= len(words):
        raise UsageError("no launch command given: put the training command after `--`, e.g. `-- torchrun ... pretrain_gpt.py ...`.")
    size = _dispatch(words, start, env_all, used)
    assert size is not None
    try:
        return finish_job(size, tuple(str(a) for a in argv), env_all, used, nnodes, nproc_per_node,
                          cluster_gpus_per_node)
    except UsageError as err:  # `--nproc-per-node $NP`: where the script sets NP so that only running it tells
        from llmperf_hook.launch.shell_variables import unknown_value_note
        note = unknown_value_note(str(err), size.unknown)
        raise UsageError(without_env_hint(str(err), note) + note) from None
