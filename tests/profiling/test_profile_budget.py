"""`llmperf profile --budget MINUTES` is the wall-clock limit of the whole command (profile/budget.py): every phase
keeps to its deadline, the framework cost included, and a tiny budget still leaves a profile `predict` uses."""

import json
import os
import re
import time
from pathlib import Path

import pytest

from llmperf_hook.profile import budget as budgets
from llmperf_hook.profile import cpu_framework_readings as cfr
from tests.profiling.budget_lines import assert_the_budget_was_kept
from tests.profiling.conftest import TINY_NAME, TinyProfile
from tests.profiling.test_cpu_profile_e2e import _run

pytest.importorskip("torch")


def test_the_phases_add_up_to_the_budget() -> None:
    b = budgets.plan_budget(3.0, 100.0, 120.0, cpu=True)  # framework: half the budget, its concurrent reading in it
    assert b.end_s == 280.0 and b.framework_s + b.tail_s == pytest.approx(90.0 + budgets.TAIL_S)
    assert b.finish_s(27) == pytest.approx(18.0)  # FINISH_SHARE of 180 s, over fit_seconds(27) = 16.1 s
    assert b.sampling_end_s(27) < b.fit_end_s < b.framework_end_s < b.end_s
    assert b.sampling_end_s(27) - b.start_s == pytest.approx(180 - 90 - budgets.TAIL_S - b.finish_s(27))
    assert b.sampling_end_s(27) - b.start_s > 60  # 4 s at load 8 when the framework kept 2/3 and the tail 22 s
    small = budgets.plan_budget(0.5, 0.0, 0.0, cpu=True)
    assert small.framework_s == 0 and small.finish_s(4) == budgets.fit_seconds(4, cpu=True) and small.end_s == 30.0
    assert small.sampling_end_s(27) < small.sampling_end_s(4)  # more to fit: sampling ends sooner
    assert budgets.plan_budget(60.0, 0.0, 120.0, cpu=True).finish_s(27) == pytest.approx(360.0)  # long: a share


def test_the_plan_line_says_when_the_fixed_costs_leave_no_sampling_time() -> None:
    """A 12-s budget 10 s in, whose fits need 3-8 s (LightGBM imported or not): its window used to read 'until
    2--6 s'."""
    tiny = budgets.describe(budgets.plan_budget(0.2, time.perf_counter() - 10.0, 0.0, cpu=True), 27)
    assert "no time left for sampling after 10 s" in tiny and "past the --budget" in tiny, tiny
    assert "--" not in tiny.replace("--budget", ""), tiny
    b = budgets.plan_budget(1.0, time.perf_counter() - 5.0, 0.0, cpu=True)
    minute = budgets.describe(b, 27)
    window = f"{60 - budgets.TAIL_S - b.finish_s(27):.0f}-{60 - budgets.TAIL_S - b.finish_s(1):.0f} s"
    assert f"sampling from 5 s (start-up, torch, the peaks) until {window} (earlier" in minute, minute


def test_sampling_ends_sooner_as_classes_become_fittable() -> None:
    from llmperf_hook.profile import plan
    from llmperf_hook.profile.sampler import MIN_SAMPLES_TO_FIT, SamplingDeadline

    b = budgets.plan_budget(0.5, 0.0, 0.0, cpu=True)
    gemm = plan.SampleSpec("gemm", "fwd", {"m": 64, "n": 64, "k": 64}, "design")
    deadline = SamplingDeadline(b, {("gemm", "fwd"): MIN_SAMPLES_TO_FIT - 1}, other_groups=2)
    assert deadline.now_s() == b.sampling_end_s(2)
    assert deadline.with_spec_s(gemm) == b.sampling_end_s(3)  # its 8th sample makes gemm/fwd fittable
    deadline.add(gemm)
    assert deadline.now_s() == b.sampling_end_s(3)


