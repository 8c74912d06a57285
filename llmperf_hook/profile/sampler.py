"""`llmperf profile` for operators: plan, measure within the budget (resumable), fit, write the profile.

    run_profile(ProfileRequest(device="cpu", budget_min=3, dtype="fp32"))

Samples go to the store (source "sampler", with the fingerprint and library versions) as they are measured,
so an interrupted run resumes where it stopped: shapes this device already stored for this (name, dtype) are
skipped (_done_keys).
Then one regressor per (op class, direction) is fitted from all stored samples of this device and written to
$LLMPERF_HOME/profiles/NAME/, and the measured peaks to $LLMPERF_HOME/hardware/NAME.yaml.
"""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from llmperf_hook.errors import UsageError
from llmperf_hook.profile import plan as plans
from llmperf_hook.profile.build_profile import Samples, fit_samples, library_versions
from llmperf_hook.profile.features import REQUIRED_DIMS, RooflineConstants, build_features
from llmperf_hook.profile.adaptive import most_uncertain
from llmperf_hook.profile.profile_io import ProfileMeta, write_profile
from llmperf_hook.resources import configs_dir, llmperf_home
from llmperf_hook.store import OpSampleRecord, Store, dims_key, open_store

MIN_SAMPLES_TO_FIT = 8
DESIGN_PER_CLASS = 32
UNFUSED_CLASSES = "rope,swiglu"
"""Op classes op_sampler times as torch composites of several kernels (predict/dispatch.unfused_classes)."""
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


@dataclass(frozen=True)
class ProfileResult:
    name: str
    profile_dir: Path
    hardware_yaml: Path
    num_measured: int
    num_skipped: int
    """Shapes already in the store (resumed)."""
    fitted_classes: tuple[str, ...]
    """"class/phase" entries with a regressor."""
    plan_note: str
    notes: tuple[str, ...]


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
        raise UsageError(f"--budget {req.budget_min}: the sampling budget must be a positive, finite number of "
                         f"minutes (default 3).")
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
        raise UsageError(f"--ops {','.join(unknown)}: unknown op class; choose from {', '.join(plans.CPU_RANGES)}.")
    if req.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageError("--device cuda: torch sees no CUDA device here. Use --device cpu or run on a GPU node.")
    return tuple(ops)


def _specs(req: ProfileRequest, ops: Sequence[str], rc: RooflineConstants, name: str) -> list[plans.SampleSpec]:
    specs: list[plans.SampleSpec] = []
    if req.job_argv:
        specs += [s for s in plans.job_specs(req.job_argv, req.env, _local_cluster(name, rc), req.job_model,
                                             nnodes=req.job_nnodes, nproc_per_node=req.job_nproc_per_node)
                  if s.op_class in ops]
    ranges = plans.CPU_RANGES if req.device == "cpu" else plans.GPU_RANGES
    # The design's first round comes group by group, so a short budget still fits the leading classes.
    specs += plans.fit_first(plans.design_specs(ops, ranges, DESIGN_PER_CLASS), MIN_SAMPLES_TO_FIT)
    return specs


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


def _measure_all(specs: Sequence[plans.SampleSpec], deadline: float, req: ProfileRequest, rc: RooflineConstants,
                 record: Callable[[plans.SampleSpec, float], None]) -> int:
    from llmperf_hook.profile.op_sampler import sample_op

    bar = Progress(len(specs), max(deadline - time.perf_counter(), 0.0))
    measured, failures = 0, {}
    max_bytes = _memory_bytes(req.device) / 4  # never near what the machine (shared, on CPU) can give
    too_big = [s for s in specs if plans.alloc_elements(s) * rc.dtype_bytes > max_bytes]
    if too_big:
        sys.stderr.write(f"note: {len(too_big)} shapes ({', '.join(sorted({s.op_class for s in too_big}))}) not "
                         f"sampled: their tensors would need more than a quarter of the {req.device}'s memory\n")
    try:
        for spec in specs:
            if time.perf_counter() + plans.estimate_seconds(spec, rc) > deadline \
                    or failures.get(spec.op_class, 0) >= MAX_FAILURES_PER_CLASS \
                    or plans.alloc_elements(spec) * rc.dtype_bytes > max_bytes:
                continue
            try:
                timing = sample_op(spec.op_class, spec.dims, spec.phase, req.dtype, req.device)
            except (MemoryError, RuntimeError) as err:  # torch.OutOfMemoryError is a RuntimeError
                _free_memory(req.device)
                if "out of memory" not in str(err).lower() and not isinstance(err, MemoryError):
                    # An op this torch/device cannot run must not cost the other classes their budget.
                    failures[spec.op_class] = failures.get(spec.op_class, 0) + 1
                    sys.stderr.write(f"\nnote: {spec.op_class} {spec.phase} {dict(spec.dims)} failed: "
                                     f"{str(err).splitlines()[0][:200]}\n")
                continue  # a shape that does not fit this device is not sampled (and not a training shape)
            record(spec, timing.time_s)
            measured += 1
            bar.step(f"{spec.op_class} {spec.phase} {spec.origin}")
    finally:
        bar.close()
    return measured


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
        if (ours or r.source.startswith("instrument:")) and r.op_class in REQUIRED_DIMS and r.time_s > 0 \
                and all(k in r.dims for k in REQUIRED_DIMS[r.op_class]):
            groups.setdefault((r.op_class, r.phase, r.dtype), []).append(r)
    out = {}
    for (cls, phase, dt), recs in groups.items():
        dims = {k: np.asarray([float(r.dims[k]) for r in recs]) for k in REQUIRED_DIMS[cls]}
        out[(cls, phase, dt)] = Samples(cls, phase, dims, np.asarray([r.time_s for r in recs]))
    return out


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
    ranges = plans.CPU_RANGES if req.device == "cpu" else plans.GPU_RANGES
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


