"""A job started through `env` that sets (or clears) PYTHONPATH is still instrumented (instrument/env_command.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from instrument_helpers import SMALL_GPT, TRAIN_GPT, read_records, run_session, steps_by_rank

from llmperf_hook.instrument.env_command import keep_hook_in_env_command

HOOK = Path("/run/jobs/j/hook")


@pytest.mark.parametrize("argv, launched", [
    (["env", "PYTHONPATH=/opt/code", "python", "t.py"], ["env", "PYTHONPATH=/run/jobs/j/hook:/opt/code", "python", "t.py"]),
    (["env", "-i", "A=1", "python"], ["env", "-i", "A=1", "PYTHONPATH=/run/jobs/j/hook", "python"]),
    (["env", "-u", "PYTHONPATH", "python"], ["env", "-u", "PYTHONPATH", "PYTHONPATH=/run/jobs/j/hook", "python"]),
    (["/usr/bin/env", "--", "PYTHONPATH=", "env", "-iv", "python"],
     ["/usr/bin/env", "--", "PYTHONPATH=/run/jobs/j/hook", "env", "-iv", "PYTHONPATH=/run/jobs/j/hook", "python"]),
    (["env", "-C", "/tmp", "A=1", "python", "PYTHONPATH=/x"], ["env", "-C", "/tmp", "A=1", "python", "PYTHONPATH=/x"]),
    (["env", "A=1", "-i", "python"], ["env", "A=1", "-i", "python"]),  # after NAME=VALUE, -i is the program
    (["python", "-c", "1"], ["python", "-c", "1"]),
    # option clusters read as getopt does: a valued letter takes the cluster's rest, else the next word
    (["env", "-iC", "/tmp", "python"], ["env", "-iC", "/tmp", "PYTHONPATH=/run/jobs/j/hook", "python"]),
    (["env", "-vu", "PYTHONPATH", "python"], ["env", "-vu", "PYTHONPATH", "PYTHONPATH=/run/jobs/j/hook", "python"]),
    (["env", "-uPYTHONPATH", "python"], ["env", "-uPYTHONPATH", "PYTHONPATH=/run/jobs/j/hook", "python"]),
    (["env", "-ui", "python"], ["env", "-ui", "python"]),  # unsets a variable named i
    (["env", "--unset=PYTHONPATH", "-", "python"],
     ["env", "--unset=PYTHONPATH", "-", "PYTHONPATH=/run/jobs/j/hook", "python"]),
    (["env", "--chdir", "/x", "--unset", "HOME", "python"], ["env", "--chdir", "/x", "--unset", "HOME", "python"]),
])
def test_env_words_rewritten_only_where_env_sets_or_drops_python_path(argv: list[str], launched: list[str]) -> None:
    assert keep_hook_in_env_command(argv, HOOK) == launched


def test_env_pythonpath_job_is_recorded_and_keeps_its_own_path(tmp_path: Path, child_env: dict[str, str]) -> None:
    """Before, `env PYTHONPATH=... python train.py` ran without the hook: exit 0 and no record at all."""
    own = tmp_path / "own_lib"
    own.mkdir()
    (own / "own_module.py").write_text("VALUE = 42\n")
    repo = str(TRAIN_GPT.parents[2])
    script = tmp_path / "train.py"
    script.write_text("import runpy, sys, own_module\nprint('own', own_module.VALUE)\n"
                      f"sys.argv = [{str(TRAIN_GPT)!r}] + sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')\n")
    argv = ["env", f"PYTHONPATH={own}:{repo}", sys.executable, str(script), *SMALL_GPT, "--train-iters", "3"]
    done = run_session(tmp_path, child_env, argv, steps=3)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "own 42" in done.stdout and "done: 3 steps" in done.stdout
    assert steps_by_rank(read_records(tmp_path / "run")) == {0: [0, 1, 2]}
    session = json.loads((tmp_path / "run" / "session.json").read_text())
    assert session["argv"] == argv  # the user's command is recorded as given