def test_a_tiny_budget_is_kept_and_predict_uses_the_profile(tiny_profile: TinyProfile, tiny_home: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    """--budget 1 from the shell (the session's tiny profile, tests/profiling/conftest.py): it took 4:02 for
    --budget 3 at load 10 (the framework cost's minimum readings and the peaks ran over), and a tiny budget ran over
    by whatever the peaks took. (At load 12 start-up, torch's import and the peaks took 18 s: --budget 0.5 then
    sampled 2 s, too few to fit, which is refused with exit 2.)"""
    assert tiny_profile.returncode == 0, tiny_profile.stderr[-3000:]
    assert "budget 60 s: sampling from" in tiny_profile.stdout
    # its own clock and phases, not the wall: at load 13 the fits alone ran 20 s over their share (budget_lines.py)
    said = assert_the_budget_was_kept(tiny_profile.stdout, tiny_profile.wall_s)
    assert said.budget_s == 60, said
    code, out = _run(["predict", "--format", "json", "--hardware", TINY_NAME, "--", "python", "pretrain_gpt.py",
                      "--num-layers", "2", "--hidden-size", "128", "--num-attention-heads", "4", "--seq-length", "128",
                      "--max-position-embeddings", "128", "--micro-batch-size", "2", "--global-batch-size", "2",
                      "--vocab-size", "1000"], capsys)
    assert code == 0, out[-3000:]
    assert json.loads(out[out.index("{"):])["predictor"]["gemm"] == f"lightgbm:{TINY_NAME}"


class _Child:
    """A measuring child that takes `start_s` to start and `reading_s` per reading (time.sleep)."""

    def __init__(self, start_s: float, reading_s: float, timeout_s: float, answer: object) -> None:
        self.reading_s, self.answer = reading_s, answer
        self.alive = start_s <= timeout_s
        time.sleep(min(start_s, timeout_s))

    def reading(self, timeout_s: float = 600.0) -> object:
        if not self.alive:
            return None
        time.sleep(min(self.reading_s, timeout_s))
        self.alive = self.reading_s <= timeout_s
        return self.answer if self.alive else None

    def close(self) -> None:
        pass


def test_the_framework_cost_keeps_its_time_box(monkeypatch: pytest.MonkeyPatch) -> None:
    """A slow machine: DeepSpeed's engines and the rank-transport children do not start in their shares of the box
    (left out), and readings stop when the next would end past it. MIN_READINGS used to be taken whatever they cost."""
    from llmperf_hook.profile import cpu_engine_cost as ce
    from llmperf_hook.profile import cpu_rank_transport as crt

    class Local:
        def __init__(self, dtype: str, plan: object) -> None:
            pass

        def reading(self, hardware: str, end_s: float) -> dict:
            time.sleep(0.6)
            return {"r": 1}

    monkeypatch.setattr(cfr, "fixed_parts", lambda dtype, hw, plan: None)
    monkeypatch.setattr(cfr, "_InProcess", Local)
    monkeypatch.setattr(ce, "EngineReader", lambda dtype, threads, timeout_s, **plan: _Child(5.0, 0.1, timeout_s, {"0": []}))
    monkeypatch.setattr(ce, "ConcurrencyReader",
                        lambda dtype, threads, start_timeout_s, **plan: _Child(0.1, 0.2, start_timeout_s, {"2": 1.1}))
    transport_starts: list[float] = []

    def transport(dtype: str, threads: int, start_timeout_s: float, **plan) -> _Child:
        transport_starts.append(start_timeout_s)
        return _Child(9.0, 0.1, start_timeout_s, {})

    monkeypatch.setattr(crt, "TransportReader", transport)
    monkeypatch.setattr(cfr, "TRANSPORT_MIN_LEFT_S", 0.0)  # started in a 3-s box too, to show its share is kept
    monkeypatch.setattr(cfr, "summarize", lambda raws, fixed, dtype, loads, took_s: {"raws": raws, "took_s": took_s})
    t0 = time.perf_counter()
    entry = cfr.measure_framework_overhead("cpu-x", "fp32", 1, time_box_s=3.0)
    took_s = time.perf_counter() - t0
    # The engines' 5-s and the transport's 9-s starts are not waited for: 1 s of slack is for sleeps overshooting on
    # a loaded 2-core machine.
    assert took_s <= 3.0 + 1.0, (took_s, os.getloadavg())
    assert len(transport_starts) == 1 and 0 < transport_starts[0] <= cfr.TRANSPORT_START_SHARE * 3.0
    assert 1 <= len(entry["raws"]) < cfr.MIN_READINGS
    assert all(r["engine"] is None and r["transport"] is None and r["concurrency"] == {"2": 1.1}
               for r in entry["raws"])


def test_an_in_process_reading_stops_at_the_box_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """At load 11 one in-process reading took 100 s of an 80-s box (wall / CPU time 11.5): it now stops between its
    parts once the box is spent, and measure_framework_overhead keeps the readings that ended."""
    calls = []
    monkeypatch.setattr(cfr.cf, "IsolatedDifference", lambda *a: type(  # the tiny difference's ops: no profile here
        "Isolated", (), {"sample_round": lambda self: None, "seconds": lambda self: 3e-3})())

    def step() -> None:
        calls.append(1)
        time.sleep(0.02)

    local = cfr._InProcess.__new__(cfr._InProcess)
    local.dtype, local.tiny, local.steps, local.optimizers = "fp32", [step, step], [step] * 11, [(step, step)] * 11
    t0 = time.perf_counter()
    with pytest.raises(cfr.OutOfTime):
        local.reading("cpu-x", end_s=t0 + 0.5)
    # One part (the tiny pair: a warm-up pair + TINY_PAIRS pairs of 20 ms steps) at most past the end, with slack
    # for load; all parts would take ~4.5 s.
    assert time.perf_counter() - t0 < 0.5 + 2 * (cfr.TINY_PAIRS + 1) * 0.02 + 1.0, os.getloadavg()
    assert len(calls) < 2 * (cfr.TINY_PAIRS + 1) + 22 * (cfr.cf.REPS + 1)


def test_fewer_readings_and_missing_terms_are_said(tmp_path: Path) -> None:
    path = tmp_path / "framework_overhead.json"
    path.write_text(json.dumps({"dtypes": {"fp32": {"readings": [{}], "time_box_s": 50.0,
                                                    "concurrency_slowdown": {"2": 1.0}}}}))
    notes = cfr.time_box_notes(path, ["bf16", "fp32"])
    assert any("bf16: not measured" in n for n in notes)
    assert any("fp32: 1 reading(s) in its 50 s" in n for n in notes)
    assert any("DeepSpeed's engine step" in n and "concurrency" not in n for n in notes)


def test_concurrent_end_readings_left_out_past_the_budget_are_said(tmp_path: Path) -> None:
    """A framework cost that ran to its box's end leaves no time for the copies-at-once end readings: they are
    skipped (the --budget is the command's limit) and the output says so, instead of silently lacking them."""
    from types import SimpleNamespace

    from llmperf_hook.commands import profile as command

    spent = budgets.plan_budget(3.0, time.perf_counter() - 180.0, 120.0, cpu=True)
    result = SimpleNamespace(budget=spent, profile_dir=tmp_path)
    line = command._end_reading(result, command._reference_reading("profile-start"), 1, 3.0)
    assert "readings of several copies at once left out (0 s of the --budget left" in line
    doc = json.loads((tmp_path / "reference_speed.json").read_text())
    assert list(doc["reference_cpu_s"]) == ["1"]  # one copy alone: no 2-copies reading was taken


def test_fits_past_the_budget_are_said() -> None:
    """A resumed run whose --budget is smaller than refitting its stored classes fits them all (dropping one would
    lose a model an earlier run fitted) and says it ran over, as sampling does."""
    import numpy as np

    from llmperf_hook.profile import profile_fit
    from llmperf_hook.profile.build_profile import Samples

    from tests.profiling.test_staged_profile_write import RC

    m, n, k = (np.random.default_rng(0).integers(16, 512, 12).astype(float) for _ in range(3))
    groups = {("gemm", "fwd", "fp32"): Samples("gemm", "fwd", {"m": m, "n": n, "k": k}, 2 * m * n * k / 1e11)}
    entries, _, notes = profile_fit._fit_groups(groups, {"fp32": RC}, "fp32", time.perf_counter() - 5.0)
    assert len(entries) == 1 and any(note.startswith("fitting ran ") and "s past its share of the --budget" in note
                                    for note in notes), notes
    _, _, on_time = profile_fit._fit_groups(groups, {"fp32": RC}, "fp32", time.perf_counter() + 60.0)
    assert not any("past its share" in note for note in on_time)


GPT = ("torchrun --nproc-per-node 1 pretrain_gpt.py --num-layers 2 --hidden-size 128 --num-attention-heads 4 "
       "--seq-length 128 --max-position-embeddings 128 --micro-batch-size 2 --global-batch-size 2 "
       "--vocab-size 1000").split()


def test_past_the_deadline_only_the_for_jobs_classes_get_a_first_fit() -> None:
    """`--budget 0.4 --for` a Megatron GPT job ran 46 s of 24 (R59, 28 Nov, load 8-11): past the deadline every default
    class got the 8 shapes of a first fit, RMSNorm, SwiGLU, RoPE and bmm too, which the job never runs (its predict
    would not use them). With --for and no --ops only the job's classes do; --ops names what the user asked for."""
    from llmperf_hook.profile import plan
    from llmperf_hook.profile.features import RooflineConstants
    from llmperf_hook.profile.sampler import ProfileRequest, SamplingDeadline, _first_fit_classes, _specs

    rc = RooflineConstants(1e11, 1e10, 1, 4)
    req = ProfileRequest(device="cpu", budget_min=0.4, job_argv=tuple(GPT))
    ops = plan.CPU_DEFAULT_OPS
    classes = _first_fit_classes(req, _specs(req, ops, rc, "x"))
    assert classes is not None and {"gemm", "layernorm", "attention"} <= classes
    assert not classes & {"rmsnorm", "swiglu", "rope"}, classes
    asked = ProfileRequest(device="cpu", budget_min=0.4, ops=("gemm", "rmsnorm"), job_argv=tuple(GPT))
    assert _first_fit_classes(asked, _specs(asked, asked.ops, rc, "x")) is None  # every class of --ops
    assert _first_fit_classes(ProfileRequest(device="cpu"), _specs(ProfileRequest(device="cpu"), ops, rc, "x")) is None

    spent = budgets.plan_budget(0.01, time.perf_counter() - 60.0, 0.0, cpu=True)  # its deadline long past
    deadline = SamplingDeadline(spent, {}, first_fit_classes=classes)
    assert deadline.allows(plan.SampleSpec("gemm", "fwd", {"m": 8, "n": 8, "k": 8}, "design"), 0.01)
    assert not deadline.allows(plan.SampleSpec("rmsnorm", "fwd", {"tokens": 8, "hidden": 8}, "design"), 0.01)
    assert SamplingDeadline(spent, {}).allows(plan.SampleSpec("rmsnorm", "fwd", {"tokens": 8, "hidden": 8}, "x"), 0.01)


def test_the_time_line_says_when_start_up_left_no_time_to_sample() -> None:
    """'because every class asked for gets the 8 shapes of a first fit ...' alone hid the usual cause of a tiny
    budget's overrun: at load 13 start-up, torch's import and the peaks took 16.9 s of a 12-s budget."""
    from types import SimpleNamespace

    from llmperf_hook.commands.profile import _time_line

    b = budgets.plan_budget(0.2, 100.0, 0.0, cpu=True)
    starved = SimpleNamespace(budget=b, phase_ends_s=(("start-up, torch and the peaks", 116.9), ("sampling", 128.2),
                                                      ("fitting and writing", 138.6)))
    line = _time_line(starved, 100.0, 138.9, "end reading")
    assert re.search(r"27 s over, because start-up \(torch's import, the peaks\) took 17 s, past the last moment "
                     r"sampling could start \(\d s\), and every class asked for gets the 8 shapes of a first fit",
                     line), line  # (2 s, or less once LightGBM is imported: budget.fit_seconds)
    fed = SimpleNamespace(budget=budgets.plan_budget(1.0, 100.0, 0.0, cpu=True),
                          phase_ends_s=(("start-up, torch and the peaks", 105.0), ("sampling", 150.0),
                                        ("fitting and writing", 180.0)))
    line = _time_line(fed, 100.0, 181.0, "end reading")
    assert "21 s over, because every class asked for" in line and "start-up (" not in line, line
