"""The framework cost's readings (profile/cpu_framework_readings.py): the median per term over interleaved
readings resists disturbed readings that move a single reading's terms far off; the spread is recorded."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmperf_hook.profile import cpu_framework_readings as cfr
from llmperf_hook.profile.cpu_engine_cost import modelled_parts_s

TRUE = {"per_unit_s": 7e-6, "compute_scale": 1.02, "per_byte_s": 2e-11, "backward_per_param_s": 7e-10,
        "optimizer_per_tensor_s": 1.7e-5, "adam_per_param_s": 2.8e-9, "concurrency": 1.08,
        "engine": {"0": (1.4e-3, 1.6e-9), "1": (0.9e-3, 8.6e-9), "3": (8.2e-3, 9.1e-9)}, "fraction": 0.5}
"""The machine the synthetic readings are generated from (the 21:48 testbed file's fp32 terms, rounded)."""


def _fixed() -> cfr.FixedParts:
    tiny = ({"compute_s": 4e-4, "units": 45, "bytes": 2e6, "params": 46_000},
            {"compute_s": 1.6e-3, "units": 285, "bytes": 5e6, "params": 150_000})
    shapes = [(75, 1.2e-3, 1e7, 170_000, 16), (45, 5.7e-3, 3.9e7, 350_000, 16), (75, 8.6e-3, 5.6e7, 540_000, 28),
              (45, 3.2e-2, 1.2e8, 1_100_000, 16), (105, 8.8e-3, 5.8e7, 450_000, 40), (135, 1.2e-2, 6.6e7, 3.7e6, 52)]
    rows = tuple({"shape": [i, 0, 0, 0], "predicted_compute_s": c, "units": u, "bytes": b, "params": p, "tensors": t,
                  "predicted_optimizer_s": 0.0} for i, (u, c, b, p, t) in enumerate(shapes))
    engine_rows = tuple((p, 16, {"compute_s": c, "units": u, "bytes": b})
                        for p, c, u, b in ((550_000, 5e-3, 90, 3e7), (360_000, 6e-3, 60, 4e7),
                                           (1_900_000, 1.4e-2, 90, 8e7), (3_700_000, 2e-2, 60, 1e8)))
    return cfr.FixedParts(tiny, rows, engine_rows)


def _fwd_bwd_s(part: dict) -> float:
    return TRUE["compute_scale"] * part["compute_s"] + TRUE["per_unit_s"] * part["units"] \
        + TRUE["per_byte_s"] * part["bytes"]


def _raw(fixed: cfr.FixedParts, rng: random.Random, noise: float = 0.01, disturb: float = 1.0) -> dict:
    """One reading of the TRUE machine: every time x (1 + uniform noise); `disturb` multiplies what a busy minute
    lands on in this reading: the 2-rank pair, the 9-layer tiny model, one reference shape, the engines."""
    jitter = lambda: 1 + rng.uniform(-noise, noise)  # noqa: E731
    tiny = [(_fwd_bwd_s(p) + TRUE["backward_per_param_s"] * p["params"]) * jitter() for p in fixed.tiny]
    tiny[1] *= disturb
    fb = [(_fwd_bwd_s({"compute_s": r["predicted_compute_s"], **r}) + TRUE["backward_per_param_s"] * r["params"])
          * jitter() for r in fixed.rows]
    fb[3] *= disturb
    adam = lambda t, p: (t * TRUE["optimizer_per_tensor_s"] + p * TRUE["adam_per_param_s"]) * jitter()  # noqa: E731
    opt = [[adam(r["tensors"], r["params"]), adam(1, r["params"])] for r in fixed.rows]
    cost = {"compute_scale": TRUE["compute_scale"], "per_unit_s": TRUE["per_unit_s"], "per_byte_s": TRUE["per_byte_s"],
            "optimizer_per_tensor_s": TRUE["optimizer_per_tensor_s"],
            "optimizer_per_param_s": TRUE["adam_per_param_s"] + TRUE["backward_per_param_s"]}
    engine = {}
    for zero, (per_step, per_param) in TRUE["engine"].items():
        tensors = 16 if zero == "0" else 1
        engine[zero] = []
        for params, _, parts in fixed.engine_rows:
            model_fb, model_opt = modelled_parts_s(parts, cost, tensors, params)
            extra = (per_step + per_param * params) * disturb
            engine[zero].append([(model_fb + (1 - TRUE["fraction"]) * extra) * jitter(),
                                 (model_opt + TRUE["fraction"] * extra) * jitter()])
    bias = {"ratio": TRUE["compute_scale"] * jitter(), "samples": [{"shape": [1, 2, 3, 4], "isolated_s": 1.0,
                                                                     "predicted_s": 1.0}]}
    return {"tiny_s": tiny, "fwd_bwd_s": fb, "optimizer_s": opt, "bias": bias,
            "concurrency": {"2": TRUE["concurrency"] * jitter() * disturb}, "engine": engine}


KEY_TERMS = ("per_unit_s", "compute_scale", "optimizer_per_tensor_s", "concurrency_slowdown/2",
             "deepspeed_step/1/per_param_s", "deepspeed_step/3/per_step_s", "deepspeed_step/0/per_param_s")
EXPECTED = {"per_unit_s": TRUE["per_unit_s"], "compute_scale": TRUE["compute_scale"],
            "optimizer_per_tensor_s": TRUE["optimizer_per_tensor_s"], "concurrency_slowdown/2": TRUE["concurrency"],
            "deepspeed_step/1/per_param_s": TRUE["engine"]["1"][1], "deepspeed_step/3/per_step_s": TRUE["engine"]["3"][0],
            "deepspeed_step/0/per_param_s": TRUE["engine"]["0"][1]}


def test_the_median_of_readings_recovers_the_machine_where_a_disturbed_reading_does_not() -> None:
    """Five readings, two of them taken in a busy minute (x1.25 on the 2-rank pair, the 9-layer tiny model, one
    reference shape and the engines): every key term of the median within 3 % of the machine's, while the
    disturbed readings alone are 15-200 % off (so a one-reading file, as before, would be that far off)."""
    fixed, rng = _fixed(), random.Random(0)
    raws = [_raw(fixed, rng, disturb=d) for d in (1.0, 1.25, 1.0, 1.25, 1.0)]
    entry = cfr.summarize(raws, fixed, "fp32", [1.0] * 5, 60.0)
    got = cfr.flatten(entry)
    for key in KEY_TERMS:
        assert got[key] == pytest.approx(EXPECTED[key], rel=0.03), key
    disturbed = cfr.flatten(cfr.reading_terms(raws[1], fixed, "fp32"))
    assert min(abs(disturbed[k] / EXPECTED[k] - 1) for k in ("per_unit_s", "concurrency_slowdown/2",
                                                              "deepspeed_step/1/per_param_s")) > 0.15
    assert entry["spread"]["concurrency_slowdown/2"] > 0.1  # the disturbed readings show in the spread
    assert len(entry["readings"]) == 5 and entry["reading_loads_1m"] == [1.0] * 5


def test_the_file_keeps_median_samples_that_its_terms_reproduce() -> None:
    """The samples (held-out steps, history) are the medians of the readings' times: the clean machine's."""
    from llmperf_hook.profile.cpu_framework import step_holdout_log_errors

    fixed, rng = _fixed(), random.Random(1)
    raws = [_raw(fixed, rng, noise=0.002, disturb=d) for d in (1.0, 1.4, 1.0)]
    entry = cfr.summarize(raws, fixed, "fp32", [0.5] * 3, 30.0)
    errors = step_holdout_log_errors({"dtypes": {"fp32": entry}})
    assert len(errors) == len(fixed.rows) + 3 * len(fixed.engine_rows)
    assert max(abs(e) for e in errors) < 0.02


def test_each_readings_wait_for_a_core_is_kept_and_printed() -> None:
    """The in-process part of each reading records wall / CPU time (> 1: the process waited for a core another
    program held), kept per reading in the file and printed with the spread: the evidence for telling a reading
    taken under contention from a quiet one."""
    fixed, rng = _fixed(), random.Random(4)
    raws = [{**_raw(fixed, rng), "wall_per_cpu": w} for w in (1.01, 1.34, 1.02)]
    entry = cfr.summarize(raws, fixed, "fp32", [1.0] * 3, 10.0)
    assert entry["reading_wall_per_cpu"] == [1.01, 1.34, 1.02]
    assert "wall / CPU time of the in-process readings 1.01-1.34" in cfr.describe_spread({"dtypes": {"fp32": entry}})
    older = cfr.summarize([_raw(fixed, rng) for _ in range(3)], fixed, "fp32", [1.0] * 3, 10.0)
    assert "wall / CPU" not in cfr.describe_spread({"dtypes": {"fp32": older}})


def test_the_terms_are_one_fit_of_the_median_times() -> None:
    """Every term is fitted once from each time's median over the readings, so the engine's terms are exactly
    what the median engine steps leave beyond the file's own other terms (per-term medians of the readings' fits,
    as before, mixed terms from different readings: the engine's residual then matched no set of times)."""
    from llmperf_hook.profile.cpu_engine_cost import fit_engine_terms

    fixed, rng = _fixed(), random.Random(3)
    raws = [_raw(fixed, rng, noise=0.08, disturb=d) for d in (1.0, 1.3, 0.9)]
    entry = cfr.summarize(raws, fixed, "fp32", [1.0] * 3, 10.0)
    one_fit = cfr.reading_terms({**cfr.median_raw(raws), "concurrency": None}, fixed, "fp32")
    for key in ("per_unit_s", "per_byte_s", "optimizer_per_tensor_s", "optimizer_per_param_s"):
        assert entry[key] == pytest.approx(one_fit[key], rel=1e-12), key
    for zero, stage in entry["deepspeed_step"].items():
        rows = stage["samples"]
        refit = fit_engine_terms([r[0] for r in rows], [r[1] + r[2] for r in rows], [r[3] + r[4] for r in rows])
        assert (stage["per_step_s"], stage["per_param_s"]) == pytest.approx((refit["per_step_s"],
                                                                             refit["per_param_s"]), rel=1e-9), zero
    medians = cfr.combine_readings(entry["readings"])[0]
    assert entry["concurrency_slowdown"] == medians["concurrency_slowdown"]  # a ratio within a reading: its median
    assert any(entry["deepspeed_step"][z]["per_step_s"] != pytest.approx(medians["deepspeed_step"][z]["per_step_s"],
                                                                          rel=1e-3) for z in entry["deepspeed_step"])


@settings(max_examples=60, deadline=None)
@given(st.integers(3, 7), st.data())
def test_fewer_than_half_disturbed_readings_never_move_a_term_outside_the_clean_ones(n: int, data) -> None:
    """combine_readings: any factors on fewer than half of the readings leave every term's median within the
    range of the undisturbed readings' values of that term."""
    clean = [{"a": 1.0 + 0.01 * i, "n": {"b": 2.0 - 0.02 * i}} for i in range(n)]
    bad = data.draw(st.sets(st.integers(0, n - 1), max_size=(n - 1) // 2))
    factors = data.draw(st.lists(st.floats(0.1, 10.0), min_size=n, max_size=n))
    readings = [{"a": r["a"] * (factors[i] if i in bad else 1), "n": {"b": r["n"]["b"] * (factors[i] if i in bad else 1)}}
                for i, r in enumerate(clean)]
    med, spread = cfr.combine_readings(readings)
    good = [r for i, r in enumerate(clean) if i not in bad]
    assert min(r["a"] for r in good) <= med["a"] <= max(r["a"] for r in good)
    assert min(r["n"]["b"] for r in good) <= med["n"]["b"] <= max(r["n"]["b"] for r in good)
    assert spread["a"] >= 0 and spread["n/b"] >= 0


def test_a_term_missing_from_later_readings_is_the_median_of_those_with_it() -> None:
    med, spread = cfr.combine_readings([{"x": 1.0, "d": {"1": {"p": 3.0}}}, {"x": 2.0, "d": {"1": {"p": 5.0}}},
                                        {"x": 4.0}])
    assert med == {"x": 2.0, "d": {"1": {"p": 4.0}}} and spread["x"] == pytest.approx(0.75)
    assert cfr.combine_readings([{"z": 0.0}, {"z": 0.0}, {"z": 1e-9}])[1]["z"] is None  # median 0: no ratio


def test_profile_prints_the_readings_and_their_spread() -> None:
    fixed, rng = _fixed(), random.Random(2)
    entry = cfr.summarize([_raw(fixed, rng) for _ in range(4)], fixed, "fp32", [1.2, 1.5, 1.3, 1.4], 58.0)
    line = cfr.describe_spread({"dtypes": {"fp32": entry}})
    assert line.startswith("framework cost fp32: fitted on the median times of 4 readings (load 1.20-1.50, 58 s)")
    assert "2 ranks" in line and "ZeRO-1/param" in line and "per op unit" in line
    assert all(math.isfinite(v) for v in cfr.flatten(entry["spread"]).values())


def test_two_rank_reading_pairs_each_process_with_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """ConcurrencyReader: together / alone of the same process, median over shapes and both processes, >= 1."""
    from llmperf_hook.profile import cpu_engine_cost as ce

    class Child:
        def __init__(self, *answers: list[float]) -> None:
            self.answers, self.sent = list(answers), 0

        def send(self) -> None:
            self.sent += 1

        def receive(self, timeout_s: float = 600.0) -> list[float]:
            return self.answers[self.sent - 1]

    reader = ce.ConcurrencyReader.__new__(ce.ConcurrencyReader)
    reader.ranks = (2,)
    reader.children = [Child([1.0, 2.0, 3.0], [1.1, 2.4, 3.3]), Child([2.0, 4.0, 6.0], [2.0, 4.4, 6.6])]
    assert reader.reading() == {"2": pytest.approx(1.1)}
    reader.children = [Child([1.0, 1.0, 1.0], [0.9, 0.95, 0.9]), Child([1.0, 1.0, 1.0], [0.9, 0.9, 0.9])]
    assert reader.reading() == {"2": 1.0}
    reader.ranks = (2, 3)  # a 3-CPU machine: the first two processes' own alone readings are the baselines
    reader.children = [Child([1.0, 1.0, 1.0], [1.1, 1.1, 1.1], [1.3, 1.3, 1.3]),
                       Child([2.0, 2.0, 2.0], [2.2, 2.2, 2.2], [2.6, 2.6, 2.6]), Child([9.0, 9.0, 9.0])]
    assert reader.reading() == {"2": pytest.approx(1.1), "3": pytest.approx(1.3)}


def test_the_file_keeps_the_readings_and_the_replaced_steps_and_profile_prints_the_spread(
        tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """write_framework_overhead: each dtype in its share of RESERVED_S, format 3, the replaced one-reading file's
    steps kept as history (format 2 measured the same steps), the spread line on stderr (`llmperf profile`)."""
    import json

    from llmperf_hook.instrument import reference_speed
    from llmperf_hook.profile import cpu_framework as cf

    fixed, rng, boxes = _fixed(), random.Random(4), []

    def measure(hardware: str, dtype: str, threads: int, box: float) -> dict:
        boxes.append(box)
        return cfr.summarize([_raw(fixed, rng) for _ in range(3)], fixed, dtype, [0.4] * 3, 20.0)

    class Reading:
        def to_json(self) -> dict:
            return {"cpu_s": 0.006}

    monkeypatch.setattr(cfr, "measure_framework_overhead", measure)
    monkeypatch.setattr(reference_speed, "measure_reference", lambda where: Reading())
    old = {"format_version": 2, "measured_utc": "then", "load_avg_1m": 3.0,
           "dtypes": {"fp32": {"samples": [{"shape": [1, 2, 3, 4], "fwd_bwd_s": 0.01}]}}}
    (tmp_path / cf.FILE_NAME).write_text(json.dumps(old))
    path = cf.write_framework_overhead(tmp_path, "cpu-x", ["bf16", "fp32"], 1)
    doc = json.loads(path.read_text())
    assert doc["format_version"] == 3 and boxes == [cf.RESERVED_S / 2] * 2
    assert doc["history"][0]["measured_utc"] == "then" and doc["history"][0]["steps"] == {"fp32/fwd_bwd/1x2x3x4": 0.01}
    assert len(doc["dtypes"]["fp32"]["readings"]) == 3
    err = capsys.readouterr().err
    assert all(f"framework cost {dt}: fitted on the median times of 3 readings" in err for dt in ("bf16", "fp32"))


def test_a_failed_concurrency_process_leaves_the_term_out_and_the_rest_measured() -> None:
    from llmperf_hook.profile import cpu_engine_cost as ce

    class Broken:
        def send(self) -> None:
            raise ce.ChildFailed("exited 1")

        def close(self) -> None:
            pass

    reader = ce.ConcurrencyReader.__new__(ce.ConcurrencyReader)
    reader.ranks, reader.children = (2,), [Broken(), Broken()]
    assert reader.reading() is None and reader.children == [] and reader.reading() is None
    fixed, rng = _fixed(), random.Random(5)
    raws = [{**_raw(fixed, rng), "concurrency": None} for _ in range(3)]
    assert "concurrency_slowdown" not in cfr.summarize(raws, fixed, "fp32", [1.0] * 3, 1.0)


def test_a_concurrency_process_that_fails_to_start_closes_them_all(monkeypatch: pytest.MonkeyPatch) -> None:
    """The processes already started are closed, not left waiting on their stdin; no term is read."""
    from llmperf_hook.profile import cpu_engine_cost as ce

    made = []

    class Starting:
        def __init__(self, code: str, threads: int) -> None:
            self.closed = False
            made.append(self)

        def started(self, timeout_s: float = 600.0) -> None:
            if len(made) > 1 and self is made[1]:
                raise ce.ChildFailed("exited 1")

        def close(self) -> None:
            self.closed = True

    monkeypatch.setattr(ce, "Reader", Starting)
    reader = ce.ConcurrencyReader("fp32", 1, ranks=(2, 3))
    assert len(made) == 3 and all(child.closed for child in made)
    assert reader.children == [] and reader.reading() is None
