"""benchmarks/bench_public_runs.py's split of the predicted step into parts (compute, in-layer communication,
bubble, send/recv, data-parallel sync, optimizer, host) beside each source's bias."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.validate.runs_csv import build_measured_runs, read_runs_csv
from script_module import load_script

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_CSV = ROOT / "benchmarks" / "data" / "public_runs.csv"


def _bench():  # type: ignore[no-untyped-def]
    return load_script(ROOT / "benchmarks" / "bench_public_runs.py")


def test_every_breakdown_key_of_compose_lands_in_its_part() -> None:
    bench = _bench()
    breakdown = {"compute": 6.0, "recompute": 2.0, "comm_tp": 1.0, "comm_cp": 0.5, "pipeline_bubble": 1.5,
                 "pipeline_p2p": 0.25, "comm_pp_gather": 0.25, "comm_dp_grad": 0.5, "comm_param_gather": 0.25,
                 "comm_embedding_grad": 0.25, "optimizer": 1.0, "host_overhead": 0.25, "host_zero3_hooks": 0.125,
                 "host_optimizer_step": 0.125, "calibration": 6.0}
    shares = bench.part_shares(breakdown)
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares["compute"] == pytest.approx(8 / 20) and shares["in-layer comm"] == pytest.approx(1.5 / 20)
    assert shares["bubble"] == pytest.approx(1.5 / 20) and shares["p2p"] == pytest.approx(0.5 / 20)
    assert shares["dp sync"] == pytest.approx(1.0 / 20) and shares["optimizer"] == pytest.approx(1.0 / 20)
    assert shares["host"] == pytest.approx(0.5 / 20) and shares["other"] == pytest.approx(6.0 / 20)


def test_parts_table_gives_each_source_its_bias_and_the_compute_factor_that_would_close_it(capsys) -> None:
    bench = _bench()
    runs = {r.row_id: r for r in build_measured_runs(read_runs_csv(PUBLIC_CSV)) if r.source_id in ("P05", "P01")}
    # every P05 row predicted 20 % fast with 80 % of its step in compute; P01 rows have no breakdown (a failed line)
    errors = {row_id: -0.2 for row_id in runs}
    batch = {row_id: {"breakdown": {"compute": 8.0, "comm_tp": 2.0}} for row_id, r in runs.items()
             if r.source_id == "P05"}
    bench.print_parts(runs, errors, batch)
    lines = {line.split()[1]: line.split() for line in capsys.readouterr().out.splitlines()
             if line.startswith("  A100") or line.startswith("  H100")}
    assert "P01" not in lines
    p05 = lines["P05"]
    assert p05[2] == str(len(batch)) and p05[3] == "-20.0%" and p05[4] == "80.0%" and p05[5] == "20.0%"
    # predicted = 0.8 measured: compute must grow by (1 / 0.8 - 1) / 0.8 = 31.25 %
    assert float(p05[-1]) == pytest.approx(1.3125, abs=0.005)
