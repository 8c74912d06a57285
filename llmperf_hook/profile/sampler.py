"""`llmperf profile` for operators: plan, measure within the budget (resumable), fit, write the profile.

    run_profile(ProfileRequest(device="cpu", budget_min=3, dtype="fp32"))

Samples go to the store (source "sampler", with the fingerprint and library versions) as they are measured,
so an interrupted run resumes where it stopped: shapes this device already stored for this (name, dtype) are
skipped (_done_keys).
Then one regressor per (op class, direction) is fitted from all stored samples of this device and written to
$LLMPERF_HOME/profiles/NAME/, and the measured peaks to $LLMPERF_HOME/hardware/NAME.yaml (profile_fit.py). The
--budget is one deadline for all of it (budget.py).
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import sqlite3
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np

from llmperf_hook.errors import UsageError
from llmperf_hook.profile import plan as plans
from llmperf_hook.profile.build_profile import Samples, library_versions
from llmperf_hook.profile.features import REQUIRED_DIMS, RooflineConstants, build_features
from llmperf_hook.profile.adaptive import most_uncertain
from llmperf_hook.profile.budget import ProfileBudget, plan_budget
from llmperf_hook.profile.budget import describe as describe_budget
from llmperf_hook.profile.profile_fit import (FIRST_FIT_MAX_SAMPLE_S, MIN_SAMPLES_TO_FIT,  # noqa: F401
                                              UNFUSED_CLASSES, ProfileResult, fit_and_write, measures_framework)
from llmperf_hook.resources import llmperf_home
from llmperf_hook.store import OpSampleRecord, Store, dims_key, open_store

DESIGN_PER_CLASS = 32
MAX_FAILURES_PER_CLASS = 3
"""An op class whose runner fails (not out of memory) this often is skipped for the rest of the run."""


@dataclass(frozen=True)
class ProfileRequest:
    """What `llmperf profile` was asked."""

    device: str = "cpu"
    budget_min: float = 3.0
    dtype: str = "fp32"
    ops: tuple[str, ...] = ()
    """Op classes to sample (empty = the device's default set)."""
    name: str | None = None
    threads: int = 1
    job_argv: tuple[str, ...] = ()
    """`--for -- <command>`: sample this job's shapes first."""
    env: Mapping[str, str] = field(default_factory=dict)
    store_path: Path | None = None
    job_model: str | None = None
    """--model PRESET|FILE for a `--for` job whose script states no Megatron-style model shape."""
    job_nnodes: int | None = None
    """--nnodes for a `--for` job (overrides its launcher's)."""
    job_nproc_per_node: int | None = None
    """--nproc-per-node for a `--for` job whose launcher does not say (deepspeed without --num_gpus)."""
    started_s: float | None = None
    """time.perf_counter() when the command started: the budget's clock (profile/budget.py); None = now."""


class Progress:
    """A one-line progress bar on stderr."""

    def __init__(self, total: int, budget_s: float) -> None:
        self.total, self.budget_s, self.t0, self.done = total, budget_s, time.perf_counter(), 0
        self.shown = 0.0

    def step(self, label: str) -> None:
        self.done += 1
        now = time.perf_counter()
        if now - self.shown < 0.5 and self.done < self.total:  # redraw at most twice a second
            return
        self.shown = now
        frac = self.done / max(self.total, 1)
        bar = "#" * int(frac * 30)
        used = time.perf_counter() - self.t0
        sys.stderr.write(f"\r[{bar:<30s}] {self.done}/{self.total} {used:5.0f}/{self.budget_s:.0f}s {label[:40]:<40s}")
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\n")


def _validate(req: ProfileRequest) -> tuple[str, ...]:
    if req.device not in ("cpu", "cuda"):
        raise UsageError(f"--device {req.device!r}: use cpu or cuda.")
    if req.name is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", req.name):
        raise UsageError(f"--name {req.name!r}: use letters, digits, '.', '_' and '-' only (it names "
                         f"$LLMPERF_HOME/profiles/NAME and hardware/NAME.yaml).")
    if not (0 < req.budget_min < float("inf")):  # nan and inf too: the budget bounds the run
        raise UsageError(f"--budget {req.budget_min}: the budget (wall-clock minutes for the whole command) must be a "
                         f"positive, finite number of minutes (default 3).")
    if req.threads < 1:
        raise UsageError(f"--threads {req.threads}: the CPU threads per rank must be at least 1 (default 1, the "
                         f"one thread per rank a CPU training job runs).")
    from llmperf_hook.profile.local_hardware import usable_cpus

    usable = usable_cpus()
    if req.device == "cpu" and req.threads > usable:
        # More threads than CPUs time the OS's time-slicing of them, not the CPU: every sample and the peak
        # come out slower than any job with one thread per CPU runs, and the profile is named for that setting.
        raise UsageError(f"--threads {req.threads}: this process may run on {usable} CPU(s) (its affinity mask and "
                         f"cgroup CPU quota), so {req.threads} threads would time their own oversubscription. Give "
                         f"--threads {usable} or fewer (the threads of one rank of the CPU job the profile is for; "
                         f"default 1).")
    ops = req.ops or (plans.CPU_DEFAULT_OPS if req.device == "cpu" else tuple(plans.GPU_RANGES))
    unknown = [o for o in ops if o not in plans.CPU_RANGES]
    if unknown:
        raise UsageError(f"--ops {','.join(unknown)}: unknown op class{_did_you_mean(unknown)}; choose from "
                         f"{', '.join(plans.CPU_RANGES)} (comma-separated, e.g. --ops gemm,layernorm).")
    if req.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageError("--device cuda: torch sees no CUDA device here. Use --device cpu or run on a GPU node.")
    return tuple(ops)


def _did_you_mean(unknown: Sequence[str]) -> str:
    """' (layernrom -> layernorm)' for the names close to an op class (a typo, layer_norm, cross-entropy), and the
    separator when one holds a space ('gemm layernorm' quoted: the list is comma-separated)."""
    import difflib

    close = {o: difflib.get_close_matches(o.replace("-", "_"), list(plans.CPU_RANGES), n=1, cutoff=0.7)
             for o in unknown if " " not in o.strip()}
    hints = [f"{o} -> {m[0]}" for o, m in close.items() if m]
    if any(" " in o for o in unknown):
        hints.append("op classes are separated by commas, not spaces")
    return f" ({'; '.join(hints)})" if hints else ""


def _specs(req: ProfileRequest, ops: Sequence[str], rc: RooflineConstants, name: str) -> list[plans.SampleSpec]:
    specs: list[plans.SampleSpec] = []
    if req.job_argv:
        job = plans.job_specs(req.job_argv, req.env, _local_cluster(name, rc), req.job_model, nnodes=req.job_nnodes,
                              nproc_per_node=req.job_nproc_per_node)
        specs += [s for s in job if s.op_class in ops]
        if req.ops and job and not specs:  # --ops gelu --for a SwiGLU job: its shapes were dropped without a word
            sys.stderr.write(f"note: the --for job runs none of --ops {','.join(req.ops)} (its op classes: "
                             f"{', '.join(sorted({s.op_class for s in job}))}), so none of its shapes are sampled; "
                             f"only the space-filling design of those classes is\n")
    ranges = ranges_for(req.device)
    # The design's first round comes group by group, so a short budget still fits the leading classes.
    specs += plans.fit_first(plans.design_specs(ops, ranges, DESIGN_PER_CLASS), MIN_SAMPLES_TO_FIT)
    return specs + plans.aligned_specs(ops, ranges)  # power-of-two shapes, after the design (plan.ALIGNED_CLASSES)


def ranges_for(device: str) -> Mapping[str, Mapping[str, tuple[float, float]]]:
    """The shape ranges sampled on `device`: plan.CPU_RANGES on the CPU, plan.GPU_RANGES on CUDA."""
    return plans.CPU_RANGES if device == "cpu" else plans.GPU_RANGES


def _local_cluster(name: str, rc: RooflineConstants):
    from llmperf_hook.hardware.spec import ClusterSpec, HardwareSpec, NetworkTier

    hw = HardwareSpec(name, {"fp32": rc.peak_flop_per_s, "bf16": rc.peak_flop_per_s, "fp16": rc.peak_flop_per_s},
                      rc.memory_bandwidth_bytes_per_s, 1 << 40)
    tier = NetworkTier(10e9, 10e-6)
    return ClusterSpec("local", hw, 8, tier, tier)


def _record(store: Store, req: ProfileRequest, name: str, spec: plans.SampleSpec, time_s: float,
            fp: str, versions: Mapping[str, str]) -> None:
    store.record_op_samples([OpSampleRecord(name, req.dtype, spec.op_class, spec.phase, spec.dims, time_s,
                                            "sampler", fp, versions)])


def _first_fit_classes(req: ProfileRequest, specs: Sequence[plans.SampleSpec]) -> frozenset[str] | None:
    """The classes given their first fit past the deadline (None: every class sampled): with --for and no --ops, the
    job's own. The design's other default classes are sampled while the budget lasts, never past it: `--budget 0.4
    --for` a GPT job ran 46 s of 24 (28 Nov, load 8-11) giving first fits to RMSNorm, SwiGLU, RoPE it never runs."""
    job = frozenset(s.op_class for s in specs if s.origin in ("job", "neighbour"))
    return job if req.job_argv and not req.ops and job else None


OVER_DEADLINE_S = 10.0
"""Wall seconds a shape may run past the sampling deadline (its own estimate, when longer) before its measurement is
stopped after its first call (limit_s, op_sampler.OverLimit): the estimates are a quiet machine's and 2-3x short at
load 8 (/work/notes/h190.md), which this allows; one shape that takes minutes past it (a bf16 GEMM backward: 549 s of
sampling where 74 s were left, /work/notes/h182.md) it does not."""


class SamplingDeadline:
    """When sampling must end: earlier as more classes have the samples to be fitted, whose fits the budget keeps
    time for (budget.ProfileBudget.sampling_end_s); a fixed time without a budget. A class with fewer than
    MIN_SAMPLES_TO_FIT samples (of `first_fit_classes`, None: any) is still given its first fit's shapes past the
    deadline (allows), said in the plan line (overrun_s)."""

    def __init__(self, budget: ProfileBudget | None, counts: Mapping[tuple[str, str], int], fixed_s: float = 0.0,
                 other_groups: int = 0, first_fit_classes: frozenset[str] | None = None) -> None:
        self.budget, self.counts, self.fixed_s = budget, dict(counts), fixed_s
        self.other_groups = other_groups
        """Groups of other dtypes in the store that will be refitted too."""
        self.first_fit_classes = first_fit_classes
        self.overrun_s = 0.0
        """Seconds of sampling past the deadline for first fits."""
        self.stopped: dict[tuple[str, str], float] = {}
        """{(op class, phase): slowdown over the roofline of its first call} of the shapes stopped over limit_s: that
        class's estimates are taken at it at least for the rest of the run."""
        self.refused: dict[tuple[str, str], tuple[int, float]] = {}
        """{(op class, phase): (its first-fit shapes not measured past the deadline, each estimated over
        FIRST_FIT_MAX_SAMPLE_S; their estimated seconds together)} (profile_fit.unfitted_note says them)."""

    def allows(self, spec: plans.SampleSpec, estimate_s: float, now_s: float | None = None) -> bool:
        """Whether `spec`, estimated at `estimate_s`, is measured now (`now_s`: a time.perf_counter() time the plan
        simulates, expected_run)."""
        now = time.perf_counter() if now_s is None else now_s
        if now + estimate_s <= self.with_spec_s(spec):
            return True
        first_fit = self.budget is not None and self.counts.get((spec.op_class, spec.phase), 0) < MIN_SAMPLES_TO_FIT \
            and (self.first_fit_classes is None or spec.op_class in self.first_fit_classes)
        if first_fit and estimate_s <= FIRST_FIT_MAX_SAMPLE_S:
            self.overrun_s = max(self.overrun_s, now + estimate_s - self.with_spec_s(spec))
            return True
        if first_fit:
            shapes, seconds = self.refused.get((spec.op_class, spec.phase), (0, 0.0))
            self.refused[(spec.op_class, spec.phase)] = (shapes + 1, seconds + estimate_s)
        return False

    def limit_s(self, spec: plans.SampleSpec, estimate_s: float) -> float:
        """Wall seconds `spec`'s measurement may take from now (op_sampler.measure): the sampling time left, plus
        its estimate or OVER_DEADLINE_S, whichever is longer (a first fit past the deadline: that alone)."""
        return max(self.with_spec_s(spec) - time.perf_counter(), 0.0) + max(estimate_s, OVER_DEADLINE_S)

    def _ready(self, extra: tuple[str, str] | None = None) -> int:
        """Groups to fit, with one more sample of `extra`."""
        counts = dict(self.counts)
        if extra is not None:
            counts[extra] = counts.get(extra, 0) + 1
        return self.other_groups + sum(n >= MIN_SAMPLES_TO_FIT for n in counts.values())

    def now_s(self) -> float:
        return self.budget.sampling_end_s(self._ready()) if self.budget else self.fixed_s

    def with_spec_s(self, spec: plans.SampleSpec) -> float:
        """The deadline once `spec` is measured."""
        key = (spec.op_class, spec.phase)
        return self.budget.sampling_end_s(self._ready(key)) if self.budget else self.fixed_s

    def add(self, spec: plans.SampleSpec) -> None:
        key = (spec.op_class, spec.phase)
        self.counts[key] = self.counts.get(key, 0) + 1


def expected_run(specs: Sequence[plans.SampleSpec], deadline: SamplingDeadline, rc: RooflineConstants,
                 slowdowns: Mapping[tuple[str, str], float]) -> tuple[int, float, int]:
    """(shapes, seconds, of them past the deadline) that _measure_all is expected to measure of `specs` under
    `deadline`, each at plan_cost's estimate on a simulated clock from now: the plan's cost is of every shape planned,
    and a tiny --budget measures few of them (28 Nov: 917 planned, 1.4 device-minutes; 136 first fits measured)."""
    sim = SamplingDeadline(deadline.budget, deadline.counts, deadline.fixed_s, deadline.other_groups,
                           deadline.first_fit_classes)
    guess = plans.slowdown_guess(slowdowns)[0]
    start_s = clock_s = time.perf_counter()
    count = past = 0
    for spec in specs:
        estimate_s = plans.estimate_seconds(spec, rc, slowdown=slowdowns.get((spec.op_class, spec.phase), guess))
        within = clock_s + estimate_s <= sim.with_spec_s(spec)
        if sim.allows(spec, estimate_s, now_s=clock_s):
            count, past, clock_s = count + 1, past + (not within), clock_s + estimate_s
            sim.add(spec)
    return count, clock_s - start_s, past


def describe_expected(run: tuple[int, float, int], planned: int) -> str:
    """The plan line's part for expected_run."""
    count, seconds, past = run
    if count == planned:
        return f"this --budget measures them all (about {seconds:.0f} s)"
    if count == 0:
        return ("this --budget measures none of them (no sampling time left, and every class asked for has its first "
                "fit's shapes; a longer --budget measures more)")
    first_fits = f", {past} of them first-fit shapes past its sampling deadline" if past else ""
    return (f"this --budget measures about {count} of them (about {seconds:.0f} s{first_fits}; a longer --budget or "
            f"the same command again measures the rest)")


def _measure_all(specs: Sequence[plans.SampleSpec], deadline: SamplingDeadline | float, req: ProfileRequest,
                 rc: RooflineConstants, record: Callable[[plans.SampleSpec, float], None],
                 slowdowns: Mapping[tuple[str, str], float] | None = None) -> int:
    """Measure `specs` in order, each only when its estimated time (its class's slowdown over the roofline as
    measured so far, this run's samples included; slowdown_guess before the first) ends before the deadline."""
    from llmperf_hook.profile.op_sampler import OverLimit, sample_op

    if not isinstance(deadline, SamplingDeadline):
        deadline = SamplingDeadline(None, {}, fixed_s=deadline)
    bar = Progress(len(specs), max(deadline.now_s() - time.perf_counter(), 0.0))
    measured, failures = 0, {}
    max_bytes = _memory_bytes(req.device) / 4  # never near what the machine (shared, on CPU) can give
    too_big = [s for s in specs if plans.alloc_elements(s) * rc.dtype_bytes > max_bytes]
    if too_big:
        sys.stderr.write(f"note: {len(too_big)} shapes ({', '.join(sorted({s.op_class for s in too_big}))}) not "
                         f"sampled: their tensors would need more than a quarter of the {req.device}'s memory\n")
    ratios = {key: [v] for key, v in (slowdowns or {}).items()}
    try:
        for spec in specs:
            known, key = {k: float(np.median(v)) for k, v in ratios.items()}, (spec.op_class, spec.phase)
            factor = max(known.get(key) or plans.slowdown_guess(known)[0], deadline.stopped.get(key, 0.0))
            estimate_s = plans.estimate_seconds(spec, rc, slowdown=factor)
            if not deadline.allows(spec, estimate_s) \
                    or failures.get(spec.op_class, 0) >= MAX_FAILURES_PER_CLASS \
                    or plans.alloc_elements(spec) * rc.dtype_bytes > max_bytes:
                continue
            try:
                warm_up(spec.op_class, spec.phase, req.dtype, req.device)
                timing = sample_op(spec.op_class, spec.dims, spec.phase, req.dtype, req.device,
                                   limit_s=deadline.limit_s(spec, estimate_s))
            except OverLimit as over:  # a shape far slower than its class's median: not measured
                deadline.stopped[key] = max(deadline.stopped.get(key, 0.0), over.call_s / _roofline_s(spec, rc))
                sys.stderr.write(f"\nnote: {spec.op_class} {spec.phase} {dict(spec.dims)} not measured: {over}; "
                                 f"this run takes its class at {deadline.stopped[key]:.0f}x its roofline from now\n")
                continue
            except (MemoryError, RuntimeError) as err:  # torch.OutOfMemoryError is a RuntimeError
                _free_memory(req.device)
                if "out of memory" not in str(err).lower() and not isinstance(err, MemoryError):
                    # An op this torch/device cannot run must not cost the other classes their budget.
                    failures[spec.op_class] = failures.get(spec.op_class, 0) + 1
                    sys.stderr.write(f"\nnote: {spec.op_class} {spec.phase} {dict(spec.dims)} failed: "
                                     f"{str(err).splitlines()[0][:200]}\n")
                continue  # a shape that does not fit this device is not sampled (and not a training shape)
            record(spec, timing.time_s)
            deadline.add(spec)
            ratios.setdefault((spec.op_class, spec.phase), []).append(timing.time_s / _roofline_s(spec, rc))
            measured += 1
            bar.step(f"{spec.op_class} {spec.phase} {spec.origin}")
    finally:
        bar.close()
    return measured


_WARMED: set[tuple[str, str, str, str, Callable]] = set()
"""(op class, phase, dtype, device, runner factory) whose code path this process has run (warm_up): one-time costs
are per process. The factory (op_sampler.make_runner, or a test's stand-in for it) is in the key, so a stand-in is
warmed up on its own first call whatever ran before it in the process, never skipped because the real runner or
another test's stand-in ran that class first."""


def warm_up(op_class: str, phase: str, dtype: str, device: str) -> None:
    """Run the op once, untimed, on its class's smallest shape, the first time this process samples (op class, phase,
    dtype, device): a path's first call pays one-time costs that are not the op's, and measure() judges a shape's pace
    by its first call (OverLimit). The process's first torch.autograd.grad starts autograd's engine: 0.61 s of CPU
    time and 1.5 s wall for a LayerNorm backward of 592 x 96 whose next call took 0.36 ms (28 Nov, load 2), 3.3 s wall
    at load 9; a first fit past the deadline is given 10 s (OVER_DEADLINE_S) for its 7 calls, so that shape was
    stopped and its class taken at 9063x its roofline, which refused every other first-fit shape of it
    (FIRST_FIT_MAX_SAMPLE_S): `--ops gemm,layernorm` under load ended with no layernorm backward regressor."""
    from llmperf_hook.profile import op_sampler

    key, ranges = (op_class, phase, dtype, device, op_sampler.make_runner), ranges_for(device)
    if key in _WARMED or op_class not in ranges:
        return
    _WARMED.add(key)
    smallest = plans.complete_dims(op_class, {dim: float(low) for dim, (low, _) in ranges[op_class].items()})
    try:
        op_sampler.make_runner(op_class, smallest, phase == "bwd", dtype, device)()
        if device == "cuda":  # its queued kernels end here, not in the wall time of the first timed call
            import torch

            torch.cuda.synchronize()
    except Exception:  # untimed and unrecorded: the sampled shapes' own measurements say what fails, and how
        _free_memory(device)


def _roofline_s(spec: plans.SampleSpec, rc: RooflineConstants) -> float:
    block = build_features(spec.op_class, spec.phase == "bwd", {k: np.array([v]) for k, v in spec.dims.items()}, rc)
    return max(float(block.roofline_s[0]), 1e-12)


def _memory_bytes(device: str) -> float:
    from llmperf_hook.profile.local_hardware import memory_capacity_bytes

    try:
        return float(memory_capacity_bytes(device))
    except (OSError, ValueError, RuntimeError):
        return float("inf")


def _free_memory(device: str) -> None:
    import gc

    gc.collect()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()


def _samples_by_class(store: Store, name: str, dtype: str | None, fp: str) -> dict[tuple[str, str, str], Samples]:
    """{(op class, phase, dtype): samples} of this device: the sampler's (same fingerprint) plus the per-op
    actuals instrumented runs recorded for it (source "instrument:<job>", see refine/op_refit.py)."""
    groups: dict[tuple[str, str, str], list] = {}
    for r in store.query_op_samples(name, dtype):
        ours = r.source == "sampler" and r.fingerprint == fp
        if (ours or r.source.startswith("instrument:")) and r.op_class in REQUIRED_DIMS \
                and _finite_row(r, REQUIRED_DIMS[r.op_class]):
            groups.setdefault((r.op_class, r.phase, r.dtype), []).append(r)
    out = {}
    for (cls, phase, dt), recs in groups.items():
        dims = {k: np.asarray([float(r.dims[k]) for r in recs]) for k in REQUIRED_DIMS[cls]}
        out[(cls, phase, dt)] = Samples(cls, phase, dims, np.asarray([r.time_s for r in recs]))
    return out


def _finite_row(r: OpSampleRecord, dims: Sequence[str]) -> bool:
    """A row a fit can use: a positive finite time and every dim a finite number. The store reads its dims as JSON,
    which takes NaN, Infinity and strings (a row edited by hand or written by another tool): a NaN dim made the
    model's train_ranges NaN (build_profile), a string one an internal error."""
    values = [r.dims.get(k) for k in dims]
    return isinstance(r.time_s, (int, float)) and math.isfinite(r.time_s) and r.time_s > 0 and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values)


