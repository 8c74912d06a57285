"""What the in-job hook is asked to record: written by the session next to the generated sitecustomize.

The session (`llmperf run --instrument N`) writes `<run_dir>/hook/llmperf_hook_config.json`; the generated
`sitecustomize.py` in the same folder reads it in every Python process of the job. Keeping the settings in a
file next to the hook (instead of in environment variables) means PYTHONPATH is the only variable a launcher
has to forward: DeepSpeed's multi-node runners export only PYTHON*-prefixed variables and `.deepspeed_env`
(deepspeed/launcher/runner.py, EXPORT_ENVS), and every launcher keeps PYTHONPATH.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

CONFIG_FILE_NAME = "llmperf_hook_config.json"
SCHEMA = 1
FAULT_POINTS = ("step_begin", "step_end", "profiler")


@dataclass(frozen=True)
class HookConfig:
    """Settings of one instrumented job, identical in every rank."""

    run_dir: str
    """Absolute path of the run directory; ranks write `rank<R>.jsonl` there."""
    job_id: str
    """Identifies this job among several writing to the same run directory (`<UTC time>-<session pid>`)."""
    num_steps: int
    """Optimizer steps to time (the first N of the job); after them the hook removes itself."""
    num_warmup_steps: int = 1
    """Leading steps marked `warmup: true` (allocator, autotuning and lazy init make them slow)."""
    profile_ops_steps: int = 0
    """Steps under torch.profiler, placed right after the N timed steps so they never skew the timings."""
    stop_after_steps: int | None = None
    """Exit the job cleanly (code 0) after this many optimizer steps (calibration runs); None = run on."""
    package_root: str = ""
    """Folder that holds the `llmperf_hook` package, appended to sys.path when the job's Python lacks it."""
    reference_speed: bool = True
    """On a CPU job, time the reference workload once per rank after the last recorded step (instrument/
    reference_speed.py: the machine's speed around the run, in the `end` or `stop` record and the store); never
    inside a step, never in the job's first iteration."""
    inject_fault_at_step: int | None = None
    """Tests only: raise inside the hook at this step to prove the job survives a failing hook."""
    inject_fault_point: str = "step_end"
    """Tests only: where inject_fault_at_step raises (FAULT_POINTS): when the step's start is marked (step 0 only: a
    later step starts where the previous one ended), when its end is recorded, or when the profiler window opens
    after it (the step after the num_steps timed ones)."""

    def __post_init__(self) -> None:
        assert self.num_steps >= 1 and self.num_warmup_steps >= 0 and self.profile_ops_steps >= 0, self
        assert self.stop_after_steps is None or self.stop_after_steps >= 1, self
        assert self.inject_fault_point in FAULT_POINTS, self
        # a fault point its step never reaches would never fire: the test injecting it could not fail
        assert self.inject_fault_at_step in (None, 0) or self.inject_fault_point != "step_begin", self
        assert self.inject_fault_at_step is None or self.inject_fault_point != "profiler" or (
            self.inject_fault_at_step == self.num_steps and self.profile_ops_steps > 0), self

    @property
    def last_hooked_step(self) -> int:
        """Index after which the hook has nothing left to do (timed steps, then the profiler window)."""
        return self.num_steps + self.profile_ops_steps


def write_hook_config(config: HookConfig, hook_dir: Path) -> Path:
    path = hook_dir / CONFIG_FILE_NAME
    path.write_text(json.dumps({"schema": SCHEMA, **asdict(config)}, indent=1) + "\n")
    return path


def parse_hook_config(raw: dict) -> HookConfig:
    known = {f.name for f in fields(HookConfig)}
    return HookConfig(**{k: v for k, v in raw.items() if k in known})


def read_hook_config(hook_dir: Path) -> HookConfig:
    return parse_hook_config(json.loads((hook_dir / CONFIG_FILE_NAME).read_text()))
