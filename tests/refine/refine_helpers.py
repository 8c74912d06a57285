"""Helpers of the refine tests: hand-written run directories."""

from __future__ import annotations

import json
from pathlib import Path

CONFIG = {"framework": "deepspeed", "world_size": 2, "num_layers": 2, "hidden_size": 64, "seq_length": 128,
          "micro_batch_size": 2, "global_batch_size": 4, "zero_stage": 1, "precision": "fp32"}
"""The part of the explain JSON that makes a configuration (refine/config_fingerprint.py)."""
PREDICTION = {"schema": 1, "step_time_s": 0.010, "cluster": {"name": "local-cpu", "gpu": "cpu-test"},
              "config": CONFIG}


def write_run(run: Path, job_id: str, rank_times: dict[int, list[float]], warmup: int = 1,
              prediction: dict | None = PREDICTION, extra: str = "") -> Path:
    run.mkdir(parents=True, exist_ok=True)
    for rank, step_times in rank_times.items():
        lines = [{"kind": "meta", "job_id": job_id, "rank": rank, "world_size": len(rank_times),
                  "framework": "deepspeed", "load_avg_1m": 0.5}]
        lines += [{"kind": "step", "job_id": job_id, "rank": rank, "world_size": len(rank_times), "step": i,
                   "wall_time_s": t, "warmup": i < warmup, "profiled": False, "framework": "deepspeed",
                   "device": "cpu", "peak_rss_bytes": 1000 + i} for i, t in enumerate(step_times)]
        with open(run / f"rank{rank}.jsonl", "a") as f:
            f.write("".join(json.dumps(x) + "\n" for x in lines) + extra)
    if prediction is not None:
        (run / "prediction.json").write_text(json.dumps(prediction))
    return run
