"""profile/cpu_reading_plan.py: a dtype whose steps are many times fp32's on this CPU (bf16 on an AVX2-only EPYC, no
oneDNN kernel: ~2.5-3 min of CPU a full reading) is read on the light plan of smaller steps, every term still measured
in that dtype; fp32 keeps the full plan; the file says which plan measured each dtype and how each term was obtained."""

from __future__ import annotations

import pytest

from llmperf_hook.profile import cpu_engine_cost as ce
from llmperf_hook.profile import cpu_framework as cf
from llmperf_hook.profile import cpu_framework_readings as cfr
from llmperf_hook.profile import cpu_rank_transport as crt
from llmperf_hook.profile import cpu_reading_plan as plans


def _gemm_flops(shape: cf.Shape) -> int:
    """Forward GEMM flops of one reference step: 2 x tokens x (12 h^2 x layers + h x vocab) (the tied LM head)."""
    layers, hidden, seq, mbs = shape
    return 2 * seq * mbs * (12 * hidden * hidden * layers + hidden * cf.VOCAB)


def test_fp32_keeps_the_full_plan_without_a_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plans, "step_ratio", lambda dtype: pytest.fail("fp32 is never probed"))
    assert plans.choose_plan("fp32") == (plans.FULL, None)
    assert plans.FULL.reference == cf.REFERENCE_SHAPES and plans.FULL.bias == cf.BIAS_SHAPES
    assert plans.FULL.deepspeed == ce.DEEPSPEED_SHAPES and plans.FULL.transport == crt.TRANSPORT_ENGINES
    assert plans.FULL.reps == cf.REPS == ce.ENGINE_REPS


@pytest.mark.parametrize("ratio, name", [(1.1, "full"), (plans.LIGHT_ABOVE, "full"), (11.0, "light")])
def test_a_dtype_takes_the_light_plan_only_when_its_steps_are_slow_here(monkeypatch: pytest.MonkeyPatch, ratio: float,
                                                                         name: str) -> None:
    monkeypatch.setattr(plans, "step_ratio", lambda dtype: ratio)
    plan, measured = plans.choose_plan("bf16")
    assert (plan.name, measured) == (name, ratio)


def test_the_light_plan_keeps_the_terms_inputs_and_drops_the_gemm_flops() -> None:
    """Per op unit, per parameter (tensor) and per wire byte terms need layers and parameters, not GEMM flops: the light
    rows span 1-4 layers and a 3x parameter range at under 1/6 of the full rows' flops; a step compared with the
    profile's prediction keeps >= 128 tokens and sequence >= 72 (the regressors' m and s ranges begin at 72),
    the others >= 64."""
    light, full = plans.LIGHT, plans.FULL
    assert sum(map(_gemm_flops, light.reference)) < sum(map(_gemm_flops, full.reference)) / 6
    assert light.reps * sum(map(_gemm_flops, light.deepspeed)) < full.reps * sum(map(_gemm_flops, full.deepspeed)) / 4
    assert {s[0] for s in light.reference} == {s[0] for s in full.reference}
    params = [cf.parameter_counts(s)[0] for s in light.reference]
    assert max(params) > 3 * min(params)
    engine_params = [cf.parameter_counts(s)[0] for s in light.deepspeed]
    assert max(engine_params) > 3 * min(engine_params)
    predicted = (*light.reference, *light.bias, *light.deepspeed)
    assert min(s[2] * s[3] for s in predicted) >= 128 and min(s[2] for s in predicted) >= 72
    assert min(s[2] for s in (*light.concurrency, *(s for _, s in light.transport))) >= 64 and light.reps >= 3
    assert {z for z, _ in light.transport} == {z for z, _ in full.transport}


