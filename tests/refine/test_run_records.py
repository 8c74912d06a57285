"""run_records.summarize_job on record streams the hook really writes."""

from __future__ import annotations

from llmperf_hook.refine.run_records import summarize_job


def _step(step: int, framework: str, wall: float | None, warmup: bool) -> dict:
    return {"kind": "step", "job_id": "j", "rank": 0, "world_size": 1, "framework": framework, "step": step,
            "wall_time_s": wall, "warmup": warmup, "profiled": False, "device": "cuda"}


def test_framework_is_the_owner_of_the_steps_not_of_the_first_record() -> None:
    """DeepSpeed's bf16 optimizer (ZeRO-0) runs one torch optimizer step inside initialize: the hook's torch
    fallback writes the meta record then, and DeepSpeed's engine owns every later step (as on the H100 runs
    c03/c04 of measurements/h100-sxm5-80gb-2026-11-26)."""
    records = [{"kind": "meta", "job_id": "j", "rank": 0, "world_size": 1, "framework": "torch"},
               _step(0, "deepspeed", None, True), _step(1, "deepspeed", 3.1, True),
               _step(2, "deepspeed", 0.18, False), _step(3, "deepspeed", 0.17, False)]
    job = summarize_job(records, "j")
    assert job.framework == "deepspeed"
    assert job.step_time_s == 0.175 and job.num_timed_steps == 2
