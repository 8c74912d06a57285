"""DeepSpeed's engine on a CPU under gradient accumulation: ZeRO-2/3 repeat the forward+backward share of the engine's
measured work in every further micro-batch (they reduce in every backward), ZeRO-0/1 do not (they reduce at the
boundary). Real graphs of the CPU testbed's model through graph/cpu_stages.py and predict/cpu_framework.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from llmperf_hook.graph.op import Op
from llmperf_hook.graph.op_graph import OpGraph
from llmperf_hook.hardware.spec import ClusterSpec, HardwareSpec, NetworkTier
from llmperf_hook.predict.cpu_framework import (FILE_NAME, CpuFrameworkCost, find_cpu_framework_cost, fwd_bwd_share,
                                                op_cost_parts, unsplit_engine_notes)

PER_STEP_S, PER_PARAM_S, FRACTION = 3e-3, 2e-8, 0.55
"""A ZeRO-2-like engine reading (the testbed's fp32 file, 16:18: 3.19 ms, 2.03e-8 s, 0.546)."""


def _home(tmp_path: Path, samples: list | None = None) -> Path:
    d = tmp_path / "profiles" / "cpu-x"
    d.mkdir(parents=True)
    (d / "profile.json").write_text("{}")
    engine = {"per_step_s": PER_STEP_S, "per_param_s": PER_PARAM_S, "partition_fraction": FRACTION,
              **({"samples": samples} if samples else {})}
    entry = {"per_unit_s": 2e-5, "compute_scale": 1.0, "optimizer_per_tensor_s": 5e-5, "optimizer_per_param_s": 4e-9,
             "concurrency_slowdown": {"2": 1.1}, "deepspeed_step": {z: engine for z in "0123"}}
    (d / FILE_NAME).write_text(json.dumps({"dtypes": {"fp32": entry}}))
    return tmp_path


def _job(tmp_path: Path, zero: int, accum: int) -> tuple[OpGraph, ClusterSpec]:
    from llmperf_hook.api import build_graph, resolve_job

    ds = tmp_path / f"ds{zero}{accum}.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": accum,
                              "zero_optimization": {"stage": zero}}))
    argv = ["deepspeed", "--num_gpus", "2", "train.py", "--deepspeed_config", str(ds), "--num-layers", "2",
            "--hidden-size", "128", "--num-attention-heads", "4", "--seq-length", "128",
            "--max-position-embeddings", "128", "--micro-batch-size", "2", "--global-batch-size", str(4 * accum),
            "--vocab-size", "1024", "--no-pipeline-parallel"]
    cfg = resolve_job(argv, {})[1]
    assert cfg.batch.num_microbatches == accum and cfg.optimizer.zero_stage == zero
    tier = NetworkTier(2e9, 5e-5)
    cluster = ClusterSpec("c", HardwareSpec("cpu-x", {"fp32": 3e10}, 5e9, 1 << 34), 2, tier, tier)
    return build_graph(cfg, cluster), cluster


def _optimizer_op(tmp_path: Path, zero: int, accum: int) -> Op:
    return next(op for op in _job(tmp_path, zero, accum)[0].all_ops() if op.op_class == "optimizer")


@pytest.mark.parametrize("zero, accum, further", [(2, 2, 1), (3, 4, 3), (2, 1, 0), (1, 2, 0), (0, 4, 0)])
def test_only_zero_2_and_3_repeat_the_engine_per_micro_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             zero: int, accum: int, further: int) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(_home(tmp_path)))
    cost = find_cpu_framework_cost("cpu-x", "fp32")
    op = _optimizer_op(tmp_path, zero, accum)
    parts = op_cost_parts(op, 0.0, cost)
    if not further:  # ZeRO-0/1, or one micro-batch: the reading's one-micro-batch step as it was
        assert "engine_further_microbatches" not in op.tags and "engine_microbatches" not in parts
        return
    stage_params = int(op.tags["engine_stage_params"])
    assert stage_params > op.dims["params"]  # every gradient of the stage, not the rank's partition
    per_microbatch_s = (1 - FRACTION) * (PER_STEP_S + PER_PARAM_S * stage_params)
    assert parts["engine_microbatches"] == pytest.approx(further * per_microbatch_s, rel=1e-5)
    one = op_cost_parts(_optimizer_op(tmp_path, zero, 1), 0.0, cost)
    assert parts["engine"] == pytest.approx(one["engine"])  # the step's own share is paid once
    with_two = op_cost_parts(op, 0.0, cost, ranks_on_machine=2)
    assert with_two["engine_microbatches"] == pytest.approx(1.1 * parts["engine_microbatches"])  # ranks share cores


