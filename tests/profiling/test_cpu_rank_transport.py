"""profile/cpu_rank_transport.py: gloo's transport CPU per wire byte, its fit, its place in the framework-cost file,
and how predictions of CPU multi-rank jobs price it (predict/cpu_framework.py, graph/cpu_stages.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmperf_hook.graph.op import Collective, Op
from llmperf_hook.hardware.spec import ClusterSpec, HardwareSpec, NetworkTier
from llmperf_hook.predict.cpu_framework import (FILE_NAME, TRANSPORT_OP, CpuFrameworkCost, find_cpu_framework_cost,
                                                op_seconds, transport_wire_bytes)
from llmperf_hook.profile import cpu_framework_readings as cfr
from llmperf_hook.profile.cpu_rank_transport import TransportReader, fit_transport, transport_rows

WIRE = (7.4e6, 14.8e6, 11.2e6, 22.3e6, 7.4e6, 14.8e6)
"""The pair's wire bytes per step of the six engines (the 27 Nov fp32 reading, cpu_rank_transport docstring)."""


def _raw(per_byte_s: float, single_transport_s: float = 5e-4, noise=(1.0,) * 6) -> dict:
    """A reading whose pair spends per_byte_s per wire byte beyond the single process (rows: [wire bytes, calls,
    transport CPU s, process CPU s])."""
    single = [[0.0, 3, single_transport_s, 0.05] for _ in WIRE]
    pair = [[[w, 3, single_transport_s + per_byte_s * w * n, 0.05 + per_byte_s * w * n] for w, n in zip(WIRE, noise)]
            for _ in range(2)]
    return {"single": single, "pair": pair}


@settings(max_examples=30, deadline=None)
@given(st.floats(1e-11, 5e-9))
def test_the_fit_recovers_the_transport_cost_per_wire_byte(per_byte_s: float) -> None:
    fit = fit_transport(_raw(per_byte_s))
    assert fit["per_byte_s"] == pytest.approx(per_byte_s, rel=1e-6)
    assert [r["wire_bytes"] for r in fit["samples"]] == list(WIRE)


def test_the_single_process_transport_is_taken_out_and_the_term_is_never_negative() -> None:
    # World size 1's transport threads (gloo's local copies) are in the one-rank engine terms already.
    rows = transport_rows(_raw(8e-10, single_transport_s=2e-3))
    assert rows[0]["extra_s"] == pytest.approx(8e-10 * WIRE[0])
    below = _raw(0.0, single_transport_s=2e-3)
    below["pair"] = [[[w, c, t * 0.5, p] for w, c, t, p in rank] for rank in below["pair"]]
    assert fit_transport(below)["per_byte_s"] == 0.0
    assert fit_transport({"single": [[0, 0, 0, 0.05]], "pair": [[[0, 0, 0, 0.05]]] * 2}) == {"per_byte_s": 0.0,
                                                                                         "samples": []}


def test_one_disturbed_reading_of_three_does_not_move_the_median_fit() -> None:
    clean = [_raw(8e-10, noise=(1.02, 0.98, 1.0, 1.01, 0.99, 1.0)), _raw(8e-10)]
    disturbed = _raw(8e-10, noise=(3.0,) * 6)
    med = cfr.median_raw([_reading(t) for t in (clean[0], disturbed, clean[1])])["transport"]
    assert fit_transport(med)["per_byte_s"] == pytest.approx(8e-10, rel=0.02)
    assert fit_transport(disturbed)["per_byte_s"] == pytest.approx(2.4e-9)


def _reading(transport: dict | None) -> dict:
    """The rest of a reading, fixed: only the transport part matters here."""
    return {"tiny_s": [1e-3, 2e-3], "fwd_bwd_s": [0.01], "optimizer_s": [[1e-3, 5e-4]],
            "bias": {"ratio": 1.0, "samples": [{"shape": [1], "isolated_s": 1.0}]}, "transport": transport}


def test_a_reading_without_the_pair_leaves_the_term_out_and_the_profile_says_so() -> None:
    assert "transport" not in cfr.median_raw([_reading(None), _reading(None)])
    entry = {"readings": [{}] * 3, "deepspeed_step": {"0": {}}, "concurrency_slowdown": {"2": 1.0}}
    text = " ".join(cfr._entry_notes("fp32", entry))
    assert "gloo's transport CPU at world size 2" in text and "not measured" in text
    assert not cfr._entry_notes("fp32", {**entry, "rank_transport": {"per_byte_s": 8e-10}})


def test_a_transport_child_that_cannot_start_in_its_box_is_left_out() -> None:
    """A box too small for three DeepSpeed processes: the reader closes them all and reads nothing (the profile
    keeps its --budget; the file then says the term was not measured)."""
    import time

    t0 = time.monotonic()
    reader = TransportReader("fp32", 1, start_timeout_s=0.5)
    assert reader.children == [] and reader.reading(10.0) is None
    assert time.monotonic() - t0 < 6.0  # the three are ended together, not each waited for (CLOSE_TIMEOUT_S)


