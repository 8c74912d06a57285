"""The ranks' step-to-step jitter of a testbed record against the profile's (predict/rank_jitter.py).

A synchronised 2-rank step costs E[max of the two ranks] = mean x (1 + cv / sqrt(pi)); the profile's cv is read by
the framework-cost reading's rank pair (rank_transport.step_jitter_cv). A record's 2-rank runs keep each rank's
per-step CPU time (`rank_steps`: [step, wall, cpu, warm-up]), so the same estimate is read from them: one line per
dtype, the record's cv and the profile's, and what each makes of a step (x1 + cv e_2). No torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

from llmperf_hook.predict.cpu_framework import FILE_NAME
from llmperf_hook.predict.rank_jitter import jitter_cv, straggler_factor
from testbed_configs import CLUSTER


def record_step_pairs(record: Mapping) -> dict[str, list[tuple[float, float]]]:
    """{dtype: [(rank 0's CPU s, rank 1's) of one timed step]} over the record's 2-rank runs."""
    dtypes = {c["index"]: c["label"].split()[-1] for c in record["configs"]}
    pairs: dict[str, list[tuple[float, float]]] = {}
    for run in record["runs"]:
        ranks = run.get("rank_steps") or {}
        if len(ranks) != 2:
            continue
        a, b = ({s[0]: s[2] for s in ranks[r] if not s[3] and s[2]} for r in ("0", "1"))
        pairs.setdefault(dtypes[run["config"]], []).extend((a[s], b[s]) for s in sorted(a) if s in b)
    return pairs


def profile_cv(home: Path, dtype: str) -> float | None:
    """The testbed profile's measured cv for `dtype`, or None (not measured)."""
    path = home / "profiles" / CLUSTER / FILE_NAME
    try:
        entry = json.loads(path.read_text())["dtypes"][dtype]
    except (OSError, ValueError, KeyError):
        return None
    return (entry.get("rank_transport") or {}).get("step_jitter_cv")


def jitter_lines(record: Mapping, home: Path) -> list[str]:
    """One line per dtype of the record's 2-rank runs (module docstring)."""
    lines = []
    for dtype, pairs in sorted(record_step_pairs(record).items()):
        cv, theirs = jitter_cv(pairs), profile_cv(home, dtype)
        if cv is None:
            continue
        priced = (f"the profile's {theirs:.3f} (x{straggler_factor(theirs, 2):.3f})" if theirs is not None
                  else "the profile has none (priced x1)")
        lines.append(f"rank jitter {dtype}: the record's 2-rank runs cv {cv:.3f} over {len(pairs)} step pairs "
                     f"(E[max of 2] x{straggler_factor(cv, 2):.3f} of a rank's mean step), {priced}")
    return lines
