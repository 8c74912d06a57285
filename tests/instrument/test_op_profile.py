"""--profile-ops: profiler events mapped onto the graph's op classes (synthetic and from a real window)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from instrument_helpers import TRAIN_GPT, make_child_env, read_records, run_session

from llmperf_hook.instrument.op_profile import (BACKWARD_PREFIX, STEP_END_MARK, ProfEvent, map_events,
                                               up_to_last_step_end)


def _ev(name: str, shapes: list, seconds: float, seq: int = -1, parent: ProfEvent | None = None, **kw) -> ProfEvent:
    ev = ProfEvent(name, shapes, ["float"] * len(shapes), seconds, seq, parent=parent, **kw)
    if parent is not None:
        parent.children.append(ev)
    return ev


def test_linear_forward_and_its_backward_by_sequence_number() -> None:
    lin = _ev("aten::linear", [[2, 8, 64], [256, 64], [256]], 3e-5, seq=10)
    addmm = _ev("aten::addmm", [[256], [16, 64], [64, 256]], 2.5e-5, seq=12, parent=lin)
    bwd = _ev(BACKWARD_PREFIX + "AddmmBackward0", [], 5e-5, seq=12)
    tbwd = _ev(BACKWARD_PREFIX + "TBackward0", [], 1e-6, seq=11)
    inner = _ev("aten::mm", [[16, 256], [256, 64]], 2e-5, parent=bwd)  # inside backward: not a forward sample
    samples = {(s["op_class"], s["phase"]): s for s in map_events([lin, addmm, bwd, tbwd, inner])}
    assert set(samples) == {("gemm", "fwd"), ("gemm", "bwd")}
    assert samples[("gemm", "fwd")]["dims"] == {"m": 16, "n": 256, "k": 64}
    assert samples[("gemm", "fwd")]["seconds"] == 3e-5 and samples[("gemm", "bwd")]["seconds"] == 5e-5  # seq 11 is not ours


def test_shapes_to_dims_for_each_class() -> None:
    events = [
        _ev("aten::scaled_dot_product_attention", [[2, 8, 128, 64], [2, 2, 128, 64], [2, 2, 128, 64]], 1e-4,
            concrete=[None, None, None, None, 0.0, True]),
        _ev("aten::layer_norm", [[4, 128, 512], [], [512], [512]], 1e-5),
        _ev("aten::gelu", [[4, 128, 2048], []], 1e-5),
        _ev("aten::add", [[4, 128, 512], [4, 128, 512], []], 1e-6),
        _ev("aten::add", [[4, 128, 512], [128, 512], []], 1e-6),  # broadcast (position embedding): not residual
        _ev("aten::embedding", [[50304, 512], [4, 128]], 1e-5),
        _ev("aten::cross_entropy_loss", [[512, 50304], [512]], 1e-3),
        _ev("gloo:all_reduce", [[1000000]], 1e-3),
    ]
    opt = _ev("Optimizer.step#AdamW.step", [], 1e-3)
    _ev("aten::addcdiv_", [[512, 512], [512, 512], [512, 512]], 1e-5, parent=opt)
    _ev("aten::addcdiv_", [[512], [512], [512]], 1e-6, parent=opt)
    got = {s["op_class"]: (s["phase"], s["dims"]) for s in map_events([*events, opt])}
    assert got == {
        "attention": ("fwd", {"b": 2, "s": 128, "heads": 8, "kv_heads": 2, "head_dim": 64, "causal": 1}),
        "layernorm": ("fwd", {"tokens": 512, "hidden": 512}),
        "gelu": ("fwd", {"elements": 4 * 128 * 2048}),
        "residual_add": ("fwd", {"elements": 4 * 128 * 512}),
        "embedding": ("fwd", {"tokens": 512, "vocab": 50304, "hidden": 512}),
        "cross_entropy": ("fwd", {"tokens": 512, "vocab": 50304}),
        "allreduce": ("fwd", {"bytes": 4_000_000}),
        "optimizer": ("step", {"params": 512 * 512 + 512}),
    }


def test_repeated_ops_become_one_sample_with_median_and_count() -> None:
    events = [_ev("aten::gelu", [[1024]], t) for t in (1e-5, 3e-5, 2e-5)]
    (sample,) = map_events(events)
    assert sample["count"] == 3 and sample["seconds"] == 2e-5


def test_profile_window_on_a_real_job(real_jobs: dict[str, tuple[Path, Future]]) -> None:
    tmp_path, future = real_jobs["window"]
    done = future.result()
    assert done.returncode == 0 and "done: 7 steps" in done.stdout, done.stderr
    records = read_records(tmp_path / "run")
    steps = [r for r in records if r["kind"] == "step"]
    assert [(s["step"], s["profiled"]) for s in steps] == [(0, False), (1, False), (2, False), (3, True), (4, True)]
    ops = {(r["op_class"], r["phase"]): r for r in records if r["kind"] == "op"}
    for key in [("gemm", "fwd"), ("gemm", "bwd"), ("attention", "fwd"), ("attention", "bwd"), ("layernorm", "fwd"),
                ("gelu", "fwd"), ("embedding", "fwd"), ("cross_entropy", "fwd"), ("optimizer", "step")]:
        assert key in ops, sorted(ops)
    assert ops[("attention", "fwd")]["dims"] == {"b": 2, "s": 32, "heads": 4, "kv_heads": 4, "head_dim": 16, "causal": 1}
    assert ops[("attention", "fwd")]["count"] == 2 * 2  # 2 layers x 2 profiled steps
    assert "op samples: " in done.stderr  # refine ingested them
    assert "USDT:" not in done.stderr  # torch 2.13's Kineto prints one at the window's start and stop


def test_job_ending_inside_the_profile_window_keeps_its_exit_code(real_jobs: dict[str, tuple[Path, Future]]) -> None:
    """3 timed steps, a 2-step window opened after them, and a job of only 3 steps: the window never closes
    on a step, so the hook closes it at exit (torch's profiler left running segfaults at interpreter teardown)."""
    tmp_path, future = real_jobs["ends_inside"]
    done = future.result()
    assert done.returncode == 0 and "done: 3 steps" in done.stdout, done.stderr
    steps = [r for r in read_records(tmp_path / "run") if r["kind"] == "step"]
    assert [s["step"] for s in steps] == [0, 1, 2]
    assert "USDT:" not in done.stderr  # the window abandoned at exit: its stop printed nothing either


SHORT_JOB = """
import sys, torch
torch.set_num_threads(1)
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(int(sys.argv[1])):
    model(torch.randn(4, 8)).sum().backward(); opt.step(); opt.zero_grad()
with torch.no_grad():
    model(torch.randn(64, 8))  # an evaluation after training: in no step
print("trained")
"""


def _real_job(folder: Path, name: str) -> subprocess.CompletedProcess:
    """One of the three jobs below, run through run_instrumented in `folder` (its own $LLMPERF_HOME)."""
    shape = ["--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32", "--vocab-size", "256"]
    if name == "window":
        argv = [sys.executable, str(TRAIN_GPT), "--num-layers", "2", *shape, "--train-iters", "7"]
        return run_session(folder, make_child_env(folder), argv, steps=3, profile_ops=2)
    if name == "ends_inside":
        argv = [sys.executable, str(TRAIN_GPT), "--num-layers", "1", *shape, "--train-iters", "3"]
        return run_session(folder, make_child_env(folder), argv, steps=3, profile_ops=2)
    script = folder / "job.py"
    script.write_text(SHORT_JOB)
    return run_session(folder, make_child_env(folder), [sys.executable, str(script), "5"], steps=3, profile_ops=10)


@pytest.fixture(scope="module")
def real_jobs(tmp_path_factory) -> Iterator[dict[str, tuple[Path, Future]]]:
    """The three real jobs of this module, each in a folder of its own, run side by side (one-thread children the
    tests only wait on: one at a time they left the second core idle): {name: (folder, future of its session)}.
    Each test waits for its own, so one that fails or times out fails alone."""
    with ThreadPoolExecutor(3) as pool:
        jobs = {}
        for name in ("window", "ends_inside", "longer_window"):
            folder = tmp_path_factory.mktemp(f"op-profile-{name}")
            jobs[name] = (folder, pool.submit(_real_job, folder, name))
        yield jobs


def test_profile_window_longer_than_the_job_maps_the_steps_it_had(real_jobs: dict[str, tuple[Path, Future]]) -> None:
    """--instrument 3 --profile-ops 10 on a 5-step job: the window is open for steps 3 and 4 when the job ends.
    Their ops are sampled at exit (before: the window was dropped, no op record at all), and the evaluation the
    script ran after its last step is not (it began after the last step-end mark)."""
    tmp_path, future = real_jobs["longer_window"]
    done = future.result()
    assert done.returncode == 0 and done.stdout == "trained\n", done.stderr[-2000:]
    records = read_records(tmp_path / "run")
    assert [(r["step"], r["profiled"]) for r in records if r["kind"] == "step"] == [
        (0, False), (1, False), (2, False), (3, True), (4, True)]
    gemms = {(r["phase"], r["dims"]["m"]): r for r in records if r["kind"] == "op" and r["op_class"] == "gemm"}
    assert set(gemms) == {("fwd", 4), ("bwd", 4)}, sorted(gemms)  # no m=64: the evaluation is no step's
    assert gemms[("fwd", 4)]["count"] == 2 and gemms[("fwd", 4)]["profile_steps"] == 2
    assert "USDT:" not in done.stderr


def test_events_after_the_last_step_end_are_left_out() -> None:
    step = _ev("aten::linear", [[4, 8], [8, 8]], 1e-5, start_us=10.0)
    child = _ev("aten::addmm", [[4, 8], [8, 8]], 1e-5, parent=step, start_us=11.0)
    mark = _ev(STEP_END_MARK, [], 0.0, start_us=20.0)
    after = _ev("aten::linear", [[64, 8], [8, 8]], 1e-5, start_us=30.0)
    late_child = _ev("aten::mm", [[4, 8], [8, 8]], 1e-5, parent=step, start_us=25.0)
    kept = up_to_last_step_end([step, child, mark, late_child, after])
    assert kept == [step, child, mark] and step.children == [child]
    assert up_to_last_step_end([step, child]) == []  # no step ended in the window: nothing is a step's


def _comm(name: str, shapes: list, dtypes: list, seconds: float, start_us: float) -> ProfEvent:
    return ProfEvent(name, shapes, dtypes, seconds, start_us=start_us)


def test_a_gloo_collective_is_one_sample_with_the_launchs_class_and_whole_buffer() -> None:
    """Shapes as torch.profiler records them on gloo (torch 2.13, world of 2): the c10d launch on the calling
    thread (output first; TensorList arguments without shapes) and the backend's work in a worker thread, whose
    time is the collective's. Before: both sampled (the all-gather twice, once at its input's size; every
    TensorList all-reduce as a 4-byte one of dtype 'TensorList'), and a reduce-scatter as an all-reduce."""
    events = [
        _comm("c10d::allreduce_", [[], [], [], [], [], []], ["TensorList", "", "", "", "Scalar", "Scalar"], 1e-5, 0),
        _comm("gloo:all_reduce", [[1000]], ["float"], 2e-3, 5),
        _comm("c10d::_allgather_base_", [[2000], [1000], [], [], []], ["float", "float", "", "Scalar", "Scalar"], 1e-5, 10),
        _comm("gloo:all_gather", [[1000]], ["float"], 3e-3, 15),
        _comm("c10d::_reduce_scatter_base_", [[500], [1000], [], [], [], []],
              ["c10::BFloat16", "c10::BFloat16", "", "", "Scalar", "Scalar"], 1e-5, 20),
        _comm("gloo:all_reduce", [[1000]], ["c10::BFloat16"], 4e-3, 25),
        _comm("c10d::allreduce_", [[], []], ["TensorList", ""], 1e-5, 30),  # a 0-dim tensor (DeepSpeed's norm)
        _comm("gloo:all_reduce", [[]], ["float"], 1e-4, 35),
    ]
    got = sorted((s["op_class"], s["dims"]["bytes"], s["dtype"], s["seconds"], s["count"]) for s in map_events(events))
    assert got == [("allgather", 8000, "fp32", 3e-3, 1), ("allreduce", 4, "fp32", 1e-4, 1),
                   ("allreduce", 4000, "fp32", 2e-3, 1), ("reducescatter", 2000, "bf16", 4e-3, 1)]


def test_unpaired_collectives_fall_back_to_the_work_events_alone() -> None:
    """A launch whose work the window missed (it started before the window): the counts differ, each work event
    is sampled by itself and no launch is."""
    events = [_comm("c10d::_allgather_base_", [[2000], [1000]], ["float", "float"], 1e-5, 0),
              _comm("c10d::allreduce_", [[]], ["TensorList"], 1e-5, 1),
              _comm("gloo:all_reduce", [[1000]], ["float"], 2e-3, 2)]
    assert [(s["op_class"], s["dims"]) for s in map_events(events)] == [("allreduce", {"bytes": 4000})]


def _at(name: str, start_us: float, end_us: float, parent: ProfEvent | None = None, shapes: list | None = None,
        dtypes: list | None = None) -> ProfEvent:
    ev = ProfEvent(name, shapes or [], dtypes or [], (end_us - start_us) / 1e6, parent=parent, start_us=start_us,
                   end_us=end_us)
    if parent is not None:
        parent.children.append(ev)
    return ev


def _gather(start_us: float, numel: int, parent: ProfEvent | None = None) -> list[ProfEvent]:
    """A gloo all-gather as the profiler records it: the c10d launch, then the backend's work (worker thread)."""
    return [_at("c10d::_allgather_base_", start_us, start_us + 1, parent, [[numel], [numel // 2]], ["float", "float"]),
            _at("gloo:all_gather", start_us + 0.5, start_us + 3, None, [[numel // 2]], ["float"])]


def test_collectives_get_the_phase_they_ran_in() -> None:
    """Two profiled steps of a ZeRO job on gloo. Before: every collective was a "fwd" sample. A parameter fetch
    between forward ops is "fwd"; a reduce from a gradient hook (inside a backward node) "bwd"; the gradient
    all-reduce after the last backward node and the parameter all-gather after the optimizer "step"; the next
    step's first fetch, after the hook's step-end mark and before any forward op, "fwd"."""
    from llmperf_hook.instrument.op_profile import STEP_END_MARK

    events = [_at("aten::linear", 0, 10, shapes=[[2, 8, 64], [256, 64], [256]]), *_gather(12, 1000)]
    node = _at(BACKWARD_PREFIX + "torch::autograd::AccumulateGrad", 20, 40)
    events += [node, *_gather(25, 2000, parent=node), *_gather(45, 3000),
               _at("Optimizer.step#Adam.step", 50, 60), *_gather(62, 4000), _at(STEP_END_MARK, 70, 70),
               *_gather(71, 5000), _at("aten::linear", 80, 90, shapes=[[2, 8, 64], [256, 64], [256]])]
    phases = {s["dims"]["bytes"]: s["phase"] for s in map_events(events) if s["op_class"] == "allgather"}
    assert phases == {4000: "fwd", 8000: "bwd", 12000: "step", 16000: "step", 20000: "fwd"}


def test_a_collective_inside_a_backward_node_is_sampled_on_nccl_too() -> None:
    """NCCL records its work event on the calling thread, under the c10d launch: from a gradient hook both sit
    inside a backward node, and the sample was dropped as part of that backward."""
    node = _at(BACKWARD_PREFIX + "torch::autograd::AccumulateGrad", 0, 50)
    launch = _at("c10d::allreduce_", 5, 30, node, [[]], ["TensorList"])
    work = _at("nccl:all_reduce", 6, 29, launch, [[1024]], ["c10::BFloat16"])
    (sample,) = [s for s in map_events([node, launch, work]) if s["op_class"] == "allreduce"]
    assert (sample["phase"], sample["dims"], sample["count"]) == ("bwd", {"bytes": 2048}, 1)
