"""What reading a launch script finds (launch/batch_script.py): each launch, submission or single run it reaches, and
the one it launches, with the files it writes before it and what llmperf assumed to read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from llmperf_hook.launch.parsed_job import ScriptFile


@dataclass(frozen=True)
class ScriptRun:
    """A launch line, `sbatch` submission or single `python` run the script reaches."""

    where: str
    """The file and line it is on (`job.sh line 12`; a sourced file's own name and line)."""
    words: list[str]
    env: dict[str, str]
    """The variables where it runs, for normalise_argv: reading goes on past a submission or single run, and a later
    `N=4` (`N=2; sbatch -N "$N" job.sh; N=4`) does not reach it."""
    refs: dict[str, str]
    """The variables its unquoted words were split from (counted as used when it is the launch)."""
    exported: frozenset[str]
    """The names of `env` that are exported there: the rest are not in the environment of the command it starts."""
    stdin: str | None = None
    """The text of the here-document it is given as standard input (`sbatch <<EOF`), None when it has none."""
    sweep: tuple[str, tuple[str, ...]] | None = None
    """The `for` loop it runs in (its variable and words, shell_loops), None outside one."""
    background: bool = False
    """It runs in the background (`... &`): a loop starts every pass at once (shell_loops.in_background)."""


@dataclass(frozen=True)
class ScriptLaunch:
    """What read_batch_script found: the launch line and what it runs with."""

    words: list[str]
    """The launch line's words (its variables expanded by normalise_argv with the script's variables)."""
    files: dict[str, ScriptFile]
    """The files the script writes before it (here-documents, or commands llmperf does not run)."""
    stdin: str | None
    """The here-document the launch line reads as its standard input (`sbatch <<EOF` ... `EOF`), else None."""
    hidden: frozenset[str]
    """Variables the script sets without exporting them: bash expands them in the launch line's words but does not
    pass them to the command it starts (bash manual 3.7.4 Environment)."""
    warnings: tuple[str, ...] = ()
    """What llmperf assumed to read the script (the node count of an sbatch `--nodes=MIN-MAX`)."""
    undecided: tuple[str, ...] = ()
    """Where the script ran a command on a condition llmperf could not decide (`line 12`): the launch line's words
    may hold what both branches give, which bash never does."""
    undecided_options: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """For each of `undecided`, the options of the launch it may have set (launch/undecided_options.py)."""
    unknown: Mapping[str, str] = field(default_factory=dict)
    """The variables the launch line leaves unexpanded because the script sets them so that only running it tells
    their value, each with where (ParsedJob.unknown_values)."""
    missing_arguments: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """The script's arguments its lines read that it was not given (`$1 at line 15`), each with the options whose value
    it gives (ParsedJob.missing_arguments)."""
