"""Why a class asked for was left without a regressor, said once and kept: a class whose first-fit shapes were too slow
to take past the sampling deadline (sampler.SamplingDeadline.refused) is named with the --budget that measures it in
the profile's 'not fitted' note (one builder, profile_fit.unfitted_note, whose "whatever the --budget" is said only of
the classes a first fit takes), in the exit-2 message when nothing could be fitted, and in profile.json
("unfitted_reasons"), from which predict's per-class line says it. The warm-up's once-per-process record is keyed by
the runner factory, so a test's stand-in for op_sampler.make_runner is warmed up on its own first call whatever ran
before it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from llmperf_hook.errors import ProfileError, UsageError
from llmperf_hook.graph.op import Op
from llmperf_hook.profile import op_sampler, plan, sampler
from llmperf_hook.profile.budget import plan_budget
from llmperf_hook.profile.predictor import FittedProfile
from llmperf_hook.profile.profile_fit import fit_and_write, refused_reason, unfitted_note
from llmperf_hook.profile.profile_io import ProfileMeta, meta_sha256, read_profile_meta, write_profile
from tests.profiling.test_packed_trees import RC, _tiny_fit

SLOW = {"layernorm/bwd/fp32": (5, 90.0)}
"""Five first-fit shapes of LayerNorm backward estimated at 90 s together: 2 more minutes of --budget."""


def test_the_not_fitted_note_says_whatever_the_budget_only_of_the_classes_a_first_fit_takes() -> None:
    note = unfitted_note({"gemm/fwd/fp32": 0, "layernorm/bwd/fp32": 2}, "cpu", "box", SLOW, 0.35)
    quick, slow = note.split("`llmperf profile")[1:]
    assert "--ops gemm --name box`" in quick and "whatever the --budget" in quick, note
    assert "--ops layernorm --budget 2.35 --name box`" in slow and "whatever the --budget" not in slow, note
    assert "layernorm/bwd/fp32: 5 shapes, about 90 s" in slow and "at least 2 min larger" in slow, note


def test_nothing_fitted_exits_2_with_the_class_too_slow_and_the_budget_that_measures_it() -> None:
    req = sampler.ProfileRequest(device="cpu", budget_min=0.35)
    budget = plan_budget(0.35, time.perf_counter() - 60.0, 0.0, cpu=True)
    with pytest.raises(UsageError) as err:
        fit_and_write(req, "box", RC, "{}", {}, {}, 0, 0, "plan: 8 shapes; budget 21 s", budget,
                      asked={("layernorm", "bwd")}, refused=SLOW)
    message = str(err.value)
    assert "layernorm/bwd/fp32 (5 shapes, about 90 s)" in message, message
    assert "at least 2 min larger (--budget 2.35)" in message and "budget 21 s" in message, message


def _profile(tmp_path: Path, reasons: dict[str, str]) -> Path:
    entry, text = _tiny_fit()  # gemm fwd fp32
    meta = ProfileMeta("tiny", {"fp32": RC}, {}, {"device": "test"}, {}, {"samples": "synthetic"}, (entry,),
                       unfitted={"gemm/bwd/fp32": 0, "layernorm/fwd/fp32": 1}, unfitted_reasons=reasons)
    return write_profile(tmp_path / "tiny", meta, {entry.file: text})


def test_the_reason_is_stored_in_profile_json_and_said_by_predict(tmp_path: Path) -> None:
    why = refused_reason(5, 90.0)
    directory = _profile(tmp_path, {"gemm/bwd/fp32": why, "gemm/fwd/fp32": "fitted by a refit: not written"})
    assert json.loads((directory / "profile.json").read_text())["unfitted_reasons"] == {"gemm/bwd/fp32": why}
    profile = FittedProfile(directory)
    from llmperf_hook.hardware.load import load_cluster
    from llmperf_hook.predict.dispatch import predict_ops

    ops = [Op("gb", "gemm", "bwd", {"m": 64, "n": 64, "k": 64}, dtype="fp32"),
           Op("ln", "layernorm", "fwd", {"tokens": 64, "hidden": 64}, dtype="fp32")]
    _, used = predict_ops(ops, load_cluster("dgx-h100"), profile, None)
    assert used["gemm"] == f"roofline (not fitted in tiny: 0 samples; {why})", used
    assert "a --budget at least 2 min larger" in used["gemm"]
    assert used["layernorm"] == "roofline (not fitted in tiny: 1 sample)"  # no reason recorded: as before


def test_a_reason_for_a_group_not_listed_unfitted_is_refused(tmp_path: Path) -> None:
    directory = _profile(tmp_path, {})
    doc = json.loads((directory / "profile.json").read_text())
    doc["unfitted_reasons"] = {"attention/fwd/fp32": "made up"}
    doc["meta_sha256"] = meta_sha256(doc)
    (directory / "profile.json").write_text(json.dumps(doc))
    with pytest.raises(ProfileError, match="unfitted_reasons"):
        read_profile_meta(directory)


def test_the_device_s_ranges_are_chosen_in_one_place() -> None:
    assert sampler.ranges_for("cpu") is plan.CPU_RANGES and sampler.ranges_for("cuda") is plan.GPU_RANGES


def test_each_runner_factory_is_warmed_up_once_whatever_ran_before_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two tests' stand-ins in one process: the second is warmed up too (its first call is the smallest shape, not a
    sampled one), each once; a stand-in that fails on the smallest shape is left to the sampled shapes."""
    calls: dict[str, list] = {"a": [], "b": []}

    def stand_in(name: str):
        def make(op_class, dims, bwd, dtype, device):
            if dims["m"] not in (64, 100):
                raise KeyError(dims["m"])
            return lambda: calls[name].append(dims["m"])
        return make

    for name in ("a", "b"):
        monkeypatch.setattr(op_sampler, "make_runner", stand_in(name))
        sampler.warm_up("gemm", "fwd", "fp32", "cpu")
        sampler.warm_up("gemm", "fwd", "fp32", "cpu")
    assert calls == {"a": [64.0], "b": [64.0]}, calls

    def strict(op_class, dims, bwd, dtype, device):  # a table of the sampled shapes only
        return {100: lambda: None}[dims["m"]]

    monkeypatch.setattr(op_sampler, "make_runner", strict)
    sampler.warm_up("gemm", "bwd", "fp32", "cpu")  # its KeyError is not the warm-up's to raise
