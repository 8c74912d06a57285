"""CPU framework overhead: several interleaved readings of every measured time, the terms fitted on their medians.

cpu_framework.py says what each term of `framework_overhead.json` is and how one reading isolates it. One
reading of all of them was not a stable profile: two taken twelve minutes apart on a quiet-ish machine (session
9, 21:36 and 21:48) put two ranks at x1.14 and x1.00 and DeepSpeed's ZeRO-1 term at 1.5 ms + 10.1 ns/param and
0.8 ms + 8.6 ns/param, which moved the testbed's 2-rank predictions by up to 17 %, while the reference steps
themselves moved 4 %: each term is a difference of measured times, and a busy minute lands in one of them. So
per dtype:
1. The children (cpu_engine_cost.py: two concurrency processes, one DeepSpeed process with an engine per ZeRO
   stage and shape, each engine in a process of its own forked from it; cpu_rank_transport.py: a DeepSpeed process
   at world size 1 and a pair at world size 2) start once.
2. Readings, each one pass over everything in turn: the tiny pair, the reference forward+backward rows, the
   AdamW steps, the isolated operators of the profile-bias shapes, the ranks at once, the engines (~9 s on a
   quiet 2-core machine, one thread).
3. Each measured time's MEDIAN over the readings (`median_raw`: with R readings fewer than R / 2 disturbed
   ones cannot move a time outside the range of the undisturbed ones), and every term fitted ONCE from those
   medians (`reading_terms`: per_unit_s, compute_scale, per_byte_s, the Adam and backward per-parameter and
   per-tensor terms, each ZeRO stage's engine terms; concurrency_slowdown, a ratio within one reading, is the
   median of the readings' ratios). Until session 13 the file kept the median of each term fitted from each
   reading alone; but the terms are differences of measured times fitted in sequence (the engine's is what
   its measured step leaves beyond the others' prediction), so per-term medians mix terms from different
   readings that no single set of times supports: fp32 ZeRO-1's per-step term read 0.13 ms as a median of
   readings, 0.36 ms fitted on the median times (session 13's file, 3 readings). Replayed on the three recorded
   testbed runs of 27 Nov (benchmarks/testbed_refit.py) with both kept framework-cost files, the one fit
   scored 22.1 / 16.8 / 16.7 % and 12.1 / 10.6 / 9.6 % against 22.1 / 17.6 / 16.8 % and 12.6 / 11.2 / 10.7 %.
   Each reading's own terms and the spread between them (half the range over the median, per term) are kept
   in the file (`readings`, `spread`) and printed by `llmperf profile` (describe_spread, on stderr): how far
   one reading alone would have been.
The samples the file keeps for the shrinkage's held-out steps and the step-time history (cpu_framework.
step_holdout_log_errors, measured_steps) are the medians over the readings of each measured time.

Measured on this 2-core machine, 26 Nov 2026 22:51-23:30, fp32, the one-reading method (session 9's code) and
this one alternately, four files each, all at load 6-10.5 (other helpers' test suites; no quiet window): the
testbed's nine fp32 configurations predicted with each file (bench_cpu_testbed.py CONFIGS) moved, per
configuration, by a log sd of 0.040 (median; max / min up to x1.22) with one reading and 0.034 (up to x1.15)
with the median of 3 readings; with each file's common level taken out (what the terms' balance does to one
configuration against the others), 0.021 (worst configuration 0.053) and 0.015 (worst 0.025). The 2-rank
slowdown: 1.00, 1.08, 1.00, 1.00 against 1.02, 1.04, 1.01, 1.02. What the median cannot remove is a load that
lasts the whole measurement: the files' common level followed it (geometric mean of the nine predictions
56-62 ms and 60-65 ms), so the benchmark still re-measures on a quiet machine.

Budget: `llmperf profile --device cpu` keeps up to cpu_framework.RESERVED_S (120 s) of its --budget for this
(budget.py): a hard time box split evenly over the dtypes measured (a dtype's share less what those before it ran
over theirs); per dtype the children's start (~20 s quiet: 16 engines; at most ENGINE_START_SHARE of the box, or that
child is left out), then readings while one as long as the last ends within the share (a reading still running at
its end is dropped: OutOfTime), at most MAX_READINGS. MIN_READINGS is what a quiet machine reaches (4-5 each, two
dtypes); fewer, on a busy one, are said in the output (time_box_notes). Session 13 (load ~10): the 3 readings it then
insisted on ran a 3-minute profile to 4:02. torch is imported inside the functions only.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from llmperf_hook.profile import cpu_framework as cf
from llmperf_hook.profile.cpu_reading_plan import FULL, ReadingPlan, choose_plan, plan_record

MIN_READINGS = 3
"""Fewest readings per dtype: the median of 3 outvotes one disturbed reading."""
MAX_READINGS = 7
"""Most readings per dtype, whatever the budget."""
TINY_PAIRS = 31
"""Interleaved (1-layer, 9-layer) step pairs of the tiny models per reading (~10 ms a pair: cf.paired_difference_s)."""
TINY_ISOLATED = (f"per_unit_s's isolated ops sampled in {cf.ISOLATED_REPS} rounds, one after every "
                 f"{TINY_PAIRS // cf.ISOLATED_REPS} of the {TINY_PAIRS} tiny pairs, median per op")
"""The entry's reading_plan["tiny_isolated"]: how its per_unit_s was read (files without it, before 28 Nov 2026: the
ops sampled 3 times in a row after the bias shapes)."""


@dataclass(frozen=True)
class FixedParts:
    """What a reading is compared with, computed once per dtype (no timing)."""

    tiny: tuple[dict, dict]
    """predicted_parts of TINY_LAYERS, with their parameter counts ("params")."""
    rows: tuple[dict, ...]
    """Per reference shape of the plan (cpu_reading_plan.py; REFERENCE_SHAPES in the full one): shape, predicted
    compute seconds, units, bytes, predicted optimizer seconds, parameter tensors, parameters."""
    engine_rows: tuple[tuple[int, int, dict], ...]
    """cpu_engine_cost.engine_model_rows."""


def fixed_parts(dtype: str, hardware_name: str, plan: ReadingPlan = FULL) -> FixedParts:
    from llmperf_hook.profile.cpu_engine_cost import engine_model_rows

    tiny = tuple({**cf.predicted_parts(s, dtype, hardware_name), "params": cf.parameter_counts(s)[0]}
                 for s in cf.TINY_LAYERS)
    rows = []
    for shape in plan.reference:
        parts, (params, tensors) = cf.predicted_parts(shape, dtype, hardware_name), cf.parameter_counts(shape)
        rows.append({"shape": list(shape), "predicted_compute_s": parts["compute_s"], "units": parts["units"],
                     "bytes": parts["bytes"], "predicted_optimizer_s": parts["optimizer_s"],
                     "tensors": tensors, "params": params})
    return FixedParts(tiny, tuple(rows), tuple(engine_model_rows(dtype, hardware_name, plan.deepspeed)))


class OutOfTime(Exception):
    """A reading stopped part-way at its time box's end (its parts are not a reading: dropped)."""