def _done_keys(store: Store, name: str, dtype: str, fp: str) -> set[tuple[str, str, str]]:
    """(op class, phase, dims key) of the shapes this device already measured: the sampler's rows with this
    fingerprint, the ones _samples_by_class fits. A row of another fingerprint under the same name (the same GPU
    before a CUDA upgrade, which _check_same_machine lets refit; an interrupted first run with other settings) is
    measured again, which replaces it (the store keys a shape by name, dtype and source, not fingerprint); skipping
    it as stored left nothing to fit."""
    return store.sampled_keys(name, dtype, fingerprint=fp)


def _adaptive_specs(groups: Mapping[tuple[str, str, str], Samples], req: ProfileRequest, rc: RooflineConstants,
                    per_class: int = 12, seed: int = 0) -> list[plans.SampleSpec]:
    """Candidates where bootstrap regressors disagree most (adaptive.most_uncertain, the rule the operator
    benchmark's --design adaptive also applies)."""
    ranges = ranges_for(req.device)
    rng = np.random.default_rng(seed)
    out = []
    for (cls, phase, _), s in sorted(groups.items()):
        if len(s.time_s) < MIN_SAMPLES_TO_FIT or cls not in ranges:
            continue
        cands = [plans.complete_dims(cls, p) for p in plans.latin_hypercube(ranges[cls], 128, rng)]
        block = build_features(cls, phase == "bwd", {k: np.asarray([c[k] for c in cands]) for k in s.dims}, rc)
        train = build_features(cls, phase == "bwd", s.dims, rc)
        y = np.log(s.time_s / train.roofline_s)
        order = most_uncertain(train.matrix, y, block.matrix, per_class, rng)
        out += [plans.SampleSpec(cls, phase, cands[i], "adaptive") for i in order]
    return out


