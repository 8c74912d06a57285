"""The generated sitecustomize chains to the user's even when another job's generated hook is on PYTHONPATH."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from instrument_helpers import read_records, run_session, steps_by_rank

from llmperf_hook.instrument.bootstrap import write_hook_dir
from llmperf_hook.instrument.config import HookConfig, write_hook_config

JOB = """
import os, sitecustomize, torch
model = torch.nn.Linear(2, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    model(torch.randn(1, 2)).sum().backward(); opt.step(); opt.zero_grad()
print("user sitecustomize:", sitecustomize.__file__, "job pid", os.getpid())
"""


def test_an_earlier_jobs_hook_on_pythonpath_neither_loops_nor_hides_the_users(tmp_path: Path,
                                                                              child_env: dict[str, str]) -> None:
    """A shell that kept an earlier instrumented job's PYTHONPATH (its hook folder first): the two generated
    sitecustomizes chained to each other until RecursionError ('Error in sitecustomize'), and the user's own
    never ran. Now the user's runs once, and this job records into its own run directory only."""
    old_hook = write_hook_dir(tmp_path / "old-run" / "jobs" / "old" / "hook")
    write_hook_config(HookConfig(run_dir=str(tmp_path / "old-run"), job_id="old", num_steps=2), old_hook)
    user = tmp_path / "user-site"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import os\nprint('user sitecustomize ran in', os.getpid(), flush=True)\n")
    (tmp_path / "job.py").write_text(JOB)
    env = {**child_env, "PYTHONPATH": os.pathsep.join([str(old_hook), str(user), child_env["PYTHONPATH"]])}
    done = run_session(tmp_path, env, [sys.executable, str(tmp_path / "job.py")], steps=2)
    assert done.returncode == 0, done.stderr[-2000:]
    job_pid = done.stdout.split("job pid ")[1].split()[0]  # (the session's own Python runs it too: same PYTHONPATH)
    assert done.stdout.count(f"user sitecustomize ran in {job_pid}\n") == 1
    assert f"user sitecustomize: {user / 'sitecustomize.py'}" in done.stdout
    assert "Error in sitecustomize" not in done.stderr and "RecursionError" not in done.stderr
    assert steps_by_rank(read_records(tmp_path / "run")) == {0: [0, 1]}
    assert not list((tmp_path / "old-run").glob("rank*.jsonl"))
