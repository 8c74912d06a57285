"""`llmperf run`'s checks of what it is about to start, made before the command is predicted (a prediction of a job
that cannot start is noise before python's error): the training script of a python / torchrun / deepspeed command
(or its `-m` module), and the --run-dir the records go to.

The entry point is what the interpreter opens in the job's working directory (ours: `run` execs or spawns the command
here): CPython's `can't open file` / `No module named` errors (Modules/main.c pymain_run_file, runpy
_get_module_details), which torchrun (torch/distributed/run.py: `[PYTHON_EXEC or sys.executable, -u, (-m,) script]`)
and the deepspeed launcher (deepspeed/launcher/launch.py: `[sys.executable, -u, (-m,) script]`) reach in every worker.
A module is looked for without importing it (importlib's path finders over the job's directory and PYTHONPATH and
this interpreter's path), and only when the job's interpreter is this one: another one's site-packages are unknown
here; with `--no-python` the program is looked for on PATH. Launches llmperf cannot read this way (bash scripts,
srun, sbatch, accelerate) are not checked.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from llmperf_hook.errors import LlmperfError, UsageError

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec

CHECKED_LAUNCHERS = frozenset({"python", "torchrun", "torch.distributed.launch", "deepspeed"})


@dataclass(frozen=True)
class Entry:
    """The entry point a command's interpreter opens."""

    target: str
    """The script path as given, or the module name."""
    module: bool
    interpreter: str | None
    """The python that runs it (for `-m` only this one's path is searched), None when unknown."""
    launch: str
    """The command up to the entry point, for messages."""
    env: Mapping[str, str]
    """The job's environment (`VAR=value` words in front of the command included)."""
    program: bool = False
    """Run as a program, not by python (torchrun / deepspeed `--no-python`)."""
    deepspeed_words: tuple[str, ...] = ()
    """The deepspeed launcher's words before the entry: its active hosts may all be other machines
    (`_active_host_here`, asked only when the entry is missing here: it may resolve host names)."""


def check_entry(argv: Sequence[str], env: Mapping[str, str], cwd: Path | None = None) -> None:
    """A UsageError in python's own words when the command's training script (module) cannot be opened."""
    problem = entry_problem(argv, env, cwd or Path.cwd())
    if problem:
        raise UsageError(problem)


