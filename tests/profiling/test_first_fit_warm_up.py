"""A class's first-fit shapes past the sampling deadline are measured although the process's first call of its path
pays a one-time cost (sampler.warm_up). Under load 9 (28 Nov), `--ops gemm,layernorm --budget 0.35` measured gemm's
and LayerNorm forward's first fits and one LayerNorm backward: the process's first torch.autograd.grad (0.53 s of
CPU time, 3.3 s wall) was that class's first shape's first call, whose pace (7 calls, 23 s, past the 10 s a first fit
past the deadline is given) stopped it and set its class at 9063x its roofline, so the other shapes were refused.

The load is simulated: the clocks sampler and op_sampler read jump by that one-time cost on the first backward call
the process makes, as they did on the loaded machine; the deadline has passed when sampling starts."""

from __future__ import annotations

import math
import time
from types import SimpleNamespace

import pytest

from llmperf_hook.profile import op_sampler, plan, sampler
from llmperf_hook.profile.budget import plan_budget
from llmperf_hook.profile.features import RooflineConstants
from llmperf_hook.profile.profile_fit import unfitted_note

pytest.importorskip("torch")

ONE_TIME_WALL_S, ONE_TIME_CPU_S = 3.3, 0.53
"""The process's first autograd call in the loaded run (its note: 'first call took 3.3 s', '9063x its roofline' of a
5.9e-5 s roofline)."""
RC = RooflineConstants(peak_flop_per_s=7.4e10, memory_bandwidth_bytes_per_s=1.54e10, num_sms=1, dtype_bytes=4)
"""This machine's fp32 roofline on one thread (local_hardware.measure_roofline, 28 Nov)."""


class FirstCallCost:
    """Clocks that jump by the one-time cost when the process's first backward runner call is made."""

    def __init__(self) -> None:
        self.wall_s = self.cpu_s = 0.0
        self.paid = False
        self.clock = SimpleNamespace(perf_counter=lambda: time.perf_counter() + self.wall_s,
                                     process_time=lambda: time.process_time() + self.cpu_s)

    def runners(self, make_runner):
        def make(op_class, dims, bwd, dtype, device):
            run = make_runner(op_class, dims, bwd, dtype, device)

            def call():
                if bwd and not self.paid:
                    self.paid = True
                    self.wall_s, self.cpu_s = self.wall_s + ONE_TIME_WALL_S, self.cpu_s + ONE_TIME_CPU_S
                return run()
            return call
        return make


def test_first_fits_past_the_deadline_survive_a_first_call_s_one_time_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)  # op_sampler's CPU clock: process time, as profiled
    cost = FirstCallCost()
    monkeypatch.setattr(op_sampler, "make_runner", cost.runners(op_sampler.make_runner))
    monkeypatch.setattr(op_sampler, "time", cost.clock)
    monkeypatch.setattr(sampler, "time", cost.clock)
    monkeypatch.setattr(sampler, "_WARMED", set())  # a fresh process: nothing warmed
    budget = plan_budget(0.35, cost.clock.perf_counter() - 60.0, 0.0, cpu=True)  # ended 39 s ago
    deadline = sampler.SamplingDeadline(budget, {})
    specs = plan.fit_first(plan.design_specs(("layernorm",), plan.CPU_RANGES, sampler.DESIGN_PER_CLASS),
                           sampler.MIN_SAMPLES_TO_FIT)
    measured: dict[tuple[str, str], int] = {}

    def record(spec: plan.SampleSpec, time_s: float) -> None:
        measured[(spec.op_class, spec.phase)] = measured.get((spec.op_class, spec.phase), 0) + 1

    got = sampler._measure_all(specs, deadline, sampler.ProfileRequest(device="cpu", dtype="fp32"), RC, record)
    assert cost.paid, "the simulated one-time cost was never paid"
    assert deadline.stopped == {}, deadline.stopped  # no shape was judged by the one-time cost
    first_fit = sampler.MIN_SAMPLES_TO_FIT
    assert measured == {("layernorm", "fwd"): first_fit, ("layernorm", "bwd"): first_fit} and got == 2 * first_fit


def test_a_class_too_slow_for_a_first_fit_is_named_with_the_reason() -> None:
    """A class whose shapes are genuinely too slow for a first fit past the deadline (a shape of it stopped over its
    time: its class taken at 1e6x its roofline) is not measured, and the command says which and why."""
    budget = plan_budget(0.35, time.perf_counter() - 60.0, 0.0, cpu=True)
    deadline = sampler.SamplingDeadline(budget, {})
    deadline.stopped[("layernorm", "bwd")] = 1e6
    specs = [s for s in plan.fit_first(plan.design_specs(("layernorm",), plan.CPU_RANGES, sampler.DESIGN_PER_CLASS),
                                       sampler.MIN_SAMPLES_TO_FIT) if s.phase == "bwd"]
    got = sampler._measure_all(specs, deadline, sampler.ProfileRequest(device="cpu", dtype="fp32"), RC,
                               lambda spec, time_s: None)
    at_pace_s = sum(plan.estimate_seconds(s, RC, slowdown=1e6) for s in specs)
    assert got == 0 and deadline.refused.keys() == {("layernorm", "bwd")}, deadline.refused
    shapes, seconds = deadline.refused[("layernorm", "bwd")]
    assert shapes == len(specs) and seconds == pytest.approx(at_pace_s), deadline.refused
    refused = {f"{c}/{p}/fp32": v for (c, p), v in deadline.refused.items()}
    note = unfitted_note({"layernorm/bwd/fp32": 0}, "cpu", "box", refused, 0.35)
    assert f"layernorm/bwd/fp32: {len(specs)} shapes, about {at_pace_s:.0f} s" in note, note
    more_min = max(math.ceil(at_pace_s / 60), 1)
    assert "roofline" in note and f"--budget at least {more_min} min larger" in note, note
    assert f"--ops layernorm --budget {0.35 + more_min:g} --name box" in note, note
    assert "whatever the --budget" not in note, note  # not true of a class too slow for a first fit


def test_a_cuda_warm_up_is_the_smallest_shape_and_ends_before_the_first_timed_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA kernels are queued: the warm-up waits for its own (torch.cuda.synchronize), so neither its work nor a
    one-time cost paid on the device lands in the wall time of the first timed call, by which measure() judges a
    shape's pace (OverLimit). It runs the class's smallest shape, so a nearly full GPU is never asked for a large
    one, and an out-of-memory there frees the cache and is left to the sampled shapes' own measurements."""
    import torch

    events: list = []

    def make(op_class, dims, bwd, dtype, device):
        events.append((op_class, dict(dims), bwd, device))
        return lambda: events.append("ran")

    monkeypatch.setattr(op_sampler, "make_runner", make)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: events.append("synchronized"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: events.append("emptied"))
    monkeypatch.setattr(sampler, "_WARMED", set())
    sampler.warm_up("gemm", "bwd", "bf16", "cuda")
    sampler.warm_up("gemm", "bwd", "bf16", "cuda")  # once per process
    assert events == [("gemm", {"m": 512.0, "n": 256.0, "k": 256.0}, True, "cuda"), "ran", "synchronized"], events

    def out_of_memory(op_class, dims, bwd, dtype, device):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 MiB")

    events.clear()
    monkeypatch.setattr(op_sampler, "make_runner", out_of_memory)
    sampler.warm_up("layernorm", "fwd", "bf16", "cuda")
    assert events == ["emptied"], events
