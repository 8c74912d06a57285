"""CPU framework cost measurement: isolating differences, physical bounds, the CPU-time clock."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmperf_hook.profile import cpu_framework as cf
from llmperf_hook.profile.cpu_engine_cost import fit_engine_terms, modelled_parts_s, partition_fraction
from llmperf_hook.profile.op_sampler import cpu_clock_kind


def _row(compute_s: float, units: float, nbytes: float, scale: float, per_unit: float, per_byte: float,
         params: float = 0.0, per_param: float = 0.0) -> dict:
    return {"predicted_compute_s": compute_s, "compute_s": compute_s, "units": units, "bytes": nbytes,
            "params": params,
            "fwd_bwd_s": scale * compute_s + per_unit * units + per_byte * nbytes + per_param * params}


@settings(max_examples=40, deadline=None)
@given(st.floats(2e-6, 5e-5), st.floats(0.85, 1.4), st.floats(0.0, 2e-10), st.floats(0.0, 2e-9))
def test_steps_1_and_2_recover_the_terms_that_made_the_times(per_unit: float, scale: float, per_byte: float,
                                                             per_param: float) -> None:
    make = lambda c, u, b, p: _row(c, u, b, scale, per_unit, per_byte, p, per_param)  # noqa: E731
    tiny = (make(3e-4, 45, 2e6, 4.6e4), make(1.5e-3, 285, 5e6, 1.5e5))
    rows = [make(1.2e-3, 75, 1e7, 1.7e5), make(5.7e-3, 45, 3.9e7, 3.5e5), make(8.6e-3, 75, 5.6e7, 5.4e5),
            make(3.2e-2, 45, 1.2e8, 1.1e6), make(1.2e-2, 45, 6.6e7, 3.7e6), make(8.8e-3, 105, 5.8e7, 4.5e5)]
    got_byte, got_param = 0.0, 0.0
    for _ in range(30):  # cpu_framework_readings.reading_terms alternates the two steps so (scale from step 2a)
        got_unit = cf.per_unit_from_difference(tiny[0]["fwd_bwd_s"], tiny[1]["fwd_bwd_s"], *tiny, scale, got_byte,
                                               got_param)
        got_byte, got_param = cf.fit_compute_terms(rows, got_unit, scale)
    assert got_unit == pytest.approx(per_unit, rel=1e-3)
    assert got_byte == pytest.approx(per_byte, rel=1e-3, abs=1e-14)
    assert got_param == pytest.approx(per_param, rel=1e-3, abs=1e-14)


def test_terms_beyond_the_operators_are_never_negative() -> None:
    rows = [_row(c, 45, b, 0.9, 0.0, 0.0) for c, b in ((1e-3, 1e7), (4e-3, 2e7), (2e-2, 9e7), (9e-3, 3e7))]
    assert cf.fit_compute_terms(rows, 0.0, 1.0) == (0.0, 0.0)  # in-step faster than the profile: nothing to add


def test_profile_bias_compares_isolated_samples_with_the_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    from llmperf_hook.graph.op import Op
    from llmperf_hook.profile import op_sampler

    ops = [(Op("g", "gemm", "fwd", {"m": 8, "n": 8, "k": 8}, flops=1.0, bytes_moved=1.0), 3, 2e-3),
           (Op("l", "layernorm", "bwd", {"tokens": 8, "hidden": 8}, flops=1.0, bytes_moved=1.0), 2, 1e-3)]
    monkeypatch.setattr(cf, "_predicted_ops", lambda *a: (ops, 0.0))
    phases = []
    monkeypatch.setattr(op_sampler, "sample_op", lambda cls, dims, phase, *a, **k: phases.append(phase) or
                        op_sampler.Timing(1e-3 if cls == "gemm" else 2e-3, 5, 0.0))
    got = cf.measure_profile_bias("fp32", "cpu-x", [(1, 32, 16, 1)])
    assert got["ratio"] == pytest.approx((3 * 1e-3 + 2 * 2e-3) / (3 * 2e-3 + 2 * 1e-3)) and phases == ["fwd", "bwd"]


def test_per_unit_never_negative() -> None:
    small = {"compute_s": 1e-3, "units": 45, "bytes": 0.0}
    large = {"compute_s": 5e-3, "units": 285, "bytes": 0.0}
    assert cf.per_unit_from_difference(2e-3, 3e-3, small, large) == 0.0  # compute alone exceeds the difference


def test_optimizer_terms_from_tensor_and_flat_differences() -> None:
    rows = [{"tensors": t, "params": p, "optimizer_tensors_s": t * 3e-5 + p * 3e-9, "optimizer_flat_s": 3e-5 + p * 3e-9}
            for t, p in ((16, 4.6e4), (28, 5.4e5), (40, 4.5e5), (16, 1.1e6))]
    per_tensor, per_param = cf.fit_optimizer_terms(rows)
    assert per_tensor == pytest.approx(3e-5) and per_param == pytest.approx(3e-9)


def test_engine_terms_are_the_unmodelled_part_per_step_and_per_parameter() -> None:
    params = [5e5, 3.6e5, 1.9e6, 3.7e6]
    modelled = [0.008, 0.009, 0.02, 0.025]
    engine = [m + 2e-3 + 1e-8 * p for m, p in zip(modelled, params)]
    got = fit_engine_terms(params, engine, modelled)
    assert got["per_step_s"] == pytest.approx(2e-3, rel=1e-6) and got["per_param_s"] == pytest.approx(1e-8, rel=1e-6)
    assert fit_engine_terms(params, modelled, engine) == {"per_step_s": 0.0, "per_param_s": 0.0}


def test_modelled_step_adds_the_fitted_terms() -> None:
    cost = {"compute_scale": 1.1, "per_unit_s": 1e-5, "per_byte_s": 1e-10, "optimizer_per_tensor_s": 2e-5,
            "optimizer_per_param_s": 3e-9}
    parts = {"compute_s": 0.01, "units": 75, "bytes": 1e7}
    fb, opt = modelled_parts_s(parts, cost, 28, 5e5)
    assert fb == pytest.approx(0.011 + 75e-5 + 1e-3) and opt == pytest.approx(28 * 2e-5 + 1.5e-3)


def test_partition_fraction_is_the_steps_share_of_the_per_parameter_work() -> None:
    params = [5e5, 3.6e5, 1.9e6, 3.7e6]
    step_extra = [1e-3 + 6e-9 * p for p in params]
    total = {"per_step_s": 2e-3, "per_param_s": 8e-9}
    assert partition_fraction(params, step_extra, total) == pytest.approx(0.75, rel=1e-6)
    assert partition_fraction(params, step_extra, {"per_step_s": 0.0, "per_param_s": 0.0}) == 0.0
    assert partition_fraction(params, [1e-3 + 2e-8 * p for p in params], total) == 1.0


def test_one_thread_is_timed_by_process_cpu_time() -> None:
    torch = pytest.importorskip("torch")
    assert cpu_clock_kind(1) == "process_cpu" and cpu_clock_kind(4) == "wall"
    torch.set_num_threads(1)
    assert cf.cpu_clock() is time.process_time
    t0 = time.process_time()
    got = cf.measure_fwd_bwd(cf.TINY_LAYERS[0], "fp32")
    assert 0.0 < got < time.process_time() - t0  # several timed repetitions, each a real forward+backward


def test_cpu_fingerprint_names_the_clock() -> None:
    from llmperf_hook.profile.local_hardware import fingerprint

    assert fingerprint("cpu", 1)["clock"] == "process_cpu" and fingerprint("cpu", 2)["clock"] == "wall"


def test_engine_parameters_split_between_the_model_and_the_ranks_partition(tmp_path, monkeypatch) -> None:
    import json

    from llmperf_hook.api import build_graph
    from llmperf_hook.graph.cpu_stages import engine_params
    from tests.refine.test_cpu_framework import _cluster, _home_with_cost, _zero3_config

    assert engine_params(1000, 500, 0.0) == 1000 and engine_params(1000, 500, 1.0) == 500
    assert engine_params(1000, 500, 0.6) == 700 and engine_params(1000, 1000, 0.6) == 1000
    home = _home_with_cost(tmp_path, "cpu-x")
    path = home / "profiles" / "cpu-x" / "framework_overhead.json"
    doc = json.loads(path.read_text())
    doc["dtypes"]["fp32"]["deepspeed_step"]["3"]["partition_fraction"] = 0.5
    path.write_text(json.dumps(doc))
    monkeypatch.setenv("LLMPERF_HOME", str(home))
    stage = build_graph(_zero3_config(tmp_path), _cluster("cpu-x")).stages[0]
    opt = next(op for op in stage.step_ops if op.op_class == "optimizer")
    partition = int(opt.dims["params"])
    assert partition < stage.num_params  # two ranks: each steps half
    assert int(opt.tags["engine_params"]) == engine_params(stage.num_params, partition, 0.5)


def test_parameter_counts_of_the_reference_gpt() -> None:
    """Tied LM head: embedding V*h + positions s*h + per layer 12h^2 + 13h (QKV, projection, MLP, two LayerNorms)
    + the final LayerNorm 2h; tensors 2 + 12 per layer + 2."""
    pytest.importorskip("torch")
    for layers, hidden, seq, mbs in (cf.TINY_LAYERS[0], (2, 128, 64, 4)):
        params = cf.VOCAB * hidden + seq * hidden + layers * (12 * hidden ** 2 + 13 * hidden) + 2 * hidden
        assert cf.parameter_counts((layers, hidden, seq, mbs)) == (params, 4 + 12 * layers)
