"""The end of `llmperf profile` for operators: one regressor per (op class, direction, dtype) from the stored samples,
written to $LLMPERF_HOME/profiles/NAME/ with the measured peaks in $LLMPERF_HOME/hardware/NAME.yaml, then on CPU the
framework cost (cpu_framework.py) against that profile, each within its part of the --budget (budget.py).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Collection, Mapping

import numpy as np

from llmperf_hook.errors import UsageError
from llmperf_hook.profile.budget import ProfileBudget
from llmperf_hook.profile.build_profile import Samples, fit_samples
from llmperf_hook.profile.features import RooflineConstants
from llmperf_hook.profile.profile_io import ProfileMeta, write_profile
from llmperf_hook.resources import configs_dir, llmperf_home

if TYPE_CHECKING:
    from llmperf_hook.profile.sampler import ProfileRequest

MIN_SAMPLES_TO_FIT = 8
UNFUSED_CLASSES = "rope,swiglu"
"""Op classes op_sampler times as torch composites of several kernels (predict/dispatch.unfused_classes)."""


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
    budget: ProfileBudget
    """The deadlines the run kept (the command's end reading keeps to its tail)."""
    phase_ends_s: tuple[tuple[str, float], ...] = ()
    """(phase, time.perf_counter() when it ended), in order: where the --budget went (commands/profile says it)."""
    expected_measured: int | None = None
    """Shapes the plan expected this --budget to measure (sampler.expected_run), None when not planned."""
    meta_sha256: str | None = None
    """The digest of the profile.json this run wrote (written_digest), to tell when another run replaced it."""


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


def fit_and_write(req: ProfileRequest, name: str, rc: RooflineConstants, fp: str, versions: Mapping[str, str],
                  groups: Mapping[tuple[str, str, str], Samples], measured: int, skipped: int,
                  plan_note: str, budget: ProfileBudget, asked: Collection[tuple[str, str]] = (),
                  refused: Refused | None = None) -> ProfileResult:
    """Fit every group until the budget's fitting deadline, write the profile and hardware file, then (CPU, a
    budget that measures it) the framework cost until its deadline. `asked`: the (class, phase) pairs the plan
    held in req.dtype; those left without a model are recorded (ProfileMeta.unfitted) and said, with why for those
    in `refused` (ProfileMeta.unfitted_reasons)."""
    from llmperf_hook.profile.local_hardware import GEMM_LAYOUTS, measure_roofline

    # Every dtype sampled on this device so far is refitted, so one profile NAME serves fp32 and bf16 runs.
    rooflines = {dt: (rc if dt == req.dtype else measure_roofline(dt, req.device, req.threads))
                 for dt in sorted({dt for _, _, dt in groups})}
    entries, texts, notes = _fit_groups(groups, rooflines, req.dtype, budget.fit_end_s)
    unfitted = unfitted_groups(groups, asked, req.dtype)
    refused = {k: v for k, v in (refused or {}).items() if k in unfitted}
    if unfitted:
        notes.insert(0, unfitted_note(unfitted, req.device, name, refused, req.budget_min))
    if not entries:
        raise UsageError(_nothing_fitted(req, plan_note, refused))
    meta = ProfileMeta(
        name=name, roofline={dt: rooflines[dt] for dt in {e.dtype for e in entries}}, dtype_aliases={},
        hardware=json.loads(fp),
        library_versions=dict(versions),
        provenance={"samples": f"llmperf profile --device {req.device} (store source 'sampler')",
                    "unfused_classes": UNFUSED_CLASSES, "peak_layouts": ",".join(GEMM_LAYOUTS),
                    "fitted_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "license": "own measurements"},
        models=tuple(entries), notes=tuple(notes), unfitted=unfitted,
        unfitted_reasons={k: refused_reason(*v) for k, v in refused.items()})
    earlier = fitted_samples_of(llmperf_home() / "profiles" / name)
    profile_dir = write_profile(llmperf_home() / "profiles" / name, meta, texts)
    digest = written_digest(profile_dir)
    yaml_path = _hardware_yaml(req, name, rc, rooflines)
    phase_ends_s = [("fitting and writing", time.perf_counter())]
    if measures_framework(req):  # framework work on the computing thread, measured against this profile
        from llmperf_hook.profile.cpu_framework import write_framework_overhead
        from llmperf_hook.profile.cpu_framework_readings import time_box_notes

        dtypes = sorted({e.dtype for e in entries})
        path = write_framework_overhead(profile_dir, name, dtypes, req.threads, budget.framework_end_s)
        notes += time_box_notes(path, dtypes)
        phase_ends_s.append(("framework cost", time.perf_counter()))
    elif req.device == "cpu":
        notes.append(framework_file_after_refit(profile_dir, earlier, entries, req.dtype))
    return ProfileResult(name, profile_dir, yaml_path, measured, skipped,
                         tuple(f"{e.op_class}/{e.phase}/{e.dtype}" for e in entries), plan_note, tuple(notes), budget,
                         tuple(phase_ends_s), meta_sha256=digest)


def written_digest(profile_dir: Path) -> str | None:
    """meta_sha256 of profile_dir/profile.json now (None when unreadable)."""
    try:
        return str(json.loads((profile_dir / "profile.json").read_text())["meta_sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def replaced_note(result: ProfileResult) -> str | None:
    """A line when the profile folder no longer holds this run's fit: another `llmperf profile --name` of the same
    name wrote after it (played: three profiles into one home at once; each summary listed its own regressors, and
    the folder held the last writer's)."""
    now = written_digest(result.profile_dir)
    if result.meta_sha256 is None or now == result.meta_sha256:
        return None
    return (f"{result.profile_dir} now holds another run's fit, written after this one (another `llmperf profile "
            f"--name {result.name}` at the same time, or a `refine`): the regressors listed above may not be the ones "
            f"`predict` uses; the samples of both are in the store, and the same command refits them all")


SampleSet = dict[tuple[str, str, str], tuple[int, tuple[tuple[str, float, float], ...]]]
"""{(class, phase, dtype): (samples, ((dim, low, high), ...))} of a profile's models: what each was fitted from."""


def fitted_samples_of(directory: Path) -> SampleSet | None:
    """The sample set of every model in `directory`/profile.json, read leniently (the refit that a profile without
    its digest names must still compare), or None when it cannot be read."""
    try:
        models = json.loads((directory / "profile.json").read_text())["models"]
        return {(str(m["op_class"]), str(m["phase"]), str(m["dtype"])): _sample_set(m["num_samples"], m["train_ranges"])
                for m in models}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _sample_set(num: object, ranges: Mapping[str, object]) -> tuple[int, tuple[tuple[str, float, float], ...]]:
    return int(num), tuple((str(k), float(lo), float(hi)) for k, (lo, hi) in sorted(ranges.items()))


def framework_file_after_refit(profile_dir: Path, earlier: SampleSet | None, entries: Collection,
                               dtype: str = "fp32") -> str:
    """A refit too short to measure the framework cost (--budget < MIN_BUDGET_MIN) keeps the framework file when
    every dtype it covers was refitted from the samples the earlier models were fitted from (same classes, and per
    class the same number of samples over the same ranges: no shape measured or recorded since), the usual case of
    the refit that a profile without its digest names: the cost was measured against regressors of those samples.
    Else the dtypes whose samples changed are removed from it (the whole file when none is left): their compute scale
    and residuals were measured against regressors that changed. Says which it did, and the command (in `dtype`, the
    one sampled: it measures every dtype of the profile) that measures it."""
    from llmperf_hook.profile.cpu_framework import FILE_NAME, MIN_BUDGET_MIN
    from llmperf_hook.profile.cpu_framework_readings import put_back_replaced

    path = profile_dir / FILE_NAME
    put_back_replaced(path)  # a --budget 3 run killed while it measured left the file aside
    found = _framework_entries(path)
    measure = (f"`llmperf profile --device cpu --dtype {dtype} --budget {MIN_BUDGET_MIN:g} --name {profile_dir.name}` "
               f"measures it (it needs --budget >= {MIN_BUDGET_MIN:g} min)")
    if found is None:
        return (f"framework cost on the CPU (profile/cpu_framework.py) not measured: {measure}; predictions on this "
                f"CPU use the operator profile alone")
    covered, unusable = found
    if unusable:
        path.unlink(missing_ok=True)
        return (f"framework cost removed ({path}): {unusable}; predictions on this CPU use the operator profile "
                f"alone until {measure}")
    now: SampleSet = {(e.op_class, e.phase, e.dtype): _sample_set(e.num_samples, e.train_ranges) for e in entries}
    changed = {dt: why for dt, entry in sorted(covered.items())
               if (why := _changes(earlier, now, dt) or reference_shift(entry, dt, profile_dir.name))}
    if not changed:
        return (f"framework cost kept ({path}, {', '.join(sorted(covered))}): this refit measured no new shape for "
                f"{'that dtype, so its' if len(covered) == 1 else 'those dtypes, so their'} regressors are fitted from "
                f"the samples the cost was measured against and predict its reference steps as before")
    kept = [dt for dt in covered if dt not in changed]
    what = "; ".join(f"{dt} ({why})" for dt, why in sorted(changed.items()))
    if kept and _drop_dtypes(path, set(changed)):
        return (f"framework cost of {', '.join(sorted(changed))} removed from {path}, kept for {', '.join(kept)}: it "
                f"was measured against the earlier fit, and this refit changed {what}; predictions in "
                f"{', '.join(sorted(changed))} on this CPU use the operator profile alone until {measure}")
    path.unlink(missing_ok=True)
    return (f"framework cost removed ({path}): it was measured against the earlier fit, and this refit changed "
            f"{what}; predictions on this CPU use the operator profile alone until {measure}")


def _drop_dtypes(path: Path, dtypes: set[str]) -> bool:
    """Rewrite the framework file without `dtypes` (cpu_framework_readings.write_whole: renamed over it, with its new
    digest); False when it cannot be."""
    from llmperf_hook.profile.cpu_framework_readings import write_whole

    try:
        doc = json.loads(path.read_text())
        write_whole(path, {**doc, "dtypes": {dt: v for dt, v in doc["dtypes"].items() if dt not in dtypes}})
        return True
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _framework_entries(path: Path) -> tuple[dict[str, dict], str] | None:
    """({dtype: entry} of a framework file, why it cannot be used: "" when it can), None without one. An edited file
    (its digest does not match: predict refuses it) is neither kept nor re-signed by _drop_dtypes."""
    from llmperf_hook.predict.cpu_framework import digest_problem

    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
        covered = {str(dt): entry if isinstance(entry, dict) else {} for dt, entry in doc["dtypes"].items()}
        return covered, digest_problem(doc) or ("" if covered else "the file holds no dtype")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}, "the file cannot be read"


REFERENCE_SHIFT_MAX = 0.02
"""How far (relative) a refit's regressors may move the prediction of a reference step the framework cost was measured
on before that cost counts as measured against other regressors. Equal sample sets do not make equal regressors:
another LightGBM, other fitting code, or other samples over the same count and ranges refit them differently. A refit
of the same samples on the same install moves them by its re-measured rooflines alone (+0.47 % on a step: h190, 28
Nov); the cost's own readings disagree by far more (compute_scale's spread 31 % at load 8, cpu-testbed 28 Nov), so
below this a re-measurement could not tell the difference."""


def reference_shift(entry: Mapping, dtype: str, name: str) -> str:
    """"" when profile `name`'s regressors now predict every reference step of the framework cost's `entry` (its
    samples: shape, predicted_compute_s, as cpu_framework_readings.fixed_parts predicted them when it was measured)
    within REFERENCE_SHIFT_MAX; else how far one moved. A file without them (format 2) is compared by its samples
    alone (_changes)."""
    from llmperf_hook.errors import LlmperfError
    from llmperf_hook.profile import cpu_framework as cf

    worst, where = 0.0, ""
    try:
        for row in entry.get("samples") or ():
            shape, before_s = tuple(int(v) for v in row["shape"]), float(row["predicted_compute_s"])
            shift = cf.predicted_parts(shape, dtype, name)["compute_s"] / before_s - 1.0
            if abs(shift) > abs(worst):
                worst, where = shift, "x".join(map(str, shape))
    except (LlmperfError, KeyError, TypeError, ValueError, ZeroDivisionError) as err:
        return f"its reference steps could not be predicted again ({type(err).__name__}: {err})"
    if abs(worst) <= REFERENCE_SHIFT_MAX:
        return ""
    return (f"the refitted regressors predict its reference step {where} {100 * worst:+.1f} % off what the cost was "
            f"measured against")


def _changes(earlier: SampleSet | None, now: SampleSet, dtype: str) -> str:
    """What differs between the sample sets of `dtype`'s models ("" when nothing does)."""
    if earlier is None:
        return "the earlier profile.json could not be read to compare"
    before = {k[:2]: v for k, v in earlier.items() if k[2] == dtype}
    after = {k[:2]: v for k, v in now.items() if k[2] == dtype}
    diffs = []
    for c, p in sorted(set(before) | set(after)):
        old, new = before.get((c, p)), after.get((c, p))
        if old != new:
            same_count = old is not None and new is not None and old[0] == new[0]
            diffs.append(f"{c}/{p} {_count(old)} -> {_count(new)} samples{', other ranges' if same_count else ''}")
    return ", ".join(diffs)


def _count(entry: tuple | None) -> str:
    return "no model" if entry is None else str(entry[0])


def unfitted_groups(groups: Mapping[tuple[str, str, str], Samples], asked: Collection[tuple[str, str]],
                    dtype: str) -> dict[str, int]:
    """{"class/phase/dtype": samples} of the groups left without a model: those stored with too few samples, and
    those the plan asked for in `dtype` that got none (a class the budget never reached, one whose runner failed;
    the store has no row of them, so nothing else would say they are missing)."""
    counts = {(c, p, dt): len(s.time_s) for (c, p, dt), s in groups.items()}
    counts.update({(c, p, dtype): 0 for c, p in asked if (c, p, dtype) not in counts})
    return {f"{c}/{p}/{dt}": n for (c, p, dt), n in sorted(counts.items()) if n < MIN_SAMPLES_TO_FIT}


FIRST_FIT_MAX_SAMPLE_S = 0.5
"""Past the sampling deadline, a class asked for that cannot be fitted yet still gets its MIN_SAMPLES_TO_FIT shapes,
each estimated to take at most this long (sampler.SamplingDeadline.allows: the design's small ones; a 12-s --budget is
spent on torch's import, LightGBM's and the peaks before any sampling, and a profile with no regressor is no
profile). A class whose first-fit shapes are estimated slower is left out (refused_reason)."""

Refused = Mapping[str, tuple[int, float]]
"""{"class/phase/dtype": (first-fit shapes not measured past the sampling deadline, each estimated over
FIRST_FIT_MAX_SAMPLE_S; their estimated seconds together)} (sampler.SamplingDeadline.refused)."""


def more_budget_min(refused: Refused) -> int:
    """Whole minutes more --budget that measure `refused`'s shapes before the sampling deadline, at their estimates
    (a lower bound: shapes stopped over their time and start-up are not in it)."""
    return _whole_min(sum(s for _, s in refused.values()))


def _whole_min(seconds: float) -> int:
    return max(math.ceil(seconds / 60.0), 1)


def refused_reason(shapes: int, seconds: float) -> str:
    """Why a class was left out although first fits run past the deadline (profile.json's unfitted_reasons; predict's
    per-class line says it)."""
    return (f"its {shapes} first-fit shape{'' if shapes == 1 else 's'} (about {seconds:.0f} s at the pace its class "
            f"ran here) were not measured past the sampling deadline, which takes only shapes estimated under "
            f"{FIRST_FIT_MAX_SAMPLE_S} s each; a --budget at least {_whole_min(seconds)} min "
            f"larger measures them")


def unfitted_note(unfitted: Mapping[str, int], device: str, name: str, refused: Refused | None = None,
                  budget_min: float | None = None) -> str:
    """One line for the groups left without a model, why, and the commands that add them: a group left from an
    earlier run under this name (other --ops, another --dtype) stays listed while it has too few samples, and the same
    command with a larger --budget never adds it (the design and the first fits are of the classes asked for, in
    --dtype: sampler._first_fit_classes); naming it with --ops gives it a first fit whatever the --budget. A group in
    `refused` (its first-fit shapes too slow to take past the deadline) needs a larger --budget instead, by how much
    said (`budget_min`: this run's)."""
    slow = {k: v for k, v in (refused or {}).items() if k in unfitted}
    listed = ", ".join(f"{key} ({n} sample{'' if n == 1 else 's'})" for key, n in unfitted.items())
    parts = []
    quick = [key for key in unfitted if key not in slow]
    if quick:
        parts.append(f"{_profile_commands(quick, device, name, None)} adds "
                     f"{'them' if len(quick) > 1 else 'it'} (each class named gets the {MIN_SAMPLES_TO_FIT} shapes "
                     f"of a first fit, whatever the --budget, when each is estimated under {FIRST_FIT_MAX_SAMPLE_S} "
                     f"s; stored shapes are reused)")
    if slow:
        why = ", ".join(f"{key}: {n} shape{'' if n == 1 else 's'}, about {s:.0f} s" for key, (n, s) in slow.items())
        budget = None if budget_min is None else budget_min + more_budget_min(slow)
        parts.append(f"{_profile_commands(list(slow), device, name, budget)} adds "
                     f"{'them' if len(slow) > 1 else 'it'} ({why}, at the pace their class ran here: their first-fit "
                     f"shapes were not measured past the sampling deadline, which takes only shapes estimated under "
                     f"{FIRST_FIT_MAX_SAMPLE_S} s each, so a --budget at least {more_budget_min(slow)} min larger "
                     f"measures them before it)")
    return (f"not fitted, so `predict` prices them with the roofline: {listed}; a regressor needs "
            f"{MIN_SAMPLES_TO_FIT} samples per class and direction: {'; '.join(parts)}")


def _profile_commands(keys: Collection[str], device: str, name: str, budget_min: float | None) -> str:
    """The `llmperf profile` commands that sample `keys` ("class/phase/dtype"), one per dtype."""
    classes: dict[str, set[str]] = {}
    for key in keys:
        op_class, _, dtype = key.split("/")
        classes.setdefault(dtype, set()).add(op_class)
    budget = "" if budget_min is None else f" --budget {budget_min:g}"
    return " and ".join(f"`llmperf profile --device {device} --dtype {dt} --ops {','.join(sorted(cs))}{budget} "
                        f"--name {name}`" for dt, cs in sorted(classes.items()))


def _nothing_fitted(req: ProfileRequest, plan_note: str, refused: Refused) -> str:
    """The exit-2 message of a run that fitted no regressor: why (the classes too slow for a first fit past the
    deadline, when the sampler found any) and the --budget that fixes it."""
    need = (f"need {MIN_SAMPLES_TO_FIT} per op class and direction; {_budget_part(plan_note)}")
    if not refused:
        return (f"--budget {req.budget_min:g} min measured too few shapes to fit any operator ({need}). Give a larger "
                f"--budget; samples measured so far are kept in the store and reused.")
    why = ", ".join(f"{key} ({n} shape{'' if n == 1 else 's'}, about {s:.0f} s)" for key, (n, s) in refused.items())
    return (f"--budget {req.budget_min:g} min measured too few shapes to fit any operator ({need}): the first-fit "
            f"shapes of {why} were not measured past the sampling deadline, which takes only shapes estimated under "
            f"{FIRST_FIT_MAX_SAMPLE_S} s each, at the pace their class ran here. Give a --budget at least "
            f"{more_budget_min(refused)} min larger (--budget {req.budget_min + more_budget_min(refused):g}); samples "
            f"measured so far are kept in the store and reused.")


def _budget_part(plan_note: str) -> str:
    """The plan line's split of the budget (budget.describe)."""
    return next((part for part in plan_note.split("; ") if part.startswith("budget ")), "")


HOLDOUT_COST = 1.5
"""A fit with its held-out error costs about this many fits without: 0.40 / 0.36 s (gemm) and 0.29 / 0.21 s
(layernorm), 32 samples each, 27 Nov 15:56 at load 0.9."""


def _fit_groups(groups: Mapping[tuple[str, str, str], Samples], rooflines: Mapping[str, RooflineConstants],
                dtype: str, deadline_s: float) -> tuple[list, dict[str, str], list[str]]:
    """(model entries, model texts, notes): one regressor per group of MIN_SAMPLES_TO_FIT or more, the sampled
    dtype's first. Held-out errors (20 samples or more) while the time left covers them for every group still to
    fit. Every group is fitted, past `deadline_s` too: skipping one would drop a model an earlier run fitted from
    the store's samples, and a fit without its held-out error is 0.05-0.4 s (HOLDOUT_COST)."""
    entries, texts, notes = [], {}, []
    started_s = time.perf_counter()
    todo = sorted(groups.items(), key=lambda kv: (kv[0][2] != dtype, kv[0]))
    fit_s = []
    for i, ((cls, phase, dt), s) in enumerate(todo):
        if len(s.time_s) < MIN_SAMPLES_TO_FIT:  # said by unfitted_note
            continue
        left_s, each_s = deadline_s - time.perf_counter(), (np.mean(fit_s) if fit_s else 0.5)
        holdout = len(s.time_s) >= 20 and left_s > (len(todo) - i) * each_s * HOLDOUT_COST
        t0 = time.perf_counter()
        entry, text = fit_samples(s, rooflines[dt], dt, with_holdout=holdout)
        fit_s.append((time.perf_counter() - t0) / (HOLDOUT_COST if holdout else 1.0))
        entries.append(entry)
        texts[entry.file] = text
    ended_s = time.perf_counter()
    if entries and ended_s - deadline_s > 0.5:  # a resumed run's stored classes under a smaller --budget: said
        late = (f" (it started {started_s - deadline_s:.0f} s past it, the phases before it having run over, and took "
                f"{ended_s - started_s:.0f} s)" if started_s > deadline_s else "")
        notes.append(f"fitting ran {ended_s - deadline_s:.0f} s past its share of the --budget{late}: every class "
                     f"with enough samples is refitted (the store's earlier ones too, or their models would be "
                     f"dropped)")
    return entries, texts, notes


def measures_framework(req: ProfileRequest) -> bool:
    from llmperf_hook.profile.cpu_framework import MIN_BUDGET_MIN

    return req.device == "cpu" and req.budget_min >= MIN_BUDGET_MIN


def _hardware_yaml(req: ProfileRequest, name: str, rc: RooflineConstants,
                   rooflines: Mapping[str, RooflineConstants]) -> Path:
    from llmperf_hook.profile.local_hardware import shipped_hardware_names, write_hardware_yaml

    if req.device == "cuda" and name in shipped_hardware_names():
        # A GPU with a shipped preset keeps its datasheet description; only the operator profile is user-fitted.
        yaml_path = configs_dir() / "hardware" / f"{name}.yaml"
    else:
        yaml_path = write_hardware_yaml(name, req.device, _peaks(req, rooflines), rc, req.threads)
    return yaml_path