def test_a_reading_without_a_split_prices_no_repetition_and_says_so() -> None:
    """A file from before the engine's forward+backward and step were timed apart (profile/cpu_engine_cost.py, 26 Nov
    2026: no samples, no partition_fraction) cannot tell what a further micro-batch repeats: 1 would price the step's
    own norm, update and copy back m times. The part is left out and the prediction says so."""
    assert fwd_bwd_share({"per_step_s": PER_STEP_S, "per_param_s": PER_PARAM_S}) is None
    assert fwd_bwd_share({"samples": [[5e5, 0.02, 0.01]], "per_step_s": PER_STEP_S}) is None  # the total alone
    cost = CpuFrameworkCost(2e-5, 1.0, 5e-5, 4e-9, deepspeed_step={"2": (PER_STEP_S, PER_PARAM_S)},
                            deepspeed_fwd_bwd_share={"2": None})
    op = Op("optimizer.adam", "optimizer", "step", {"params": 500}, tags={
        "param_tensors": "1", "deepspeed_zero": "2", "engine_params": "800", "engine_further_microbatches": "2",
        "engine_stage_params": "1000"})
    assert "engine_microbatches" not in op_cost_parts(op, 0.0, cost)
    (note,) = unsplit_engine_notes(cost, [op], "cpu-x", "fp32")
    assert "ZeRO-2" in note and "llmperf profile --device cpu --dtype fp32" in note and "--name cpu-x" in note
    measured = replace(cost, deepspeed_fwd_bwd_share={"2": 0.5})
    assert op_cost_parts(op, 0.0, measured)["engine_microbatches"] == pytest.approx(
        2 * 0.5 * (PER_STEP_S + PER_PARAM_S * 1000))
    assert unsplit_engine_notes(measured, [op], "cpu-x", "fp32") == ()
    assert unsplit_engine_notes(cost, [replace(op, tags={**op.tags, "engine_further_microbatches": "0"})],
                                "cpu-x", "fp32") == ()


def test_the_file_s_samples_set_the_share_of_a_prediction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The share a prediction uses is the one of the file's own samples (fwd_bwd_share), not 1 - partition_fraction."""
    samples = [[5e5, 0.021, 0.008, 0.012, 0.005], [2e5, 0.010, 0.003, 0.007, 0.002]]  # extras 9 + 3, 3 + 1: 12 / 16
    monkeypatch.setenv("LLMPERF_HOME", str(_home(tmp_path, samples)))
    op = _optimizer_op(tmp_path, 2, 3)
    parts = op_cost_parts(op, 0.0, find_cpu_framework_cost("cpu-x", "fp32"))
    per_microbatch_s = 0.75 * (PER_STEP_S + PER_PARAM_S * int(op.tags["engine_stage_params"]))
    assert parts["engine_microbatches"] == pytest.approx(2 * per_microbatch_s, rel=1e-5)


def test_non_finite_samples_are_not_read_as_a_share() -> None:
    assert fwd_bwd_share({"samples": [[5e5, float("inf"), 0.008, 0.012, 0.005]], "partition_fraction": 0.25}) == 0.75


def test_the_share_is_the_readings_forward_backward_extra() -> None:
    """Samples [params, engine fwd+bwd, engine step, modelled fwd+bwd, modelled optimizer]: extras 9 + 3 ms in
    forward+backward, 3 + 1 in the step (a negative extra, the model above the engine, counts 0): 12 / 16."""
    samples = [[5e5, 0.021, 0.008, 0.012, 0.005], [2e5, 0.010, 0.003, 0.007, 0.002], [1e5, 0.004, 0.001, 0.005, 0.002]]
    assert fwd_bwd_share({"samples": samples, "partition_fraction": 0.9}) == pytest.approx(12 / 16)
    assert fwd_bwd_share({"samples": [], "partition_fraction": 0.25}) == 0.75  # no samples: 1 - f


def test_a_prediction_from_an_unsplit_file_says_what_it_left_out(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from llmperf_hook.predict import dispatch

    home = _home(tmp_path)
    path = home / "profiles" / "cpu-x" / FILE_NAME
    doc = json.loads(path.read_text())
    for engine in doc["dtypes"]["fp32"]["deepspeed_step"].values():
        del engine["partition_fraction"]
    path.write_text(json.dumps(doc))
    monkeypatch.setenv("LLMPERF_HOME", str(home))
    monkeypatch.setattr(dispatch, "_no_profile_warning", lambda *a: "no profile")  # the home's profile.json is a stub
    cost = find_cpu_framework_cost("cpu-x", "fp32")
    for accum, notes in ((2, 1), (1, 0)):
        graph, cluster = _job(tmp_path, 2, accum)
        warnings = dispatch._op_times(graph, cluster, "fp32", None, None, cost).warnings
        assert sum("ZeRO-2" in w and "micro-batch" in w for w in warnings) == notes, warnings
