"""The S24 audit of benchmarks/bench_validation.py (docs/model.md, round 5): its helpers on hand-made rows, and
what it finds in ../shared/validation/dev.csv (data-parallel cost = vTrain's own NCCL LUT lookup)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from .validate_helpers import DEV_CSV

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_validation as bench  # noqa: E402


def _run(n: int, time_s: float, dp: int = 1, mbs: int = 2) -> SimpleNamespace:
    return SimpleNamespace(num_layers=12, hidden_size=1024, tp=2, pp=1, dp=dp, micro_batch_size=mbs,
                           global_batch_size=n * mbs * dp, iteration_time_s=time_s, vocab_size=50257,
                           seq_length=1024, source_id="S24", row_id=str(n))


def test_linear_fits_recover_fixed_and_per_microbatch_cost() -> None:
    runs = [_run(n, 0.004 + 0.045 * n) for n in (2, 4, 8)]
    fits = bench.linear_fits(runs)
    fixed, per_mb, residual, distinct = fits[(12, 1024, 2, 1, 1, 2)]
    assert fixed == pytest.approx(0.004) and per_mb == pytest.approx(0.045)
    assert residual < 1e-12 and distinct == 3


def test_linear_fits_report_a_measured_deviation_and_skip_single_batch_configs() -> None:
    runs = [_run(2, 0.10), _run(4, 0.19), _run(8, 0.40), _run(4, 0.3, dp=2)]
    fits = bench.linear_fits(runs)
    assert fits[(12, 1024, 2, 1, 1, 2)][2] > 0.005  # not a straight line: a real residual
    assert (12, 1024, 2, 1, 2, 2) not in fits  # one global batch size: nothing to fit


def test_vtrain_gradient_bytes_follow_its_parameter_list() -> None:
    # src/predictor.py model_params at hidden 1024, TP 2, 12 layers, vocab 50257, sequence 1024 (fp16 bytes):
    h, tp = 1024, 2
    layer = 6 * h + 3 * h * (h // tp) + 3 * h // tp + h * (h // tp) + h * (4 * h // tp) + 4 * h // tp \
        + 4 * h * (h // tp)
    expected = 2 * (2 * (50257 // tp) * h + 1024 * h + 12 * layer)
    assert bench.vtrain_gradient_bytes(_run(2, 0.1)) == expected
    assert round(expected / 2**20) == 244  # the "grad MB" the audit prints for this layout


def test_lut_ring_time_interpolates_and_extrapolates() -> None:
    points = [(1e6, 1e-4, 10.0), (2e6, 3e-4, 15.0)]
    assert bench.lut_ring_s(points, 1.5e6) == pytest.approx(2e-4)
    assert bench.lut_ring_s(points, 4e6) == pytest.approx(6e-4)


@pytest.mark.skipif(not (DEV_CSV.exists() and bench.VTRAIN_LUT_CSV.exists()), reason="shared data not present")
def test_dev_csv_s24_data_parallel_cost_is_vtrains_lut_lookup() -> None:
    from llmperf_hook.validate.runs_csv import build_measured_runs, read_runs_csv

    runs = [r for r in build_measured_runs(read_runs_csv(DEV_CSV)) if r.source_id == "S24"]
    fits = bench.linear_fits(runs)
    assert max(f[2] for f in fits.values() if f[3] >= 3) < 5e-6  # exactly linear at the CSV's precision
    lut = bench.read_allreduce_lut(bench.VTRAIN_LUT_CSV)
    first = {bench._config_key(r): r for r in runs}
    checked = 0
    for key, (fixed, *_rest) in fits.items():
        base = fits.get(key[:4] + (1,) + key[5:])
        if key[3] != 1 or key[4] == 1 or base is None:
            continue
        nbytes = bench.vtrain_gradient_bytes(first[key])
        lookup = (bench.lut_ring_s(lut[key[4]], nbytes) if nbytes <= 2**30
                  else nbytes / (lut[key[4]][-1][2] * 2**30))
        assert fixed - base[0] == pytest.approx(lookup, rel=0.01), key
        checked += 1
    assert checked >= 20


def test_step_term_fits_split_a_rate_per_parameter_from_a_per_step_constant() -> None:
    rows = []
    for layers in (12, 24):
        run = SimpleNamespace(**{**vars(_run(2, 0.0)), "num_layers": layers})
        params = bench.megatron_deepspeed_params(run)
        for n in (2, 4):  # fixed = 20 ps x parameters + 0.5 ms, per micro-batch 40 ms
            rows.append(SimpleNamespace(**{**vars(run), "global_batch_size": n * 2,
                                           "iteration_time_s": 20e-12 * params + 5e-4 + 0.04 * n}))
    rate, intercept, count = bench.step_term_fits(rows, bench.linear_fits(rows))[(1024, 2, 2)]
    assert rate == pytest.approx(20e-12) and intercept == pytest.approx(5e-4) and count == 2
    # Megatron-DeepSpeed ties the logit layer to the word embedding: vTrain's list minus one vocabulary table.
    assert bench.megatron_deepspeed_params(_run(2, 0.1)) == bench.vtrain_gradient_bytes(_run(2, 0.1)) // 2 \
        - (50257 // 2) * 1024


@pytest.mark.skipif(not DEV_CSV.exists(), reason="shared data not present")
def test_dev_csv_s24_steps_hold_no_per_step_framework_time() -> None:
    from llmperf_hook.validate.runs_csv import build_measured_runs, read_runs_csv

    runs = [r for r in build_measured_runs(read_runs_csv(DEV_CSV)) if r.source_id == "S24"]
    terms = bench.step_term_fits(runs, bench.linear_fits(runs))
    assert len(terms) >= 10
    # Every family's per-step part is a rate over the parameters with no positive constant: not a DeepSpeed step
    # as it runs (its per-tensor overflow-check syncs alone are ~0.03 ms x 150-300 tensors).
    assert all(-0.2e-3 < intercept < 0.01e-3 for _, intercept, _ in terms.values())
    assert all(19e-12 < rate < 22e-12 for (hidden, _tp, _mbs), (rate, _, _) in terms.items() if hidden == 2048)
