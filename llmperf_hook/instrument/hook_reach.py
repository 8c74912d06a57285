"""Did the hook reach the job? What the session says when a job ended without a single step record.

A job can end with no record for two different reasons, and the fixes differ:
- no Python process of the job ever loaded the hook: its processes did not get the hook's PYTHONPATH (a script
  that sets PYTHONPATH without keeping the one it was given, `python -I/-E/-S`, a container or remote launcher
  that does not pass the environment on, a run directory the other nodes cannot see);
- the hook loaded, but no optimizer step it knows ended (the job failed or stopped first, or steps in a way the
  hook does not patch).
The generated sitecustomize (bootstrap.py) creates the empty file `hook/loaded` in the first process where the
hook installed (one stat per later process), which tells the two apart.
"""

from __future__ import annotations

import json
from pathlib import Path

LOADED_MARKER = "loaded"
"""Created in the job's hook folder by the first process that installed the hook."""


def job_has_record(run_dir: Path, job_id: str, kind: str) -> bool:
    """Whether a rank of job `job_id` wrote a record of `kind` ("step", "stop", ...) in `run_dir`."""
    needle = f'"{kind}"'
    for path in run_dir.glob("rank*.jsonl"):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                # parsed only where both occur (session ids are ASCII, written unescaped): a shared run directory
                # holds every other job's steps too
                if any(needle in line and job_id in line and _is_record_of(line, job_id, kind) for line in f):
                    return True
        except OSError:
            continue
    return False


def _is_record_of(line: str, job_id: str, kind: str) -> bool:
    try:
        record = json.loads(line)
    except ValueError:
        return False
    return isinstance(record, dict) and record.get("kind") == kind and record.get("job_id") == job_id


def no_step_hint(hook_dir: Path) -> str:
    """Why a job that ended recorded no step, from whether any of its processes loaded the hook."""
    if (hook_dir / LOADED_MARKER).exists():
        return ("the hook was loaded by the job's Python processes (by one at least: a Python launcher counts), "
                "but no optimizer step it times ended (DeepSpeed "
                "engine.step / train_batch, Megatron-LM train_step, a megatron-core optimizer's or a torch.optim "
                "optimizer's step): the job ended or failed first, or steps some other way.")
    return (f"no Python process of the job loaded the hook ({hook_dir / LOADED_MARKER} was never created): its "
            f"processes did not get the hook's folder on PYTHONPATH. A script that sets PYTHONPATH must keep the "
            f"one it was given (export PYTHONPATH=/your/path:$PYTHONPATH); python -I, -E or -S skip it; a container "
            f"or remote launcher must pass PYTHONPATH on, and other nodes must see the run directory.")