class _InProcess:
    """The parent's own timed work, built once: tiny and reference steps, AdamW over tensors and flat."""

    plan: ReadingPlan = FULL

    def __init__(self, dtype: str, plan: ReadingPlan = FULL) -> None:
        self.dtype, self.plan = dtype, plan
        self.tiny = [cf.fwd_bwd_fn(s, dtype) for s in cf.TINY_LAYERS]
        self.steps = [cf.fwd_bwd_fn(s, dtype) for s in plan.reference]
        self.optimizers = [cf.optimizer_steps(s) for s in plan.reference]

    def reading(self, hardware_name: str, end_s: float = float("inf")) -> dict:
        """One reading; OutOfTime once time.perf_counter() passes `end_s` between its parts (a part is seconds
        quiet, a minute at load 11: one reading overran an 80-s box by 20 s)."""
        wall0_s, cpu0_s = time.perf_counter(), time.process_time()

        def in_time() -> None:
            if time.perf_counter() > end_s:
                raise OutOfTime()

        def timed(fn: Any) -> float:
            in_time()
            return cf._median_s(fn, self.plan.reps)

        in_time()
        isolated = cf.IsolatedDifference(self.dtype, hardware_name, *cf.TINY_LAYERS)  # sampled between the pairs
        small_s, diff_s = cf.paired_difference_s(*self.tiny, TINY_PAIRS, between=isolated.sample_round,
                                                 every=TINY_PAIRS // cf.ISOLATED_REPS)
        raw = {"tiny_s": [small_s, small_s + diff_s], "tiny_isolated_diff_s": isolated.seconds(),
               "fwd_bwd_s": [timed(f) for f in self.steps],
               "optimizer_s": [[timed(t), timed(f)] for t, f in self.optimizers]}
        in_time()
        raw["bias"] = cf.measure_profile_bias(self.dtype, hardware_name, self.plan.bias)
        in_time()  # a reading whose box ended during the bias shapes is dropped
        # Diagnostic: > 1 when this process waited for a core (another program held it) during the reading.
        raw["wall_per_cpu"] = (time.perf_counter() - wall0_s) / max(time.process_time() - cpu0_s, 1e-9)
        return raw


def reading_rows(raw: Mapping[str, Any], fixed: FixedParts) -> list[dict]:
    """The reference rows of one reading (or of the medians): fixed parts + measured times."""
    return [{**row, "fwd_bwd_s": fb, "optimizer_tensors_s": opt[0], "optimizer_flat_s": opt[1]}
            for row, fb, opt in zip(fixed.rows, raw["fwd_bwd_s"], raw["optimizer_s"])]


def reading_terms(raw: Mapping[str, Any], fixed: FixedParts, dtype: str, keep_samples: bool = False) -> dict:
    """Every term of cpu_framework.py's steps 1-5 from one reading alone (or from the median times); with
    `keep_samples`, each ZeRO stage's engine samples behind its terms too (the file keeps those of the medians)."""
    from llmperf_hook.profile.cpu_engine_cost import deepspeed_terms
    from llmperf_hook.profile.cpu_rank_transport import fit_transport

    rows = reading_rows(raw, fixed)
    scale = min(cf.SCALE_BOUNDS[1], max(cf.SCALE_BOUNDS[0], raw["bias"]["ratio"]))
    per_byte, grad_per_param = 0.0, 0.0
    for _ in range(3):  # steps 1 and 2b each take the other's terms out; a few rounds settle them
        per_unit = cf.per_unit_from_difference(*raw["tiny_s"], *fixed.tiny, scale, per_byte, grad_per_param,
                                               raw.get("tiny_isolated_diff_s"))
        per_byte, grad_per_param = cf.fit_compute_terms(rows, per_unit, scale)
    per_tensor, per_param = cf.fit_optimizer_terms(rows)
    cost = {"per_unit_s": per_unit, "compute_scale": scale, "per_byte_s": per_byte,
            "optimizer_per_tensor_s": per_tensor, "optimizer_per_param_s": per_param + grad_per_param}
    terms = {**cost, "adam_per_param_s": per_param, "backward_per_param_s": grad_per_param}
    if raw.get("concurrency") is not None:
        terms["concurrency_slowdown"] = dict(raw["concurrency"])
    if raw.get("transport"):  # cpu_rank_transport.py: gloo's transport CPU per wire byte at world size 2
        fit = fit_transport(raw["transport"])
        terms["rank_transport"] = fit if keep_samples else {k: v for k, v in fit.items() if k != "samples"}
    if raw.get("engine"):
        stages = deepspeed_terms(raw["engine"], cost, fixed.engine_rows, dtype)
        terms["deepspeed_step"] = {z: {k: v for k, v in t.items() if keep_samples or k != "samples"}
                                   for z, t in stages.items()}
    return terms


def flatten(terms: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """{"a/b": number} of the numeric leaves of nested term dicts."""
    out: dict[str, float] = {}
    for key, value in terms.items():
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{prefix}{key}/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[prefix + key] = float(value)
    return out


def unflatten(flat: Mapping[str, float]) -> dict:
    out: dict = {}
    for path, value in flat.items():
        *parents, leaf = path.split("/")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def combine_readings(readings: Sequence[Mapping[str, Any]]) -> tuple[dict, dict[str, float | None]]:
    """(median per term over the readings, nested as the readings; spread per flattened term: half the range
    over the median, None where the median is 0). A term missing from some readings (a child that failed
    later) is the median of those that have it."""
    flats = [flatten(r) for r in readings]
    keys = list(dict.fromkeys(k for f in flats for k in f))
    medians, spread = {}, {}
    for key in keys:
        values = [f[key] for f in flats if key in f]
        medians[key] = statistics.median(values)
        spread[key] = (max(values) - min(values)) / (2 * medians[key]) if medians[key] > 0 else None
    return unflatten(medians), spread


def median_raw(raws: Sequence[Mapping[str, Any]]) -> dict:
    """Each measured time's median over the readings (the samples the file keeps); the rank pair's per-step CPU
    times pooled, not medianed (their spread is the term: cpu_rank_transport.step_pairs)."""
    from llmperf_hook.profile.cpu_rank_transport import step_pairs

    med = lambda xs: statistics.median(xs)  # noqa: E731
    small_s = med(r["tiny_s"][0] for r in raws)  # the difference's median, not a difference of medians (pairs)
    out = {"tiny_s": [small_s, small_s + med(r["tiny_s"][1] - r["tiny_s"][0] for r in raws)],
           "fwd_bwd_s": [med(v) for v in zip(*(r["fwd_bwd_s"] for r in raws))],
           "optimizer_s": [[med(x) for x in zip(*v)] for v in zip(*(r["optimizer_s"] for r in raws))]}
    engines = [r["engine"] for r in raws if r.get("engine")]
    if engines:
        out["engine"] = {z: [[med(x) for x in zip(*v)] for v in zip(*(e[z] for e in engines))] for z in engines[0]}
    transports = [r["transport"] for r in raws if r.get("transport")]
    if transports:  # per engine and column, the single process's and each rank's of the pair
        out["transport"] = {"single": _median_rows([t["single"] for t in transports]),
                            "pair": [_median_rows([t["pair"][i] for t in transports]) for i in range(2)],
                            "step_pairs": [list(p) for t in transports for p in step_pairs(t)]}  # every step
    isolated = [r["tiny_isolated_diff_s"] for r in raws if r.get("tiny_isolated_diff_s") is not None]
    if isolated:  # readings from before it was measured (testbed_refit's kept files) have none
        out["tiny_isolated_diff_s"] = med(isolated)
    bias = [r["bias"]["samples"] for r in raws]
    out["bias"] = {"ratio": med(r["bias"]["ratio"] for r in raws),
                   "samples": [{**rows[0], "isolated_s": med(x["isolated_s"] for x in rows)} for rows in zip(*bias)]}
    return out


def _median_rows(readings: Sequence[Sequence[Sequence[float]]]) -> list[list[float]]:
    """Each [row][column]'s median over the readings."""
    return [[statistics.median(x) for x in zip(*rows)] for rows in zip(*readings)]


ENGINE_START_SHARE = 0.4
"""Most of a dtype's time box the DeepSpeed child may take to build its 16 engines (~15 s quiet); the rest is for the
concurrency children's start and the readings."""
CONCURRENCY_START_SHARE = 0.2
TRANSPORT_START_SHARE = 0.4
"""Most of what is left of the box the rank-transport children (cpu_rank_transport.py: three processes, three engines
each; 18 s at load 3.5, 52 s at load 8-10 with six engines) may take to start; the rest is for the readings."""
TRANSPORT_MIN_LEFT_S = 45.0
"""Less of the box left than this after the other children started, and the rank-transport children are not started
(left out, said): their share would not cover a start (18 s at load 3.5) and would take the readings' time (a 3-min
--budget at load 8: 14 s spent on a start that failed, one reading left)."""


def measure_framework_overhead(hardware_name: str, dtype: str, threads: int = 1,
                               time_box_s: float = cf.RESERVED_S) -> dict | None:
    """The module docstring's readings for one dtype: the median terms, the samples behind them, every
    reading's terms and the spread between them, and the plan of steps that measured them (cpu_reading_plan.py: the
    light one where the dtype's steps are over LIGHT_ABOVE x fp32's here, chosen inside the box); None when the box
    was spent before a reading began. The box is
    kept: a child that does not start (or answer) in its part of it is left out, and a reading begins only when one
    as long as the last would end in it, MIN_READINGS or not (the entry's `readings` say how many)."""
    from llmperf_hook.profile.cpu_engine_cost import ConcurrencyReader, EngineReader
    from llmperf_hook.profile.cpu_rank_transport import TransportReader

    t0 = time.perf_counter()
    end_s = t0 + time_box_s
    plan, ratio = choose_plan(dtype)  # cpu_reading_plan.py: the light plan where the dtype's steps are slow here
    fixed, local = fixed_parts(dtype, hardware_name, plan), _InProcess(dtype, plan)
    engine = EngineReader(dtype, threads, max(0.0, ENGINE_START_SHARE * (end_s - time.perf_counter())),
                          shapes=plan.deepspeed, reps=plan.reps)
    conc = ConcurrencyReader(dtype, threads, start_timeout_s=max(0.0, CONCURRENCY_START_SHARE
                                                                 * (end_s - time.perf_counter())),
                             shapes=plan.concurrency, reps=plan.reps)
    left_s = end_s - time.perf_counter()
    # One thread per rank only: with an intra-op pool, process - calling-thread CPU is no longer gloo's alone.
    transport = TransportReader(dtype, threads, TRANSPORT_START_SHARE * left_s, engines=plan.transport,
                                reps=plan.reps) if left_s >= TRANSPORT_MIN_LEFT_S and threads == 1 else None
    raws, loads, last_s = [], [], 0.0
    try:
        while len(raws) < MAX_READINGS and time.perf_counter() + last_s < end_s:
            start = time.perf_counter()
            try:
                raw = local.reading(hardware_name, end_s)
            except OutOfTime:
                break
            raw["concurrency"] = conc.reading(max(0.0, end_s - time.perf_counter()))
            raw["engine"] = engine.reading(max(0.0, end_s - time.perf_counter()))
            raw["transport"] = transport.reading(max(0.0, end_s - time.perf_counter())) if transport else None
            raws.append(raw)
            loads.append(os.getloadavg()[0])
            last_s = time.perf_counter() - start
    finally:
        conc.close()
        engine.close()
        if transport:
            transport.close()
    if not raws:
        return None
    record = {**plan_record(plan, ratio), "tiny_isolated": TINY_ISOLATED}
    return {**summarize(raws, fixed, dtype, loads, time.perf_counter() - t0), "reading_plan": record}


def summarize(raws: Sequence[Mapping[str, Any]], fixed: FixedParts, dtype: str, loads: Sequence[float],
              took_s: float) -> dict:
    """The file's entry for one dtype from its readings (pure)."""
    per_reading = [reading_terms(r, fixed, dtype) for r in raws]
    medians, spread = combine_readings(per_reading)
    med = median_raw(raws)
    # One fit of the median times (module docstring, 3.): the engine terms are what the median engine steps
    # leave beyond THESE terms' prediction, not medians of residuals each taken against another reading's terms.
    terms = reading_terms({**med, "concurrency": medians.get("concurrency_slowdown")}, fixed, dtype, keep_samples=True)
    entry = {**terms, "profile_bias": med["bias"], "readings": per_reading, "spread": spread,
             "reading_loads_1m": list(loads), "reading_wall_per_cpu": [r.get("wall_per_cpu") for r in raws],
             "measure_s": took_s,
             "tiny_samples": [{"shape": list(s), "fwd_bwd_s": t, **p}
                              for s, t, p in zip(cf.TINY_LAYERS, med["tiny_s"], fixed.tiny)],
             "tiny_isolated_diff_s": med.get("tiny_isolated_diff_s"),
             "samples": reading_rows(med, fixed)}
    return entry


SPREAD_TERMS = (("per_unit_s", "per op unit"), ("compute_scale", "ops"), ("per_byte_s", "per byte"),
                ("optimizer_per_tensor_s", "Adam/tensor"), ("optimizer_per_param_s", "Adam/param"),
                ("concurrency_slowdown/2", "2 ranks"), ("rank_transport/per_byte_s", "gloo/byte"),
                ("rank_transport/step_jitter_cv", "rank jitter"), ("deepspeed_step/1/per_param_s", "ZeRO-1/param"),
                ("deepspeed_step/3/per_step_s", "ZeRO-3/step"))


def describe_spread(doc: Mapping[str, Any]) -> str:
    """One line per dtype: readings, loads and the spread between readings of the main terms ("" for a file of
    one reading, format 2)."""
    lines = []
    for dtype, entry in sorted((doc.get("dtypes") or {}).items()):
        if not entry.get("readings"):
            continue
        spread, loads = entry.get("spread") or {}, entry.get("reading_loads_1m") or [0.0]
        parts = [f"{label} {spread[key]:.0%}" for key, label in SPREAD_TERMS if spread.get(key) is not None]
        waits = [w for w in entry.get("reading_wall_per_cpu") or () if w]
        if waits:  # did the in-process part of a reading wait for a core (other programs on the machine)?
            parts.append(f"wall / CPU time of the in-process readings {min(waits):.2f}-{max(waits):.2f}")
        num, plan = len(entry.get("readings") or []), entry.get("reading_plan") or {}
        how = "" if plan.get("name", "full") == "full" else (  # cpu_reading_plan.py
            f" ({plan['name']} plan: smaller steps, a {dtype} step {plan.get('step_per_fp32') or 0:.1f}x fp32's here)")
        lines.append(f"framework cost {dtype}{how}: fitted on the median times of {num} readings (load "
                     f"{min(loads):.2f}-{max(loads):.2f}, {entry.get('measure_s', 0):.0f} s); spread between "
                     f"readings (half-range / median): " + ", ".join(parts))
    return "\n".join(lines)


def _previous(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None


def write_framework_overhead(profile_dir: Path, hardware_name: str, dtypes: Sequence[str], threads: int,
                             deadline_s: float | None = None, keep_earlier: bool = False) -> Path:
    """Measure every dtype the profile serves (each in an even share of the time to `deadline_s`, a
    time.perf_counter() time; default RESERVED_S from now) and write FILE_NAME next to its profile.json, with the
    machine's 1-minute load average before and after each dtype (load_avg_1m: the largest) and the steps of the file
    it replaces (cf.carried_history); the spread between readings goes to stderr (describe_spread). A dtype of which
    no reading ended in its time is left out. The file it replaces is moved aside while it measures (the residual
    is measured against the profile alone: a prediction of the reference models must not read it). When none was
    measured or the measurement failed, it is put back with `keep_earlier` (the testbed's re-measurement of the same
    fit keeps what there was) and removed without it: `llmperf profile` has just re-fitted the profile, and a
    residual measured against the earlier fit is stale (as profile_fit says when its --budget is too small)."""
    path = profile_dir / cf.FILE_NAME
    put_back_replaced(path)  # a run killed outright (SIGKILL) left the earlier file aside
    aside = _aside(path)
    history = cf.carried_history(_previous(path))
    if path.is_file():
        os.replace(path, aside)
    try:
        doc = _measure_dtypes(hardware_name, dtypes, threads, deadline_s)
        if doc["dtypes"]:
            write_whole(path, {**doc, "history": history})
    finally:
        if path.is_file() or not keep_earlier:  # written, or the earlier one is stale
            aside.unlink(missing_ok=True)
        else:  # nothing measured, or measuring or writing failed (Ctrl-C included)
            put_back_replaced(path)
    if doc["dtypes"]:
        sys.stderr.write(describe_spread(doc) + "\n")
    return path


def _aside(path: Path) -> Path:
    return path.with_name(path.name + ".replaced")


def put_back_replaced(path: Path) -> None:
    """Put the framework file that write_framework_overhead moved aside back at `path` when none is there (its
    re-measurement ended without writing one). os.replace: atomic on the one filesystem."""
    if _aside(path).is_file() and not path.is_file():
        os.replace(_aside(path), path)


def write_whole(path: Path, doc: dict) -> None:
    """Write `doc` with its digest (predict/cpu_framework.with_digest: a later edit is refused, not predicted with) to
    a temporary name and rename it: a reader never sees half a file, a failed write leaves none."""
    from llmperf_hook.predict.cpu_framework import with_digest

    fresh = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # its own: two runs of one name may write at once
    try:
        fresh.write_text(json.dumps(with_digest(doc), indent=1))
        os.replace(fresh, path)
    finally:
        fresh.unlink(missing_ok=True)


def _measure_dtypes(hardware_name: str, dtypes: Sequence[str], threads: int, deadline_s: float | None) -> dict:
    """The framework file's document (write_framework_overhead) without its history."""
    import torch

    from llmperf_hook.instrument.reference_speed import measure_reference
    from llmperf_hook.profile.cpu_engine_cost import ENGINE_METHOD

    torch.set_num_threads(threads)
    doc = {"format": cf.FORMAT, "format_version": cf.FORMAT_VERSION, "device": "cpu", "threads": threads,
           "clock": "process CPU time" if threads == 1 else "wall time",
           "measured_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "method": "llmperf_hook/profile/cpu_framework.py, cpu_framework_readings.py: isolating differences "
                     "(tiny models 1 vs 9 layers; reference GPT forward+backward against the fitted profile's "
                     "prediction; AdamW per tensor and flat; 2 ranks paired with alone; DeepSpeed engine step "
                     "against the prediction of the same model; gloo transport CPU per wire byte of a world-size-2 "
                     "engine beyond world size 1), fitted once on each time's median over interleaved "
                     "readings; each dtype on the steps of its entry's reading_plan (cpu_reading_plan.py)",
           "engine_method": ENGINE_METHOD, "dtypes": {}, "reference": [], "loads_1m": []}
    t0 = time.perf_counter()
    share_s, spent_s = ((cf.RESERVED_S if deadline_s is None else deadline_s - t0) / len(dtypes), 0.0)
    for i, dt in enumerate(dtypes):  # the machine's speed around each measurement (instrument/reference_speed.py)
        doc["reference"].append(measure_reference(f"framework-{dt}-before").to_json())
        doc["loads_1m"].append(os.getloadavg()[0])
        # Its share, less what the dtypes before ran over theirs, so together they keep to the deadline (27 Nov
        # at load 2.7-5.8, bf16's 3 readings took 85 s of its 60, fp32 then its whole 60: 146 s of 120).
        box_s = max(0.0, min(share_s, (i + 1) * share_s - spent_s))
        entry = measure_framework_overhead(hardware_name, dt, threads, box_s) if box_s > 0 else None
        if entry is not None:
            doc["dtypes"][dt] = {**entry, "time_box_s": box_s}
        spent_s = time.perf_counter() - t0
        doc["loads_1m"].append(os.getloadavg()[0])
    doc["reference"].append(measure_reference("framework-after").to_json())
    doc["load_avg_1m"] = max(doc["loads_1m"])
    return doc


def time_box_notes(path: Path, dtypes: Sequence[str], remedy: str | None = None) -> list[str]:
    """What the time box left out of the framework cost file at `path`, for `llmperf profile`'s output, each note
    ending with what measures it: `remedy` where the caller knows (the testbed: its own box), else profile_remedy."""
    measured = (_previous(path) or {}).get("dtypes") or {}
    notes = []
    for dtype in dtypes:
        if dtype not in measured:
            notes.append(f"framework cost {dtype}: not measured, no reading ended within its time box "
                         f"(predictions in {dtype} use the operator profile alone; "
                         f"{remedy or profile_remedy(None, len(dtypes))})")
        else:
            entry = measured[dtype]
            notes += _entry_notes(dtype, entry, remedy or profile_remedy(entry.get("time_box_s"), len(dtypes)))
    return notes


def profile_remedy(box_s: float | None, num_dtypes: int) -> str:
    """What gets `llmperf profile` a fuller framework file: a larger --budget only while the box was cut below its
    share of cf.RESERVED_S (budget.plan_budget: at most FRAMEWORK_SHARE of the --budget); past that the box is
    RESERVED_S whatever the --budget, and only a quieter machine (children that start and read faster) does."""
    from llmperf_hook.profile.budget import TAIL_CONCURRENT_S

    full_s = (cf.RESERVED_S - min(TAIL_CONCURRENT_S, cf.RESERVED_S)) / max(1, num_dtypes)  # its end reading's share out
    if box_s is not None and box_s >= 0.95 * full_s:
        return (f"its box was the whole {full_s:.0f} s a dtype gets whatever the --budget: rerun `llmperf profile` "
                f"when the machine is quieter")
    return (f"a larger --budget gives it more, up to {full_s:.0f} s a dtype at --budget >= "
            f"{2 * cf.RESERVED_S / 60:.0f} min; past that, a quieter machine")


def _entry_notes(dtype: str, entry: Mapping[str, Any], remedy: str | None = None) -> list[str]:
    remedy = remedy or profile_remedy(entry.get("time_box_s"), 1)
    notes, num = [], len(entry.get("readings") or ())
    if num < MIN_READINGS:
        notes.append(f"framework cost {dtype}: {num} reading(s) in its {entry.get('time_box_s', 0):.0f} s box, "
                     f"fewer than the {MIN_READINGS} whose median outvotes a disturbed one ({remedy})")
    missing = [what for key, what in (("deepspeed_step", "DeepSpeed's engine step (ZeRO 0-3)"),
                                      ("concurrency_slowdown", "the slowdown of ranks run at once"),
                                      ("rank_transport", "gloo's transport CPU at world size 2 "
                                                         "(cpu_rank_transport.py)"))
               if not entry.get(key)]
    if missing:
        notes.append(f"framework cost {dtype}: {' and '.join(missing)} not measured (its processes did not start "
                     f"or answer within the time box, or DeepSpeed is missing; gloo's transport is read with one "
                     f"thread per rank only): predictions leave those terms out ({remedy})")
    return notes
