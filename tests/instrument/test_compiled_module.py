"""A job that calls a torch.compile'd module: the hook's first-forward hook (frameworks.patch_torch) is a global
module hook, and torch._dynamo's OptimizedModule.__call__ warns 'Using `torch.compile(module)` when there are global
hooks on modules ...' whenever one exists. Every such job got that warning in its stderr, about hooks it never
registered; the hook now ignores that one warning until its first-forward hook is gone, and nothing more."""

from __future__ import annotations

import sys
from pathlib import Path

from instrument_helpers import read_records, run_session, steps_by_rank

JOB = """
import warnings, torch
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU(), torch.nn.Linear(16, 16))
compiled = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(4):
    opt.zero_grad()
    compiled(torch.randn(4, 16)).sum().backward()
    opt.step()
left = [f for f in warnings.filters if f[1] is not None and "global hooks" in f[1].pattern]
print("filters left:", len(left), flush=True)
warnings.warn("the job's own warning")
"""


def test_a_compiled_module_gets_no_warning_about_the_hooks_global_hook(tmp_path: Path,
                                                                       child_env: dict[str, str]) -> None:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    done = run_session(tmp_path, child_env, [sys.executable, str(script)], steps=3)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "filters left: 0" in done.stdout  # the filter went with the first-forward hook
    assert "global hooks" not in done.stderr and "the job's own warning" in done.stderr, done.stderr
    assert steps_by_rank(read_records(tmp_path / "run")) == {0: [0, 1, 2]}