# ----- predict: the term priced on CPU multi-rank jobs -----

COST = CpuFrameworkCost(2e-5, 1.0, 5e-5, 4e-9, transport_per_byte_s=8e-10)


def test_wire_bytes_follow_the_ring_and_a_lone_rank_sends_nothing() -> None:
    ar = Op("ar", "allreduce", "step", {"bytes": 8 << 20}, collective=Collective("dp", 2, 2))
    ag = Op("ag", "allgather", "step", {"bytes": 8 << 20}, collective=Collective("dp", 4, 4))
    assert transport_wire_bytes(ar) == pytest.approx(8 << 20)  # 2 (n - 1) / n = 1 at two ranks
    assert transport_wire_bytes(ag, count=3) == pytest.approx(3 * 0.75 * (8 << 20))
    assert transport_wire_bytes(Op("ar1", "allreduce", "step", {"bytes": 1 << 20},
                                   collective=Collective("dp", 1, 1))) == 0.0
    assert transport_wire_bytes(Op("g", "gemm", "fwd", {"m": 8, "n": 8, "k": 8})) == 0.0


def test_the_transport_op_costs_its_wire_bytes_and_collectives_keep_the_comm_model() -> None:
    op = Op(TRANSPORT_OP, "deepspeed_bookkeeping", "step", {"wire_bytes": 10_000_000})
    assert op_seconds(op, 123.0, COST) == pytest.approx(8e-3)  # whatever the roofline said
    ar = Op("ar", "allreduce", "step", {"bytes": 1 << 20}, collective=Collective("dp", 2, 2))
    assert op_seconds(ar, 3e-3, COST) == 3e-3  # the wait: the comm model's, unchanged


def _home(tmp_path: Path, transport: float | None) -> Path:
    d = tmp_path / "profiles" / "cpu-t"
    d.mkdir(parents=True)
    (d / "profile.json").write_text("{}")
    entry = {"per_unit_s": 2e-5, "compute_scale": 1.0, "optimizer_per_tensor_s": 5e-5, "optimizer_per_param_s": 4e-9,
             "deepspeed_step": {"1": {"per_step_s": 1e-3, "per_param_s": 1e-8}}}
    if transport is not None:
        entry["rank_transport"] = {"per_byte_s": transport, "samples": []}
    (d / FILE_NAME).write_text(json.dumps({"dtypes": {"fp32": entry}}))
    return tmp_path


def _config(tmp_path: Path, ranks: int, accum: int = 1):
    from llmperf_hook.api import resolve_job

    ds = tmp_path / f"ds{ranks}{accum}.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": accum,
                              "zero_optimization": {"stage": 1}}))
    argv = ["deepspeed", "--num_gpus", str(ranks), "train.py", "--deepspeed_config", str(ds), "--num-layers", "2",
            "--hidden-size", "256", "--num-attention-heads", "4", "--seq-length", "128",
            "--max-position-embeddings", "128", "--micro-batch-size", "2", "--vocab-size", "1024",
            "--global-batch-size", str(2 * ranks * accum), "--no-pipeline-parallel"]
    return resolve_job(argv, {})[1]


def _cluster() -> ClusterSpec:
    tier = NetworkTier(2e9, 5e-5)
    return ClusterSpec("c", HardwareSpec("cpu-t", {"fp32": 3e10}, 5e9, 1 << 34), 2, tier, tier)


def _graph(cfg):
    from llmperf_hook.api import build_graph

    return build_graph(cfg, _cluster())


def test_a_two_rank_cpu_job_carries_its_wire_bytes_once_per_step(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(_home(tmp_path, 8e-10)))
    assert find_cpu_framework_cost("cpu-t", "fp32").transport_per_byte_s == 8e-10
    for accum in (1, 2):
        cfg = _config(tmp_path, 2, accum)
        stage, m = _graph(cfg).stages[0], cfg.batch.num_microbatches
        ops = [op for op in stage.step_ops if op.name == TRANSPORT_OP]
        assert len(ops) == 1
        expected = sum(transport_wire_bytes(op, b.count * m) for c in stage.chunks for b in c.blocks
                       for op in (*b.fwd, *b.bwd)) + sum(transport_wire_bytes(op) for op in stage.step_ops)
        # ZeRO-1 at two ranks: at least the gradients' all-reduce, 4 bytes per parameter, on the wire
        assert ops[0].dims["wire_bytes"] == round(expected) and ops[0].dims["wire_bytes"] >= 4 * stage.num_params
    assert not any(op.name == TRANSPORT_OP for op in _graph(_config(tmp_path, 1)).stages[0].step_ops)