def run_profile(req: ProfileRequest) -> ProfileResult:
    with _disk_full_said(req):
        return _run_profile(req)


@contextmanager
def _disk_full_said(req: ProfileRequest) -> Iterator[None]:
    """A full disk (or quota) under the store or $LLMPERF_HOME is the user's to fix, not an internal error: SQLite
    says 'database or disk is full' as a sample is committed, the profile's files fail ENOSPC. Each sample is
    committed as it is measured, so those measured are kept and the same command resumes."""
    try:
        yield
    except (sqlite3.OperationalError, OSError) as err:
        full = (isinstance(err, sqlite3.OperationalError) and "full" in str(err)) or \
            getattr(err, "errno", None) in (errno.ENOSPC, errno.EDQUOT)
        if not full:
            raise
        where = req.store_path.parent if req.store_path else llmperf_home()
        raise UsageError(f"no space left on the disk of {where} ({err}; $LLMPERF_HOME="
                         f"{os.environ.get('LLMPERF_HOME', 'unset, so ~/.cache/llmperf')}): the shapes measured "
                         f"before it filled are kept in the store. Free some space there, or point $LLMPERF_HOME "
                         f"at a folder on another disk, and run the same command again (stored shapes are "
                         f"skipped).") from err


def _run_profile(req: ProfileRequest) -> ProfileResult:
    ops = _validate(req)
    _check_state_dirs(req)
    import torch

    from llmperf_hook.profile import local_hardware as lh

    budget = plan_budget(req.budget_min, req.started_s or time.perf_counter(),
                         _framework_reserved_s() if measures_framework(req) else 0.0, req.device == "cpu")
    if req.device == "cpu":
        torch.set_num_threads(req.threads)
    name = (req.name or lh.default_profile_name(req.device, req.threads)).lower()  # lookups lower-case names
    _check_profile_paths(name)
    rc = lh.measure_roofline(req.dtype, req.device, req.threads)
    fp, versions = json.dumps(lh.fingerprint(req.device, req.threads), sort_keys=True), library_versions()
    _check_same_machine(name, json.loads(fp))
    if not (req.device == "cuda" and name in lh.shipped_hardware_names()):  # that one keeps the shipped YAML
        lh.check_hardware_yaml_is_ours(name)
    with open_store(req.store_path) as store:
        store.check_integrity()  # before the budget goes into a file whose samples would be lost
        done = _done_keys(store, name, req.dtype, fp)
        specs = _specs(req, ops, rc, name)
        todo = [s for s in specs if (s.op_class, s.phase, dims_key(s.dims)) not in done]
        stored = _samples_by_class(store, name, None, fp)
        slowdowns = plans.measured_slowdowns(stored, rc, req.dtype)
        deadline = SamplingDeadline(budget, {(c, p): len(s.time_s) for (c, p, dt), s in stored.items()
                                             if dt == req.dtype},
                                    other_groups=sum(dt != req.dtype and len(s.time_s) >= MIN_SAMPLES_TO_FIT
                                                     for (_, _, dt), s in stored.items()),
                                    first_fit_classes=_first_fit_classes(req, specs))
        cost = plans.plan_cost(todo, rc, slowdowns)
        run = expected_run(todo, deadline, rc, slowdowns)
        expected = describe_expected(run, len(todo))
        plan_note = (f"plan: {len(specs)} shapes ({sum(s.origin in ('job', 'neighbour') for s in specs)} from the job "
                     f"and its neighbours), {len(specs) - len(todo)} already stored; {cost.describe()}; {expected}; "
                     f"{describe_budget(budget, len({(s.op_class, s.phase) for s in specs}))}")
        sys.stderr.write(plan_note + "\n")
        record = (lambda spec, t: _record(store, req, name, spec, t, fp, versions))
        sampling_s = time.perf_counter()
        measured = _measure_all(todo, deadline, req, rc, record, slowdowns)
        adaptive = _adaptive_rounds(store, req, name, rc, fp, deadline, record, ops)
        groups = _samples_by_class(store, name, None, fp)
        sampled_s = time.perf_counter()
    plan_note += f"; {adaptive} adaptive samples where the regressors disagreed most"
    if deadline.overrun_s > 0.5:
        whose = ("the --for job runs (other classes stopped at the deadline)" if deadline.first_fit_classes
                 else "asked for")
        plan_note += (f"; sampling ran {deadline.overrun_s:.0f} s past its deadline to give every class {whose} the "
                      f"{MIN_SAMPLES_TO_FIT} shapes of a first fit (the --budget is smaller than a profile of them "
                      f"takes here)")
    result = fit_and_write(req, name, rc, fp, versions, groups, measured + adaptive, len(specs) - len(todo),
                           plan_note, budget, asked={(s.op_class, s.phase) for s in specs},
                           refused={f"{c}/{p}/{req.dtype}": v for (c, p), v in deadline.refused.items()})
    return replace(result, phase_ends_s=(("start-up, torch and the peaks", sampling_s), ("sampling", sampled_s),
                                 *result.phase_ends_s), expected_measured=run[0])


