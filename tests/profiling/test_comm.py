"""Collective models: the 2-process gloo sampler end to end, the public-data fit and its corruption rules."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from llmperf_hook.errors import ProfileError
from llmperf_hook.graph.op import Collective, Op
from llmperf_hook.predict.fitted import find_comm_model
from llmperf_hook.profile.comm_fit import CommSamples, fit_comm_model, fit_layout
from llmperf_hook.profile.comm_model import CommModel, read_comm_model, ring_factor, write_comm_model


def test_two_process_gloo_comm_sampler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    env = {**os.environ, "LLMPERF_HOME": str(tmp_path), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "29631",
           "-m", "llmperf_hook", "profile", "--comm", "--cluster-name", "ci-gloo", "--max-bytes", "262144"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "comm model" in out.stdout
    assert f"store      {tmp_path / 'store.sqlite'}  (the timings)" in out.stdout  # where they went, said
    # the fitted alpha-beta of each layout is said, as the user checks it
    assert re.search(r"note: allreduce 1x2: latency \d+ us, bus bandwidth [\d.e+-]+ GB/s, within \d+% of its \d+ "
                     r"timings", out.stdout), out.stdout
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    comm = find_comm_model("ci-gloo")
    assert comm is not None and comm.supports("allreduce", "step", "fp32") and comm.supports("p2p", "fwd", "fp32")
    ops = [Op(f"ar{b}", "allreduce", "step", {"bytes": b}, collective=Collective("dp", 2, 2)) for b in (4096, 262144)]
    t = comm.predict_s(ops, None)
    assert 0 < t[0] < t[1] < 1.0
    from llmperf_hook.store import open_store

    with open_store() as store:
        assert {r.collective for r in store.query_comm_samples("ci-gloo")} >= {"allreduce", "allgather", "p2p"}


def test_alpha_beta_fit_recovers_parameters_and_drops_impossible_rows() -> None:
    rng = np.random.default_rng(0)
    nbytes = np.geomspace(1e6, 1e9, 300)
    busbw, alpha = 40e9, 50e-6
    t = (alpha + ring_factor("allgather", 8) * nbytes / busbw) * np.exp(rng.normal(0, 0.01, nbytes.size))
    t[::10] = 117e-6  # the Vista failure mode: ~117 us regardless of size
    fit = fit_layout(CommSamples("allgather", 8, 1, nbytes, t))
    assert fit.busbw_bytes_per_s == pytest.approx(busbw, rel=0.05)
    assert fit.dropped_outliers >= 20
    pred = fit.predict_s(np.array([5e8]), 8, "allgather")[0]
    assert pred == pytest.approx(alpha + 7 / 8 * 5e8 / busbw, rel=0.03)


def test_mostly_corrupt_layout_is_not_kept() -> None:
    nbytes = np.geomspace(1e8, 1e9, 50)
    t = np.full(50, 117e-6)
    t[:5] = nbytes[:5] / 20e9
    model = fit_comm_model("x", [CommSamples("allgather", 8, 1, nbytes, t)], {})
    assert model.layouts == () and "corrupt" in model.provenance["rejected_layouts"]


def test_unsampled_layout_uses_nearest_of_same_tier_with_its_own_ring_factor() -> None:
    fit = fit_layout(CommSamples("allreduce", 2, 1, np.geomspace(1e6, 1e9, 100), np.geomspace(1e6, 1e9, 100) / 10e9))
    from llmperf_hook.profile.comm_model import CommPredictor

    pred = CommPredictor(CommModel("c", (fit,), {}))
    ops = [Op("a", "allreduce", "step", {"bytes": 1e9}, collective=Collective("dp", n, 1)) for n in (2, 16)]
    t2, t16 = pred.predict_s(ops, None)
    assert t16 / t2 == pytest.approx(ring_factor("allreduce", 16) / ring_factor("allreduce", 2), rel=0.05)
    assert pred.supports("reducescatter", "step", "bf16") is False  # no all-gather fit to borrow


def test_corrupted_comm_model_raises(tmp_path: Path) -> None:
    fit = fit_layout(CommSamples("p2p", 1, 2, np.geomspace(1e3, 1e8, 40), np.geomspace(1e3, 1e8, 40) / 5e9 + 1e-5))
    path = write_comm_model(tmp_path / "c", CommModel("c", (fit,), {"samples": "synthetic"}))
    assert read_comm_model(tmp_path / "c").layouts[0].collective == "p2p"
    doc = json.loads(path.read_text())
    doc["layouts"][0]["busbw_bytes_per_s"] *= 10
    path.write_text(json.dumps(doc))
    with pytest.raises(ProfileError, match="checksum"):
        read_comm_model(tmp_path / "c")


def test_groups_sharing_the_nics_slow_each_other_down_across_nodes_only(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    comm = find_comm_model("perlmutter")
    alone, shared = Collective("dp", 8, 1, 1), Collective("dp", 8, 1, 4)
    ops = [Op("a", "allreduce", "step", {"bytes": 1e9}, collective=c) for c in (alone, shared)]
    t_alone, t_shared = comm.predict_s(ops, None)
    assert 3.0 < t_shared / t_alone <= 4.0
    intra = [Op("b", "allreduce", "step", {"bytes": 1e9}, collective=Collective("tp", 2, 2, g)) for g in (1, 2)]
    t1, t2 = comm.predict_s(intra, None)
    assert t1 == t2


def test_disturbed_rows_are_the_ones_slower_than_larger_messages_and_leave_the_fit() -> None:
    from llmperf_hook.profile.comm_fit import disturbed

    rng = np.random.default_rng(1)
    nbytes = np.geomspace(1e7, 1e9, 400)
    t = (30e-6 + ring_factor("allreduce", 4) * nbytes / 200e9) * np.exp(rng.normal(0, 0.01, nbytes.size))
    slow = np.zeros(nbytes.size, dtype=bool)
    slow[rng.choice(nbytes.size - 20, 60, replace=False)] = True  # 15 % of the rows 2-4x slower (another job)
    t_obs = np.where(slow, t * rng.uniform(2.0, 4.0, nbytes.size), t)
    flagged = disturbed(CommSamples("allreduce", 1, 4, nbytes, t_obs))
    assert (flagged == slow).mean() > 0.97 and not flagged[~slow].any()
    fit = fit_layout(CommSamples("allreduce", 1, 4, nbytes, t_obs))
    assert fit.busbw_bytes_per_s == pytest.approx(200e9, rel=0.02)
    assert fit.plausible_fraction == pytest.approx(1 - flagged.mean(), abs=1e-6)
    assert np.mean(np.abs(fit.predict_s(nbytes, 4, "allreduce") / t - 1)) < 0.02


def test_one_corrupt_fast_row_does_not_make_the_rows_before_it_disturbed(monkeypatch: pytest.MonkeyPatch) -> None:
    from llmperf_hook.profile import comm_fit

    nbytes = np.geomspace(1e6, 1e8, 100)
    t = 20e-6 + nbytes / 50e9
    t[80] = 0.3e-3  # 2.7x too fast for its ~40 MB, yet under the bandwidth bound (plausible on its own)
    samples = CommSamples("p2p", 2, 1, nbytes, t)
    assert comm_fit.plausible(samples).all()
    assert not comm_fit.disturbed(samples).any()
    monkeypatch.setattr(comm_fit, "DISTURBED_WITNESSES", 1)  # one witness would condemn the rows before it
    assert comm_fit.disturbed(samples).sum() > 5
