"""The issue's CI test: a real 2-rank DeepSpeed ZeRO-1 job on CPU through `llmperf run --instrument 5`.

Every step of both ranks recorded, refinement applied (run ingested, calibration fitted and found by the
predictor's lookup), and the job's own output and exit code intact. ~15 s once DeepSpeed's shared-memory comm
op is in ~/.cache/torch_extensions (the first DeepSpeed job on a machine JIT-builds it, ~30 s more).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from instrument_helpers import TESTBED, read_records, run_session, steps_by_rank

SHAPE = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "64",
         "--max-position-embeddings", "64", "--micro-batch-size", "2", "--vocab-size", "512"]


def _ds_config(tmp_path: Path, stage: int) -> Path:
    path = tmp_path / f"ds_zero{stage}.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
                                "train_batch_size": 4, "zero_optimization": {"stage": stage},
                                "steps_per_print": 1000000}))
    return path


def _job(tmp_path: Path, stage: int, iters: int, port: int) -> list[str]:
    return ["deepspeed", "--num_gpus", "2", "--master_port", str(port), str(TESTBED / "train_gpt.py"),
            "--deepspeed_config", str(_ds_config(tmp_path, stage)), *SHAPE, "--train-iters", str(iters)]


@pytest.mark.slow
def test_deepspeed_zero1_two_ranks_through_llmperf_run(tmp_path: Path, child_env: dict[str, str],
                                                       deepspeed_port: int) -> None:
    run_dir = tmp_path / "run"
    # No override of the contention limit: on a busy CI machine the ranks wait for a core, and refine must
    # still calibrate (from the steps' CPU time, refine/contention.py) and say so.
    # A CPU job calibrates a CPU hardware only (refine_run.device_mismatch): this machine described as
    # `llmperf profile --device cpu` writes it, without the minutes of sampling.
    hardware = Path(child_env["LLMPERF_HOME"]) / "hardware" / "cpu-ci.yaml"
    hardware.parent.mkdir(parents=True, exist_ok=True)
    hardware.write_text("name: cpu-ci\npeak_TFLOPs: {fp32: 0.1, bf16: 0.05}\nmemory_bandwidth_GBps: 10\n"
                        "memory_capacity_GiB: 16\ndescription: this CPU measured by `llmperf profile --device cpu`\n")
    cmd = [sys.executable, "-m", "llmperf_hook", "run", "--hardware", "cpu-ci", "--instrument", "5", "--run-dir",
           str(run_dir), "--", *_job(tmp_path, 1, 8, deepspeed_port)]
    done = subprocess.run(cmd, env=child_env, capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("iter ") == 8 and "done: 8 steps" in done.stdout  # the job's own output, intact
    records = read_records(run_dir)
    assert steps_by_rank(records) == {0: [0, 1, 2, 3, 4], 1: [0, 1, 2, 3, 4]}
    assert {r["framework"] for r in records if r["kind"] == "step"} == {"deepspeed"}
    assert all(r["world_size"] == 2 for r in records)
    # each rank read the machine's speed once, after its last recorded step (in its end record), both ranks at once
    refs = [r["reference"] for r in records if r["kind"] == "end"]
    assert len(refs) == 2 and all(x["cpu_s"] > 0 and x["concurrent"] == 2 and x["where"] == "hook" for x in refs)
    prediction = json.loads((run_dir / "prediction.json").read_text())
    assert "predicted before" in done.stderr and "predicted after" in done.stderr, done.stderr[-2000:]
    if "contended run" in done.stderr:  # the run waited for a core: calibrated from its CPU time, said so
        assert "Calibrated from the CPU time per step" in done.stderr and "quiet-equivalent" in done.stderr
    _assert_calibrated(child_env, prediction)


def _assert_calibrated(env: dict[str, str], prediction: dict) -> None:
    """The job's calibration, as the predictor looks it up in the run's $LLMPERF_HOME (in this process: the lookup
    is memoised on the store file's path, size and mtime, so no other test's store answers)."""
    from llmperf_hook.refine.calibration import find_calibration

    cluster = prediction["cluster"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LLMPERF_HOME", env["LLMPERF_HOME"])
        found = find_calibration(cluster["gpu"], cluster["name"], prediction["config"]["framework"])
    assert found is not None and found.num_runs == 1 and found.step_time_scale > 0


def test_deepspeed_accumulation_counts_optimizer_steps(tmp_path: Path, child_env: dict[str, str],
                                                       deepspeed_port: int) -> None:
    """ZeRO-2, bf16, 2 micro-batches per step: engine.step() runs per micro-batch, one record per optimizer
    step; --stop-after ends the job with code 0 after that many optimizer steps."""
    ds = tmp_path / "ds_ga2.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2,
                              "train_batch_size": 2, "zero_optimization": {"stage": 2}, "bf16": {"enabled": True}}))
    argv = ["deepspeed", "--num_gpus", "1", "--master_port", str(deepspeed_port), str(TESTBED / "train_gpt.py"),
            "--deepspeed_config", str(ds), *SHAPE[:-4], "--micro-batch-size", "1", "--global-batch-size", "2",
            "--vocab-size", "512", "--bf16", "--train-iters", "50"]
    code = ("import json, os, sys\nfrom llmperf_hook.instrument.session import run_instrumented\n"
            f"sys.exit(run_instrumented({argv!r}, env=os.environ, steps=3, stop_after=4, run_dir={str(tmp_path / 'run')!r}))")
    done = subprocess.run([sys.executable, "-c", code], env=child_env, capture_output=True, text=True, timeout=300,
                          cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("iter ") == 3  # the 4th optimizer step ends the job inside engine.step()
    records = read_records(tmp_path / "run")
    assert steps_by_rank(records) == {0: [0, 1, 2]}
    assert {r["framework"] for r in records if r["kind"] == "step"} == {"deepspeed"}
    assert [r["num_steps"] for r in records if r["kind"] == "stop"] == [4]


@pytest.mark.slow
def test_deepspeed_zero3_bf16_profile_ops_records_collectives_in_the_phase_they_ran(
        tmp_path: Path, child_env: dict[str, str], deepspeed_port: int) -> None:
    """ZeRO-3, bf16, 2 ranks through `llmperf run --instrument 2 --profile-ops 1 --stop-after 3`, every parameter
    partitioned (persistence threshold 0) and gradients reduced in small buckets: ZeRO-3 fetches each module's
    parameters in the forward (all-gather, "fwd") and reduce-scatters gradients from its backward hooks ("bwd"),
    the last bucket after the backward ("step"). Before: every collective sample was "fwd"."""
    ds = tmp_path / "ds_zero3.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
                              "train_batch_size": 4, "bf16": {"enabled": True}, "steps_per_print": 1000000,
                              "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                                                    "reduce_bucket_size": 20000}}))
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "llmperf_hook", "run", "--instrument", "2", "--profile-ops", "1", "--stop-after", "3",
           "--run-dir", str(run_dir), "--", "deepspeed", "--num_gpus", "2", "--master_port", str(deepspeed_port),
           str(TESTBED / "train_gpt.py"), "--deepspeed_config", str(ds), *SHAPE, "--bf16", "--no-pipeline-parallel",
           "--train-iters", "20"]
    done = subprocess.run(cmd, env=child_env, capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert done.returncode == 0 and done.stdout.count("iter ") == 2, done.stderr[-3000:]
    records = read_records(run_dir)
    assert steps_by_rank(records) == {0: [0, 1, 2], 1: [0, 1, 2]}
    assert {r["framework"] for r in records if r["kind"] == "step"} == {"deepspeed"}
    for rank in (0, 1):
        comm = {(r["op_class"], r["phase"]) for r in records if r["kind"] == "op" and r["rank"] == rank
                and r["op_class"] in ("allgather", "reducescatter", "allreduce")}
        assert {("allgather", "fwd"), ("reducescatter", "bwd")} <= comm, comm
        assert ("reducescatter", "fwd") not in comm


PIPELINE_JOB = """
import argparse, torch, deepspeed
from deepspeed.pipe import PipelineModule
torch.set_num_threads(1)
ap = argparse.ArgumentParser()
ap.add_argument("--local_rank", type=int, default=0)
ap.parse_args()
deepspeed.init_distributed("gloo")
net = PipelineModule(layers=[torch.nn.Linear(16, 16) for _ in range(4)], num_stages=2,
                     loss_fn=lambda out, y: ((out - y) ** 2).mean())