def _check_state_dirs(req: ProfileRequest) -> None:
    """Where the samples, the profile and the hardware file go must be writable, before any sampling."""
    from llmperf_hook.refine.observation_store import check_writable_dir

    check_writable_dir(llmperf_home(), "the profile and hardware files")
    if req.store_path is not None:
        check_writable_dir(req.store_path.expanduser().resolve().parent, "the store", f"--store {req.store_path}")


def _check_profile_paths(name: str) -> None:
    """$LLMPERF_HOME/profiles and hardware/ must be folders, and profiles/NAME a folder when it exists, before any
    sampling: a file there was the user's (the fit replaced a file profiles/NAME with the new profile folder, and
    a file profiles/ failed 'internal error: NotADirectoryError' after the whole budget was spent)."""
    from llmperf_hook.refine.observation_store import check_writable_dir

    for folder, what in (("profiles", "the profile"), ("hardware", "the hardware file")):
        check_writable_dir(llmperf_home() / folder, what)
    target = llmperf_home() / "profiles" / name
    if target.exists() and not target.is_dir():
        raise UsageError(f"{target} is a file, not a profile folder: profiling under the name {name!r} would replace "
                         f"it with the fitted profile. Move that file away, or give the profile another --name.")


def _check_same_machine(name: str, fingerprint: Mapping[str, str]) -> None:
    """Refitting profile NAME here would replace a profile of another machine (a shared $LLMPERF_HOME, or a
    profile copied from elsewhere): refuse, naming both. An unreadable profile.json is simply re-created."""
    from llmperf_hook.profile.staged_folder import recover

    recover(llmperf_home() / "profiles" / name)  # a refit killed mid-swap: the old profile is the one to check
    try:
        theirs = json.loads((llmperf_home() / "profiles" / name / "profile.json").read_text()).get("hardware")
    except (OSError, ValueError, AttributeError):
        return
    if not isinstance(theirs, dict) or not theirs:
        return
    # The device itself, not its software (a CUDA or torch upgrade re-profiles the same device: only its new samples
    # fit, _done_keys / _samples_by_class).
    keys = sorted((set(theirs) | set(fingerprint)) - {"cuda", "clock", "torch"})
    diff = ", ".join(f"{k} {theirs.get(k)!r} there, {fingerprint.get(k)!r} here"
                     for k in keys if str(theirs.get(k)) != str(fingerprint.get(k)))
    if diff:
        raise UsageError(f"profile {name!r} ({llmperf_home() / 'profiles' / name}) was fitted on another machine or "
                         f"setting ({diff}); sampling here would replace it with this machine's. Give this machine "
                         f"its own --name, or delete that folder to re-create it here.")