def test_a_slow_dtype_is_read_on_the_light_plan_and_the_entry_says_how(monkeypatch: pytest.MonkeyPatch) -> None:
    """measure_framework_overhead hands the light shapes and repetitions to every reader and the fixed parts, and the
    entry records the plan, the measured ratio and each term's source."""
    got: dict[str, object] = {}

    class Reader:
        def __init__(self, name: str, *args, **kwargs) -> None:
            got[name] = {k: v for k, v in kwargs.items() if k != "start_timeout_s"}

        def reading(self, *args) -> None:
            return None

        def close(self) -> None:
            pass

    class Local:
        def __init__(self, dtype: str, plan: plans.ReadingPlan) -> None:
            got["local"] = plan

        def reading(self, hardware: str, end_s: float) -> dict:
            return {"r": 1}

    monkeypatch.setattr(plans, "step_ratio", lambda dtype: 9.5)
    monkeypatch.setattr(cfr, "fixed_parts", lambda dtype, hw, plan: got.setdefault("fixed", plan))
    monkeypatch.setattr(cfr, "_InProcess", Local)
    monkeypatch.setattr(ce, "EngineReader", lambda *a, **k: Reader("engine", **k))
    monkeypatch.setattr(ce, "ConcurrencyReader", lambda *a, **k: Reader("concurrency", **k))
    monkeypatch.setattr(crt, "TransportReader", lambda *a, **k: Reader("transport", **k))
    monkeypatch.setattr(cfr, "summarize", lambda raws, fixed, dtype, loads, took_s: {"readings": raws})
    entry = cfr.measure_framework_overhead("cpu-x", "bf16", 1, time_box_s=60.0)
    light = plans.LIGHT
    assert got["local"] is got["fixed"] is light
    assert got["engine"] == {"shapes": light.deepspeed, "reps": light.reps}
    assert got["concurrency"] == {"shapes": light.concurrency, "reps": light.reps}
    assert got["transport"] == {"engines": light.transport, "reps": light.reps}
    record = entry["reading_plan"]
    assert record["name"] == "light" and record["step_per_fp32"] == 9.5
    assert record["tiny_isolated"] == cfr.TINY_ISOLATED  # which per_unit_s method the file's term came from
    assert record["shapes"]["reference"] == light.reference
    assert set(record["terms"]) >= {"per_unit_s", "compute_scale", "deepspeed_step", "rank_transport"}
    assert plans.plan_of(entry) is light and plans.plan_of({}) is plans.FULL


def test_the_in_process_reading_times_the_plans_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    reps, bias = [], []
    monkeypatch.setattr(cf, "paired_difference_s", lambda small, large, pairs, clock=None, between=None, every=0:
                        (1e-3, 6e-3))
    monkeypatch.setattr(cf, "_median_s", lambda fn, reps_=cf.REPS, clock=None: reps.append(reps_) or 2e-2)
    monkeypatch.setattr(cf, "measure_profile_bias", lambda dtype, hw, shapes: bias.append(shapes) or
                        {"ratio": 1.0, "samples": []})
    monkeypatch.setattr(cf, "IsolatedDifference", lambda *a: type("Isolated", (), {"sample_round": lambda self: None,
                                                                               "seconds": lambda self: 3e-3})())
    monkeypatch.setattr(cf, "fwd_bwd_fn", lambda shape, dtype: shape)
    monkeypatch.setattr(cf, "optimizer_steps", lambda shape: (shape, shape))
    local = cfr._InProcess("bf16", plans.LIGHT)
    raw = local.reading("cpu-x")
    assert local.steps == list(plans.LIGHT.reference) and len(raw["fwd_bwd_s"]) == len(plans.LIGHT.reference)
    assert set(reps) == {plans.LIGHT.reps} and bias == [plans.LIGHT.bias]


def test_light_engine_steps_are_keyed_apart_in_the_step_history() -> None:
    """The engine samples are keyed by index; a light entry's index 0 is another model than a full entry's."""
    entry = {"deepspeed_step": {"1": {"samples": [[1000, 0.02, 0.005, 0.018, 0.004]]}}}
    full = cf.measured_steps({"engine_method": ce.ENGINE_METHOD, "dtypes": {"bf16": entry}})
    light = cf.measured_steps({"engine_method": ce.ENGINE_METHOD,
                               "dtypes": {"bf16": {**entry, "reading_plan": {"name": "light"}}}})
    assert list(full) == ["bf16/deepspeed_process_z1/0"] and list(light) == ["bf16/light/deepspeed_process_z1/0"]


def test_the_spread_line_names_the_light_plan() -> None:
    doc = {"dtypes": {"bf16": {"readings": [{}, {}], "spread": {}, "reading_loads_1m": [1.0, 1.2], "measure_s": 40.0,
                               "reading_plan": {"name": "light", "step_per_fp32": 11.25}}}}
    assert cfr.describe_spread(doc).startswith("framework cost bf16 (light plan: smaller steps, a bf16 step 11.2x "
                                                "fp32's here): fitted on the median times of 2 readings")


def test_the_probe_is_a_measurement_that_a_dtype_as_fast_as_fp32_does_not_pass() -> None:
    """step_ratio times PROBE_SHAPE's real forward+backward in both dtypes on one clock (the process's CPU time, ~0.2 s
    of it): fp32 against itself read 0.73-1.12 at load 10 on 2 cores (bf16 6.6-8.5 on this AVX2-only EPYC), so the
    probe's noise does not reach LIGHT_ABOVE."""
    ratio = plans.step_ratio("fp32")
    assert 0 < ratio < plans.LIGHT_ABOVE
    assert plans.plan_of({"reading_plan": plans.plan_record(plans.FULL, ratio)}) is plans.FULL