engine, *_ = deepspeed.initialize(model=net, model_parameters=list(net.parameters()), config={
    "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "steps_per_print": 10 ** 6,
    "optimizer": {"type": "SGD", "params": {"lr": 0.01}}})
batches = iter(lambda: (torch.randn(2, 16), torch.randn(2, 16)), None)
for i in range(10):
    engine.train_batch(batches)
    print(f"iter {i} stage {engine.stage_id}", flush=True)  # one text write: print writes each argument apart
"""


@pytest.mark.slow
def test_pipeline_train_batch_is_the_step(tmp_path: Path, child_env: dict[str, str], deepspeed_port: int) -> None:
    """A 2-stage DeepSpeed PipelineEngine, 2 micro-batches per train_batch(): one record per train_batch() on each
    stage (its micro-batches' forwards, backwards and the optimizer step inside), owned by the pipeline layer
    (the torch optimizer step inside is not a step of its own); --stop-after stops both stages after the same one."""
    script = tmp_path / "pipe.py"
    script.write_text(PIPELINE_JOB)
    argv = ["deepspeed", "--num_gpus", "2", "--master_port", str(deepspeed_port), str(script)]
    done = run_session(tmp_path, child_env, argv, steps=3, stop_after=4)
    assert done.returncode == 0, done.stderr[-3000:]
    # both ranks print to one pipe, where a line's text and its newline can be two writes apart
    assert sorted(re.findall(r"iter \d+ stage \d", done.stdout)) == [
        f"iter {i} stage {s}" for i in range(3) for s in (0, 1)]  # the 4th train_batch ends the job
    records = read_records(tmp_path / "run")
    assert steps_by_rank(records) == {0: [0, 1, 2], 1: [0, 1, 2]}
    assert {r["framework"] for r in records if r["kind"] == "step"} == {"deepspeed-pipeline"}
    assert sorted((r["rank"], r["num_steps"]) for r in records if r["kind"] == "stop") == [(0, 4), (1, 4)]
