"""Per-op model refit from the op samples an instrumented run recorded with `--profile-ops`.

The samples (graph op classes and dims, see instrument/op_profile.py) are in the shared store as op samples
of the run's hardware with source "instrument:<job id>". When that hardware has a user-fitted profile
($LLMPERF_HOME/profiles/<hardware>/, written by `llmperf profile`), every (op class, direction, dtype) that
gained instrument samples is refitted on the sampler's samples plus the instrument samples, with the profile's
own roofline normaliser and fitting code (profile.build_profile.fit_samples), and the profile is rewritten
(metadata last, so a reader never sees a half-written profile). Shipped profiles are never modified. Collective
samples are stored, never refitted: no profile has a per-op model for them (profile/features.py BUILDERS), the
cluster's communication model prices them.

Instrument samples time an op inside the real step under torch.profiler: on CPU they include the profiler's
few microseconds per op, so for tiny ops they read high; on GPU they are kernel times.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Any, Sequence

MIN_SAMPLES_TO_FIT = 8


def refit_op_models(hardware: str, samples: Sequence[dict[str, Any]]) -> str:
    """Refit the user profile of `hardware` where instrument samples were added; say what happened."""
    if not samples:
        return "no op samples"
    from llmperf_hook.resources import llmperf_home

    directory = llmperf_home() / "profiles" / hardware.strip().lower()
    if not (directory / "profile.json").is_file():
        return (f"{len(samples)} op samples of {hardware} stored; no user profile {directory} to refit "
                f"(create one with `llmperf profile --name {hardware}`), so the per-op models were not refitted")
    refitted = _refit_profile(directory, hardware)
    return f"refitted {', '.join(refitted)} in {directory}" if refitted else "no op class had enough samples to refit"


def refit_without_job(hardware: str, groups: set[tuple[str, str, str]]) -> str:
    """The user profile of `hardware` after a run's op samples left it (`llmperf refine --hardware B` moved a run
    first refined under A): each (op class, direction, dtype) `groups` names is refitted from what the store still
    holds for it (the sampler's samples, and other runs' instrument samples), so A's models no longer count the
    run's samples. Before, A kept the models refitted with them while the samples moved to B. Say what happened."""
    from llmperf_hook.resources import llmperf_home

    directory = llmperf_home() / "profiles" / hardware.strip().lower()
    if not groups or not (directory / "profile.json").is_file():
        return ""
    refitted = _refit_profile(directory, hardware, groups)
    return (f"{hardware}'s profile refitted without them: {', '.join(refitted)}" if refitted else
            f"{hardware}'s profile has no model left to refit without them")


def _refit_profile(directory: Any, hardware: str, only: set[tuple[str, str, str]] | None = None) -> list[str]:
    """Refit the groups that hold instrument samples (or, with `only`, those groups whatever they hold; one of them
    with too few samples left is removed: its model held the samples `only` names)."""
    from llmperf_hook.profile.features import BUILDERS
    from llmperf_hook.profile.profile_io import read_model_text, read_profile_meta, write_profile
    from llmperf_hook.store import open_store
    from llmperf_hook.store.sqlite_store import measured_fingerprint

    import json

    meta = read_profile_meta(directory)
    with open_store() as store:
        records = store.query_op_samples(hardware)
    # The sampler's samples of the machine this profile describes only, as `llmperf profile` fits them: a store
    # shared by several machines (an NFS home) may hold the same NAME sampled on another CPU or GPU.
    # Read as the store reads a row's (measured_fingerprint: a profile older than the torch in the fingerprint names
    # its torch in library_versions).
    fingerprint = measured_fingerprint(json.dumps(dict(meta.hardware), sort_keys=True),
                                       json.dumps(dict(meta.library_versions)))
    groups: dict[tuple[str, str, str], list] = defaultdict(list)
    for r in records:
        if r.source != "sampler" or r.fingerprint == fingerprint:
            groups[(r.op_class, r.phase, r.dtype)].append(r)
    texts = {e.file: read_model_text(directory, e) for e in meta.models}
    models, refitted = list(meta.models), []
    instrumented = {key for key, recs in groups.items() if any(r.source.startswith("instrument:") for r in recs)}
    for key in sorted(instrumented if only is None else only):
        recs = groups.get(key, [])
        if key[2] not in meta.roofline or key[0] not in BUILDERS:  # BUILDERS: a collective is the cluster's to price
            continue
        fitted = _fit_group(key, recs, meta.roofline[key[2]]) if recs else None
        if fitted is None:
            if only is not None and any((m.op_class, m.phase, m.dtype) == key for m in models):
                # fitted with the moved run's samples, too few left without them: unfitted, as the sampler left it
                models = [m for m in models if (m.op_class, m.phase, m.dtype) != key]
                refitted.append(f"{'/'.join(key)} removed ({len(recs)} samples left, {MIN_SAMPLES_TO_FIT} fit one)")
            continue
        entry, text = fitted
        models = [m for m in models if (m.op_class, m.phase, m.dtype) != key] + [entry]
        texts[entry.file] = text
        n_inst = sum(r.source.startswith("instrument:") for r in recs)
        refitted.append(f"{key[0]}/{key[1]}/{key[2]} ({len(recs) - n_inst} sampled + {n_inst} instrumented)")
    if refitted:
        provenance = {k: v for k, v in meta.provenance.items() if k != "refined"}
        if instrumented:  # no instrument sample left: the profile is the sampler's again
            provenance["refined"] = "refitted by `llmperf refine` with op samples of instrumented runs"
        write_profile(directory, replace(meta, models=tuple(models), provenance=provenance), texts)
    return refitted


def _fit_group(key: tuple[str, str, str], recs: list, roofline: Any) -> tuple[Any, str] | None:
    """The group's regressor from `recs` (without a held-out error: refine adds a few samples to a fitted group)."""
    import numpy as np

    from llmperf_hook.profile.build_profile import Samples, fit_samples

    dim_keys = sorted(next((r.dims for r in recs if r.source == "sampler"), recs[0].dims))
    usable = [r for r in recs if set(dim_keys) <= set(r.dims) and r.time_s > 0]
    if len(usable) < MIN_SAMPLES_TO_FIT:
        return None
    dims = {k: np.asarray([float(r.dims[k]) for r in usable]) for k in dim_keys}
    samples = Samples(key[0], key[1], dims, np.asarray([r.time_s for r in usable]))
    return fit_samples(samples, roofline, key[2], with_holdout=False)
