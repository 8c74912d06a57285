"""Run the real `llmperf` entry point (cli.main: the error handling and exit codes a user gets) in-process."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from llmperf_hook.cli import main


@dataclass(frozen=True)
class Outcome:
    """What `llmperf ARGS` gave."""

    code: int
    """Its exit status."""
    out: str
    """Its standard output."""
    err: str
    """Its standard error."""


def llmperf(capsys: pytest.CaptureFixture[str], *args: str) -> Outcome:
    """`llmperf ARGS` as a user runs it (errors become one line on stderr and exit 2 / 3, never a traceback)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        main(list(args))
    captured = capsys.readouterr()
    return Outcome(int(done.value.code or 0), captured.out, captured.err)
