"""benchmarks/testbed_op_breakdown.py prices the ranks' wait for the slowest (predict/rank_jitter.py) as the prediction
does, and sets the slowest rank's CPU against the prediction with it, the ranks' mean against the one without."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import testbed_op_breakdown as breakdown  # noqa: E402

TERMS_MS = {"operators": 30.0, "issue": 2.0, "engine_microbatches": 2.0, "adam": 1.0, "engine": 8.0,
            "transport": 3.0, "comm": 4.0, "jitter": 2.3}


def test_jitter_is_apart_from_the_forward_backward_and_the_mean() -> None:
    runs = [{"cpu_s": 0.063, "measured_s": 0.07,
             "rank_steps": {"0": [[1, 0.07, 0.058, False]], "1": [[1, 0.07, 0.062, False]]}}]
    row = breakdown.against_runs(TERMS_MS, runs)
    assert row["predicted"] == pytest.approx(52.3) and row["jitter"] == 2.3 and row["step_terms"] == 12.0
    assert row["fwd_bwd"] == pytest.approx(34.0)  # ZeRO-2/3's engine work per further micro-batch is in it
    assert row["cpu_per_non_comm"] == pytest.approx(63.0 / 48.3)  # slowest rank vs E[max]
    assert row["rank_mean_per_non_comm"] == pytest.approx(60.0 / 46.0)  # ranks' mean vs one rank's mean
    assert row["fwd_bwd_if_step_right"] == pytest.approx((60.0 - 12.0) / 34.0)


def test_the_breakdown_passes_the_jobs_synchronised_ranks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2-rank configuration's rows carry "jitter" where the home's framework file measured the ranks' spread."""
    import json

    from llmperf_hook.predict.cpu_framework import FILE_NAME

    home = tmp_path / "home"
    d = home / "profiles" / breakdown.CLUSTER
    d.mkdir(parents=True)
    (d / "profile.json").write_text("{}")
    entry = {"per_unit_s": 2e-5, "compute_scale": 1.0, "optimizer_per_tensor_s": 5e-5, "optimizer_per_param_s": 4e-9,
             "rank_transport": {"per_byte_s": 1e-9, "step_jitter_cv": 0.08}}
    (d / FILE_NAME).write_text(json.dumps({"dtypes": {"fp32": entry}}))
    for kind, text in (("hardware", "peak_TFLOPs: {fp32: 0.075}\nmemory_bandwidth_GBps: 16\nmemory_capacity_GiB: 23\n"
                                    "device: cpu\n"),
                       ("clusters", f"gpu: {breakdown.CLUSTER}\ngpus_per_node: 2\nintra_node_bandwidth_GBps: 2\n"
                                    "inter_node_bandwidth_GBps: 1\nintra_node_latency_us: 50\n")):
        (home / kind).mkdir()
        (home / kind / f"{breakdown.CLUSTER}.yaml").write_text(f"name: {breakdown.CLUSTER}\n{text}")
    monkeypatch.setenv("LLMPERF_HOME", str(home))
    from llmperf_hook.predict import dispatch

    monkeypatch.setattr(dispatch, "predict_ops", lambda ops, *a, **k: ({dispatch.op_id(op): 1e-4 for op in ops}, {}))
    monkeypatch.setattr(dispatch, "find_operator_profile", lambda *a, **k: None)
    rows = list(breakdown.step_ops(breakdown.CONFIGS[8], tmp_path / "work"))
    assert any("jitter" in parts for _, _, parts in rows)
    assert all("jitter" not in parts for op, _, parts in rows if op.collective is not None)