MIN_SAMPLING_SHARE = 0.5
"""Share of the sampling time (the budget less fitting and the framework cost) left for sampling after the
device's peaks were measured, whatever those took."""


def run_profile(req: ProfileRequest) -> ProfileResult:
    ops = _validate(req)
    _check_state_dirs(req)
    import torch

    from llmperf_hook.profile import local_hardware as lh

    t_start = time.perf_counter()
    deadline = t_start + req.budget_min * 60.0 * 0.85  # the rest is for fitting and writing
    if _measures_framework(req):  # CPU: the framework cost is measured after the fit (profile/cpu_framework.py)
        deadline -= _framework_reserved_s()
    if req.device == "cpu":
        torch.set_num_threads(req.threads)
    name = (req.name or lh.default_profile_name(req.device, req.threads)).lower()  # lookups lower-case names
    rc = lh.measure_roofline(req.dtype, req.device, req.threads)
    # The peaks take seconds (more on a loaded machine): sampling keeps at least half its time, so a tiny
    # --budget still measures enough shapes to fit, running over by at most what the peaks took.
    deadline = max(deadline, time.perf_counter() + (deadline - t_start) * MIN_SAMPLING_SHARE)
    fp, versions = json.dumps(lh.fingerprint(req.device, req.threads), sort_keys=True), library_versions()
    _check_same_machine(name, json.loads(fp))
    if not (req.device == "cuda" and name in lh.shipped_hardware_names()):  # that one keeps the shipped YAML
        lh.check_hardware_yaml_is_ours(name)
    with open_store(req.store_path) as store:
        store.check_integrity()  # before the budget goes into a file whose samples would be lost
        done = _done_keys(store, name, req.dtype, fp)
        specs = _specs(req, ops, rc, name)
        todo = [s for s in specs if (s.op_class, s.phase, dims_key(s.dims)) not in done]
        cost = plans.plan_cost(todo, rc, plans.measured_slowdowns(_samples_by_class(store, name, req.dtype, fp), rc,
                                                                  req.dtype))
        plan_note = (f"plan: {len(specs)} shapes ({sum(s.origin in ('job', 'neighbour') for s in specs)} from the job "
                     f"and its neighbours), {len(specs) - len(todo)} already stored; {cost.num_samples} to measure "
                     f"= about {cost.device_minutes:.1f} device-minutes; budget {req.budget_min:g} min")
        sys.stderr.write(plan_note + "\n")
        record = (lambda spec, t: _record(store, req, name, spec, t, fp, versions))
        measured = _measure_all(todo, deadline, req, rc, record)
        adaptive = _adaptive_rounds(store, req, name, rc, fp, deadline, record)
        groups = _samples_by_class(store, name, None, fp)
    plan_note += f"; {adaptive} adaptive samples where the regressors disagreed most"
    return _fit_and_write(req, name, rc, fp, versions, groups, measured + adaptive, len(specs) - len(todo),
                          plan_note)


def _check_state_dirs(req: ProfileRequest) -> None:
    """Where the samples, the profile and the hardware file go must be writable, before any sampling."""
    from llmperf_hook.refine.observation_store import check_writable_dir

    check_writable_dir(llmperf_home(), "the profile and hardware files")
    if req.store_path is not None:
        check_writable_dir(req.store_path.expanduser().resolve().parent, "the store", f"--store {req.store_path}")


def _check_same_machine(name: str, fingerprint: Mapping[str, str]) -> None:
    """Refitting profile NAME here would replace a profile of another machine (a shared $LLMPERF_HOME, or a
    profile copied from elsewhere): refuse, naming both. An unreadable profile.json is simply re-created."""
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
                     deadline: float, record: Callable[[plans.SampleSpec, float], None]) -> int:
    """Rounds of uncertainty sampling while the budget lasts (the design came first)."""
    total = 0
    while time.perf_counter() < deadline - 5.0:
        groups = _samples_by_class(store, name, req.dtype, fp)
        done = _done_keys(store, name, req.dtype, fp)
        extra = [s for s in _adaptive_specs(groups, req, rc, seed=total)
                 if (s.op_class, s.phase, dims_key(s.dims)) not in done]
        got = _measure_all(extra, deadline, req, rc, record) if extra else 0
        if got == 0:
            break
        total += got
    return total