def entry_problem(argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> str:
    return entry_verdict(argv, env, cwd)[0]


def entry_verdict(argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> tuple[str, bool]:
    """(what python would say, whether to refuse): a multi-node deepspeed launch opens the entry on the hostfile's
    hosts, not here, so what this host cannot see is a warning only."""
    entry = find_entry(argv, env)
    if entry is None:
        return "", False
    if entry.program:
        said = _program_problem(entry, cwd)
        problem = (f"cannot launch `{entry.launch}`: {said} (in {cwd}; --no-python runs it as a program). Nothing was "
                   "predicted or started: check the name, or drop --no-python for a python script.") if said else ""
    else:
        said = _module_problem(entry, cwd) if entry.module else _script_problem(entry.target, cwd)
        problem = (f"cannot launch `{entry.launch}`: {entry.interpreter or 'python'}: {said} (in {cwd}). Nothing was "
                   "predicted or started: check the path or the module name, and the directory you launch from."
                   ) if said else ""
    here = _active_host_here(entry.deepspeed_words, entry.env) if problem and entry.deepspeed_words else None
    if here == "":
        return (f"`{entry.launch}` on this host: {said} (in {cwd}). The deepspeed launcher starts it on the "
                f"hostfile's hosts (pdsh: `cd {cwd}; python -u -m deepspeed.launcher.launch ...`; mpirun / srun: "
                "`python -u ...` in this folder), none of them this one, "
                "so it may exist there: launched anyway. If no host has it, every rank fails at its start."), False
    if here:
        problem += (f" The deepspeed launcher starts ranks on each of its active hosts (pdsh / mpirun / srun, in this "
                    f"folder), and `{here}` is this machine: its ranks would fail here.")
    return problem, bool(problem)


def find_entry(argv: Sequence[str], env: Mapping[str, str]) -> Entry | None:
    """The entry point of a python / torchrun / deepspeed command (after `VAR=value` words), None for any other
    launch, one llmperf cannot read, or `python -c` / `python -`."""
    from llmperf_hook.launch.parse import _is_python, leading_assignments, parse_launch

    assigned, words = leading_assignments(argv)
    job_env = {**env, **assigned}
    if not words or not (_is_python(words[0]) or os.path.basename(words[0]) in ("torchrun", "deepspeed")):
        return None
    try:
        job = parse_launch(list(words), dict(job_env))
    except (LlmperfError, OSError, ValueError):
        return None  # predict says what it cannot read
    module = job.script.startswith("-m ")
    target = job.script[3:] if module else job.script
    at = _entry_index(words, target, job.script_args)
    if job.launcher not in CHECKED_LAUNCHERS or at is None or target in ("", "-") or _set_by_env(job_env):
        return None
    if _is_python(words[0]) and job.launcher == "python" and _runs_code(words[:at + 1]):
        return None
    return Entry(target, module, _interpreter(words, job_env), " ".join(words[:at + 1]) + (" ..." if job.script_args
                 else ""), job_env, program=_without_python(words[1:at]),
                 deepspeed_words=tuple(words[:at]) if job.launcher == "deepspeed" else ())


def _active_host_here(launcher_words: Sequence[str], env: Mapping[str, str]) -> str | None:
    """None unless deepspeed/launcher/runner.py main's multi_node_exec (launch/deepspeed_launcher.multi_node_exec):
    one host, or --no_ssh, and deepspeed.launcher.launch starts the entry here. Otherwise a multi-node runner (pdsh,
    mpirun, srun: multinode_runner.py) starts it on each active host, `cd <this folder>` first: the active host that
    is this machine (local_host.this_host_among: localhost, the runner's pool without a hostfile, this host's name or
    another name or address of it), whose ranks fail here, or "" when none is."""
    from llmperf_hook.commands.local_host import this_host_among
    from llmperf_hook.launch.deepspeed_launcher import (DEEPSPEED_GRAMMAR, DEEPSPEED_OPTIONS, active_hosts,
                                                        multi_node_exec)
    from llmperf_hook.launch.options import scan_options

    start = next((k + 1 for k, word in enumerate(launcher_words)
                  if os.path.basename(word) == "deepspeed" or word.endswith("deepspeed.launcher.runner")), None)
    if start is None:
        return None
    try:
        opts = scan_options(launcher_words, start, DEEPSPEED_OPTIONS, "deepspeed", DEEPSPEED_GRAMMAR)
        hosts = active_hosts(opts.values, opts.flags, env)
    except (LlmperfError, ValueError):
        return None
    return this_host_among(hosts) if multi_node_exec(opts.values, len(hosts)) else None


def _entry_index(words: Sequence[str], target: str, script_args: Sequence[str]) -> int | None:
    """Where the entry point stands in the command: the word before its arguments."""
    for at in range(len(words) - len(script_args) - 1, 0, -1):
        if words[at] == target and tuple(words[at + 1:]) == tuple(script_args):
            return at
    return None


def _without_python(launcher_words: Sequence[str]) -> bool:
    """torchrun / deepspeed `--no-python` (`--no_python`; argparse takes a prefix) runs the entry as a program
    (run.py `cmd = args.training_script`; deepspeed/launcher/launch.py likewise)."""
    return any(w.startswith(("--no-p", "--no_p")) for w in launcher_words)


def _set_by_env(env: Mapping[str, str]) -> bool:
    """torchrun's PET_NO_PYTHON / PET_MODULE stand in for its options (torch/distributed/argparse_util.py check_env):
    what the entry is then is not read here."""
    return bool(env.get("PET_NO_PYTHON")) or bool(env.get("PET_MODULE"))


def _runs_code(words: Sequence[str]) -> bool:
    """`python -c CMD` (`-cCMD`, `-Ic CMD`): the 'script' is code, not a file."""
    for word in words[1:]:
        if word.startswith("-") and not word.startswith("--"):
            letter = next((c for c in word[1:] if c in "cmWX"), "")
            if letter == "c":
                return True
    return False


def _interpreter(words: Sequence[str], env: Mapping[str, str]) -> str | None:
    """The python that opens the entry: the command's own python, torchrun's PYTHON_EXEC, else the launcher's #!."""
    program = shutil.which(words[0], path=env.get("PATH"))
    if program is None:
        return None
    if os.path.basename(words[0]) == "torchrun" and env.get("PYTHON_EXEC"):
        return env["PYTHON_EXEC"]
    if os.path.basename(words[0]) in ("torchrun", "deepspeed"):
        try:
            with open(program, "rb") as launcher:
                first = launcher.readline(512).decode(errors="replace")
        except OSError:
            return None
        shebang = first[2:].strip().split() if first.startswith("#!") else []
        return shebang[0] if len(shebang) == 1 else None  # `#!/usr/bin/env python3` and sh-wrappers: unknown
    return program


def _script_problem(target: str, cwd: Path) -> str:
    """CPython's message for a script it cannot open (a directory needs a __main__.py), "" when it can."""
    path = Path(target) if os.path.isabs(target) else cwd / target
    shown = os.path.abspath(path)
    try:
        if path.is_dir():
            return "" if any((path / f"__main__{ext}").is_file() for ext in (".py", ".pyc")) else \
                f"can't find '__main__' module in '{shown}'"
        if not path.exists():
            return f"can't open file '{shown}': [Errno 2] No such file or directory"
    except OSError as err:  # ENAMETOOLONG, EACCES on a folder above it (pathlib ignores ENOENT and ENOTDIR only)
        return f"can't open file '{shown}': [Errno {err.errno}] {err.strerror}"
    if not os.access(path, os.R_OK):
        return f"can't open file '{shown}': [Errno 13] Permission denied"
    return ""


def _program_problem(entry: Entry, cwd: Path) -> str:
    """What the launcher's Popen of a program would fail with ('No such file or directory', not executable)."""
    if os.sep not in entry.target:
        found = shutil.which(entry.target, path=entry.env.get("PATH"))
        return "" if found else f"no such program {entry.target!r} on PATH"
    path = Path(entry.target) if os.path.isabs(entry.target) else cwd / entry.target
    try:
        if not path.is_file():
            return f"no such file {os.path.abspath(path)!r}"
    except OSError as err:  # as in _script_problem
        return f"{os.path.abspath(path)!r}: {err.strerror}"
    return "" if os.access(path, os.X_OK) else f"{os.path.abspath(path)!r} is not executable (chmod +x it)"


def _module_problem(entry: Entry, cwd: Path) -> str:
    """CPython's `-m` message for a module this interpreter would not find, "" when found or not knowable here."""
    if entry.interpreter is None or not _is_this_python(entry.interpreter):
        return ""
    from importlib.machinery import PathFinder
    from importlib.util import find_spec

    # `python -m`: the working directory first, then PYTHONPATH (its relative entries are the job's directory's), then
    # this interpreter's path, searched as one: a plain folder (a namespace portion) in the job's directory does not
    # hide a regular package further on (importlib _bootstrap_external PathFinder._get_spec). find_spec adds the
    # meta-path finders (editable installs); the module is refused only when neither way finds it.
    path = [str(cwd), *(str(cwd / p) for p in entry.env.get("PYTHONPATH", "").split(os.pathsep) if p), *sys.path]
    top = entry.target.split(".")[0]
    try:
        said = [_walk_module(spec, entry.target) for spec in (PathFinder.find_spec(top, path), find_spec(top))]
    except (ImportError, ValueError):
        return ""
    return "" if "" in said else said[0]


def _walk_module(spec: ModuleSpec | None, target: str) -> str:
    """CPython's message for `target` (then its __main__) from the top package's spec, "" when every step is found."""
    from importlib.machinery import PathFinder

    parts = target.split(".")
    for depth, part in enumerate([*parts[1:], "__main__"], start=1):
        if spec is None:
            missing = ".".join(parts[:depth])
            return (f"No module named {missing}" if depth > 1 or len(parts) == 1 else
                    f"Error while finding module specification for '{target}' (ModuleNotFoundError: No module "
                    f"named '{missing}')")
        locations = spec.submodule_search_locations
        if locations is None:
            return "" if part == "__main__" else \
                f"No module named {'.'.join(parts[:depth + 1])}; '{'.'.join(parts[:depth])}' is not a package"
        if _extends_its_path(spec.origin):
            return ""
        spec = PathFinder.find_spec(f"{'.'.join(parts[:depth])}.{part}", list(locations))
    if spec is None:
        return f"No module named {target}.__main__; '{target}' is a package and cannot be directly executed"
    return ""


def _extends_its_path(init_file: str | None) -> bool:
    """A package whose __init__ changes its __path__ (pkgutil.extend_path, a plugin loader): what it holds is known
    only by importing it."""
    try:
        return init_file is not None and "__path__" in Path(init_file).read_text(errors="replace")
    except OSError:
        return True


def _is_this_python(interpreter: str) -> bool:
    """The job's python is the one running llmperf: the same file in the same folder (a venv's bin/python is a link to
    the base python, whose sys.path is another)."""
    mine = Path(sys.executable)
    theirs = Path(interpreter)
    try:
        return theirs.parent.resolve() == mine.parent.resolve() and theirs.resolve() == mine.resolve()
    except OSError:
        return False


def check_run_dir_writable(run_dir: str) -> None:
    """--run-dir where this user cannot make a folder (a read-only mount, /proc, a pseudo file system where root
    passes os.access) is refused before the prediction: a probe folder is made in the nearest existing folder of
    the path and removed at once (os.access says yes to root on /proc, where mkdir fails with ENOENT)."""
    path = Path(run_dir).expanduser()
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is None or not existing.is_dir():
        return  # run._check_run_dir refuses a file among its parents
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".llmperf-probe-", dir=existing))
    except OSError as err:
        raise UsageError(f"--run-dir {run_dir!r}: a folder cannot be made in {str(existing)!r} ({err.strerror or err}), "
                         "so the run's records cannot go there. Pass a writable folder (it is created if "
                         "missing).") from err