def _adaptive_rounds(store: Store, req: ProfileRequest, name: str, rc: RooflineConstants, fp: str,
                     deadline: SamplingDeadline, record: Callable[[plans.SampleSpec, float], None],
                     ops: Sequence[str]) -> int:
    """Rounds of uncertainty sampling of the classes asked for (`ops`) while the budget lasts (the design came first):
    a top-up `--ops gelu_exact` of a stored profile spent its time left on every other class (28 Nov: 12 adaptive
    shapes each), and the changed samples cost those dtypes their framework cost (profile_fit)."""
    total = 0
    while time.perf_counter() < deadline.now_s() - 5.0:
        groups = {k: s for k, s in _samples_by_class(store, name, req.dtype, fp).items() if k[0] in ops}
        done = _done_keys(store, name, req.dtype, fp)
        extra = [s for s in _adaptive_specs(groups, req, rc, seed=total)
                 if (s.op_class, s.phase, dims_key(s.dims)) not in done]
        got = _measure_all(extra, deadline, req, rc, record, plans.measured_slowdowns(groups, rc, req.dtype)) \
            if extra else 0
        if got == 0:
            break
        total += got
    return total


def _framework_reserved_s() -> float:
    from llmperf_hook.profile.cpu_framework import RESERVED_S

    return RESERVED_S
