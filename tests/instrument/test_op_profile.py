"""--profile-ops: profiler events mapped onto the graph's op classes (synthetic and from a real window)."""

from __future__ import annotations

import sys
from pathlib import Path

from instrument_helpers import TRAIN_GPT, read_records, run_session

from llmperf_hook.instrument.op_profile import BACKWARD_PREFIX, ProfEvent, map_events


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


def test_profile_window_on_a_real_job(tmp_path: Path, child_env: dict[str, str]) -> None:
    argv = [sys.executable, str(TRAIN_GPT), "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
            "--seq-length", "32", "--vocab-size", "256", "--train-iters", "7"]
    done = run_session(tmp_path, child_env, argv, steps=3, profile_ops=2)
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


def test_job_ending_inside_the_profile_window_keeps_its_exit_code(tmp_path: Path, child_env: dict[str, str]) -> None:
    """3 timed steps, a 2-step window opened after them, and a job of only 3 steps: the window never closes
    on a step, so the hook closes it at exit (torch's profiler left running segfaults at interpreter teardown)."""
    argv = [sys.executable, str(TRAIN_GPT), "--num-layers", "1", "--hidden-size", "64", "--num-attention-heads", "4",
            "--seq-length", "32", "--vocab-size", "256", "--train-iters", "3"]
    done = run_session(tmp_path, child_env, argv, steps=3, profile_ops=2)
    assert done.returncode == 0 and "done: 3 steps" in done.stdout, done.stderr
    steps = [r for r in read_records(tmp_path / "run") if r["kind"] == "step"]
    assert [s["step"] for s in steps] == [0, 1, 2]