def test_the_step_grows_by_the_priced_transport_and_only_where_it_was_measured(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llmperf_hook.predict.cpu_framework import apply_cpu_framework_cost
    from llmperf_hook.predict.dispatch import op_id

    steps, wire = {}, 0
    for name, transport in (("with", 8e-10), ("without", None)):
        monkeypatch.setenv("LLMPERF_HOME", str(_home(tmp_path / name, transport)))
        graph, cost = _graph(_config(tmp_path, 2)), find_cpu_framework_cost("cpu-t", "fp32")
        profile_s = {op_id(op): 1e-3 for op in graph.all_ops()}  # any operator profile: the same in both
        times = apply_cpu_framework_cost(profile_s, graph.all_ops(), cost, op_id)
        steps[name] = sum(times[op_id(op)] for op in graph.stages[0].step_ops)
        wire += sum(op.dims["wire_bytes"] for op in graph.stages[0].step_ops if op.name == TRANSPORT_OP)
    assert wire > 0 and steps["with"] - steps["without"] == pytest.approx(8e-10 * wire, rel=1e-6)


def test_a_small_box_does_not_start_the_transport_children(monkeypatch: pytest.MonkeyPatch) -> None:
    """With less than TRANSPORT_MIN_LEFT_S of the box left, the three DeepSpeed processes are not started (their
    share would not cover a start and would take the readings' time); with enough they are, and read every reading."""
    from llmperf_hook.profile import cpu_engine_cost as ce
    from llmperf_hook.profile import cpu_rank_transport as crt

    class Idle:
        def __init__(self, *args, **kwargs) -> None:
            pass

        def reading(self, *args) -> None:
            return None

        def close(self) -> None:
            pass

    class Local(Idle):
        def reading(self, hardware: str, end_s: float) -> dict:
            return {"r": 1}

    started = []

    class Transport(Idle):
        def __init__(self, dtype: str, threads: int, start_timeout_s: float, **plan) -> None:
            started.append(start_timeout_s)

        def reading(self, timeout_s: float) -> dict:
            return {"single": [], "pair": [[], []]}

    for target, name, value in ((cfr, "fixed_parts", lambda dtype, hw, plan: None), (cfr, "_InProcess", Local),
                                (ce, "EngineReader", Idle), (ce, "ConcurrencyReader", Idle),
                                (crt, "TransportReader", Transport),
                                (cfr, "summarize", lambda raws, fixed, dtype, loads, took_s: {"raws": raws})):
        monkeypatch.setattr(target, name, value)
    small = cfr.measure_framework_overhead("cpu-x", "fp32", 1, time_box_s=cfr.TRANSPORT_MIN_LEFT_S - 5)
    assert not started and all(r["transport"] is None for r in small["raws"])
    large = cfr.measure_framework_overhead("cpu-x", "fp32", 1, time_box_s=cfr.TRANSPORT_MIN_LEFT_S + 30)
    box_s = cfr.TRANSPORT_MIN_LEFT_S + 30
    assert started and started[0] == pytest.approx(cfr.TRANSPORT_START_SHARE * box_s, rel=0.01)
    assert len(large["raws"]) == cfr.MAX_READINGS and all(r["transport"] for r in large["raws"])


def test_message_bytes_are_the_graphs_full_buffer() -> None:
    """The wrapped calls' message bytes as graph/op.py counts them: the reduced tensor, a gather's or scatter's full
    buffer (the larger of output and input, or a list's sum)."""
    import torch

    from llmperf_hook.profile.cpu_rank_transport import _message_bytes

    full, shard = torch.zeros(1000), torch.zeros(500)
    assert _message_bytes((full,), {"op": "sum"}) == 4000  # all_reduce(tensor)
    assert _message_bytes((full, shard), {}) == 4000  # all_gather_into_tensor(output, input)
    assert _message_bytes((shard,), {"input_tensor": full}) == 4000  # reduce_scatter_tensor(output, input=...)
    assert _message_bytes(([shard, shard], shard), {}) == 4000  # all_gather(list, tensor)
    assert _message_bytes((torch.zeros(10, dtype=torch.bfloat16),), {}) == 20


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_a_child_that_times_out_is_interrupted_before_it_is_killed(tmp_path: Path, sigint: str) -> None:
    """A child holding a lock file in try/finally (as torch's FileBaton does while DeepSpeed loads its shm op) and
    not answering: the reader's timeout ends it with SIGINT first, so its `finally` removes the file (SIGKILL left
    it, and every later DeepSpeed CPU process waited for it for ever). Also when the profile runs in the background
    of a non-interactive shell, which starts it with SIGINT ignored (its children inherit that: the CI run of 20:21
    failed here)."""
    import signal

    from llmperf_hook.profile.cpu_engine_cost import MARK, ChildFailed, Reader

    lock = tmp_path / "lock"
    code = (f"import pathlib, time; lock = pathlib.Path({str(lock)!r}); lock.touch()\n"
            f"try:\n    print({MARK!r} + '\"ready\"', flush=True); time.sleep(60)\n"
            f"finally:\n    lock.unlink()")
    before = signal.signal(signal.SIGINT, signal.SIG_IGN if sigint == "ignored" else signal.default_int_handler)
    try:
        child = Reader(code, 1)
    finally:
        signal.signal(signal.SIGINT, before)
    child.started(60.0)
    assert lock.exists()
    with pytest.raises(ChildFailed):
        child.receive(0.5)
    assert child.proc.poll() is not None and not lock.exists()