def _peaks(req: ProfileRequest, measured: Mapping[str, RooflineConstants]) -> dict[str, float]:
    """Every dtype's peak for the hardware YAML: those measured for this fit (the dtype sampled and every dtype of
    the store's samples), and the others measured now. A dtype missing from the YAML is priced at the highest peak
    listed: an fp32 refit of a CPU profile once dropped fp16 (~1 GFLOP/s, emulated on x86), and fp16 jobs were
    then priced at bf16's 210 GFLOP/s, 10.6 ms a step where 878 ms was predicted before."""
    from llmperf_hook.profile.local_hardware import measure_peak_flop_per_s

    peaks = {dt: r.peak_flop_per_s for dt, r in measured.items()}
    for other in ("fp32", "bf16", "fp16"):  # fp16 on CPU too: peak_gemm_size keeps an emulated one quick
        if other not in peaks:
            peaks[other] = measure_peak_flop_per_s(other, req.device)
    return peaks


def _fit_and_write(req: ProfileRequest, name: str, rc: RooflineConstants, fp: str, versions: Mapping[str, str],
                   groups: Mapping[tuple[str, str, str], Samples], measured: int, skipped: int,
                   plan_note: str) -> ProfileResult:
    from llmperf_hook.profile.local_hardware import measure_roofline

    # Every dtype sampled on this device so far is refitted, so one profile NAME serves fp32 and bf16 runs.
    rooflines = {dt: (rc if dt == req.dtype else measure_roofline(dt, req.device, req.threads))
                 for dt in sorted({dt for _, _, dt in groups})}
    entries, texts, notes = [], {}, []
    for (cls, phase, dt), s in sorted(groups.items()):
        if len(s.time_s) < MIN_SAMPLES_TO_FIT:
            notes.append(f"{cls}/{phase}/{dt}: only {len(s.time_s)} samples, not fitted (roofline is used); "
                         f"run again with a larger --budget to add more")
            continue
        entry, text = fit_samples(s, rooflines[dt], dt, with_holdout=len(s.time_s) >= 20)
        entries.append(entry)
        texts[entry.file] = text
    if not entries:
        raise UsageError(f"--budget {req.budget_min:g} min measured too few shapes to fit any operator "
                         f"(need {MIN_SAMPLES_TO_FIT} per op class and direction). Give a larger --budget; "
                         f"samples measured so far are kept in the store and reused.")
    meta = ProfileMeta(
        name=name, roofline={dt: rooflines[dt] for dt in {e.dtype for e in entries}}, dtype_aliases={},
        hardware=json.loads(fp),
        library_versions=dict(versions),
        provenance={"samples": f"llmperf profile --device {req.device} (store source 'sampler')",
                    "unfused_classes": UNFUSED_CLASSES,
                    "fitted_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "license": "own measurements"},
        models=tuple(entries), notes=tuple(notes))
    profile_dir = write_profile(llmperf_home() / "profiles" / name, meta, texts)
    yaml_path = _hardware_yaml(req, name, rc, rooflines)
    if _measures_framework(req):  # framework work on the computing thread, measured against this profile
        from llmperf_hook.profile.cpu_framework import write_framework_overhead

        write_framework_overhead(profile_dir, name, sorted({e.dtype for e in entries}), req.threads)
    elif req.device == "cpu":
        from llmperf_hook.profile.cpu_framework import FILE_NAME, MIN_BUDGET_MIN

        (profile_dir / FILE_NAME).unlink(missing_ok=True)  # measured against an earlier fit: stale now
        notes.append(f"framework cost on the CPU (profile/cpu_framework.py) not measured: it needs --budget >= "
                     f"{MIN_BUDGET_MIN:g} min; predictions on this CPU use the operator profile alone")
    return ProfileResult(name, profile_dir, yaml_path, measured, skipped,
                         tuple(f"{e.op_class}/{e.phase}/{e.dtype}" for e in entries), plan_note, tuple(notes))


def _measures_framework(req: ProfileRequest) -> bool:
    from llmperf_hook.profile.cpu_framework import MIN_BUDGET_MIN

    return req.device == "cpu" and req.budget_min >= MIN_BUDGET_MIN


def _framework_reserved_s() -> float:
    from llmperf_hook.profile.cpu_framework import RESERVED_S

    return RESERVED_S


def _hardware_yaml(req: ProfileRequest, name: str, rc: RooflineConstants,
                   rooflines: Mapping[str, RooflineConstants]) -> Path:
    from llmperf_hook.profile.local_hardware import shipped_hardware_names, write_hardware_yaml

    if req.device == "cuda" and name in shipped_hardware_names():
        # A GPU with a shipped preset keeps its datasheet description; only the operator profile is user-fitted.
        yaml_path = configs_dir() / "hardware" / f"{name}.yaml"
    else:
        yaml_path = write_hardware_yaml(name, req.device, _peaks(req, rooflines), rc, req.threads)
    return yaml_path
