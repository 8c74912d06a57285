"""benchmarks/testbed_jitter.py: a testbed record's rank jitter from its 2-rank runs' per-step CPU, beside the
profile's (predict/rank_jitter.py)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from testbed_jitter import jitter_lines, record_step_pairs  # noqa: E402


def _record() -> dict:
    steps = lambda cpus: [[i, c * 1.1, c, i == 0] for i, c in enumerate(cpus)]  # noqa: E731
    return {"configs": [{"index": 0, "label": "L2 h128 s128 mbs2 z0 1r fp32"},
                        {"index": 1, "label": "L2 h128 s128 mbs2 z1 2r fp32"}],
            "runs": [{"config": 0, "rank_steps": {"0": steps([0.05, 0.05])}},
                     {"config": 1, "rank_steps": {"0": steps([0.9, 0.10, 0.12]), "1": steps([0.1, 0.12, 0.10])}}]}


def test_the_pairs_are_the_timed_steps_of_two_rank_runs_and_the_line_names_both_sides(tmp_path: Path) -> None:
    assert record_step_pairs(_record()) == {"fp32": [(0.10, 0.12), (0.12, 0.10)]}  # warm-up and 1-rank runs out
    cv = math.sqrt(math.pi) / 2 * (0.02 / 0.11)
    (line,) = jitter_lines(_record(), tmp_path)
    assert f"cv {cv:.3f} over 2 step pairs" in line and "the profile has none (priced x1)" in line
    d = tmp_path / "profiles" / "cpu-testbed"
    d.mkdir(parents=True)
    (d / "framework_overhead.json").write_text(json.dumps({"dtypes": {"fp32": {"rank_transport": {
        "per_byte_s": 1e-9, "step_jitter_cv": 0.08}}}}))
    (line,) = jitter_lines(_record(), tmp_path)
    assert f"the profile's 0.080 (x{1 + 0.08 / math.sqrt(math.pi):.3f})" in line
