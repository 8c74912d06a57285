"""Fitted hardware profiles on disk: `NAME/profile.json` (metadata) + one model file per (op class, direction).

profile.json holds the feature-schema hash of every model, the sha256 of every model file, the roofline
constants the target is relative to (and their sha256: every prediction scales with them, so a hand-edited peak
is as unusable as an edited model), the training range of every dim (extrapolation is reported, not hidden),
the hardware fingerprint, library versions and provenance, and a sha256 of all of that (meta_sha256). Loading
checks all of it, and refuses a folder with a pickle in it, and raises ProfileError
with the path and the fix on any mismatch: a corrupted or stale profile never yields a number.
No pickle: models are LightGBM text dumps (gzip-compressed as NAME.txt.gz) or JSON tree arrays, each with its
parsed arrays beside it (NAME.trees.gz, packed_trees.py) so that predict does not parse text.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import re
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Mapping

from llmperf_hook.errors import ProfileError
from llmperf_hook.profile.features import BUILDERS, RooflineConstants, schema_hash
from llmperf_hook.profile.hinge import HINGE_TERMS, Hinge
from llmperf_hook.profile.packed_trees import StalePackedTrees, pack_trees, packed_name, unpack_trees
from llmperf_hook.profile.pickle_scan import planted_pickle_reason
from llmperf_hook.profile.tree_eval import LinearBaseline, TreeEnsemble, parse_lightgbm_text, parse_sklearn_json
from llmperf_hook.resources import configs_dir

PROFILE_FORMAT = "llmperf-profile"
PROFILE_FORMAT_VERSION = 1
META_FILE = "profile.json"


@dataclass(frozen=True)
class ModelEntry:
    """One regressor of a profile."""

    op_class: str
    phase: str
    """"fwd" (also serves recompute and the optimizer's step) or "bwd"."""
    dtype: str
    """The dtype the samples were measured in."""
    file: str
    """File name inside the profile directory."""
    model_format: str
    """"lightgbm-text" | "sklearn-gbr-json"."""
    sha256: str
    schema_hash: str
    feature_names: tuple[str, ...]
    train_ranges: Mapping[str, tuple[float, float]]
    """Per contract dim: (min, max) over the training samples."""
    num_samples: int
    holdout_mape: float | None = None
    """Mean absolute percentage error on samples held out of this fit (None when not measured)."""
    floor_s: float = 0.0
    """Fixed time added to the roofline in the target's normaliser: t = (roofline + floor) * exp(model)."""
    baseline: LinearBaseline | None = None
    """Linear term under the trees (model = baseline + trees); None in profiles fitted without one."""
    hinge: tuple[float, float, float, float] | None = None
    """(a_s, b_s, c_s, d_s) of the hinge normaliser min(a + b u, c + d w) (profile/hinge.py) that replaces roofline +
    floor_s for this model: t = hinge * exp(model); None for the roofline."""
    packed_file: str | None = None
    """The model's trees as parsed arrays (packed_trees.py), read instead of parsing `file`; None in profiles
    written before packed files existed (then `file` is parsed)."""
    packed_sha256: str | None = None
    unaligned_samples: int | None = None
    """How many training samples had a leading dimension that is not 16-byte aligned (gemm / bmm n or k, attention
    head_dim: predict/gemm_alignment.unaligned_sample_count), so the model may have learned that slowness; None for
    other classes and in profiles fitted before it was recorded (the shipped ones sampled aligned widths only)."""


@dataclass(frozen=True)
class ProfileMeta:
    """Everything in profile.json."""

    name: str
    roofline: Mapping[str, RooflineConstants]
    """Per sampled dtype: the normaliser of its models' targets."""
    dtype_aliases: Mapping[str, str]
    """Dtypes answered by another dtype's models, e.g. {"bf16": "fp16"} for GPUs (same tensor-core rate and width)."""
    hardware: Mapping[str, str]
    """Fingerprint: device name, count of SMs/cores, driver/CUDA or CPU model."""
    library_versions: Mapping[str, str]
    provenance: Mapping[str, str]
    """Where the samples came from (and their license / attribution), when and with which tool."""
    models: tuple[ModelEntry, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)
    unfitted: Mapping[str, int] = field(default_factory=dict)
    """"class/phase/dtype" -> samples, of what `llmperf profile` was asked to sample but could not fit (fewer than
    profile_fit.MIN_SAMPLES_TO_FIT within the --budget, 0 included): predict prices those with the roofline and says
    why per class (FittedProfile.unfitted_note). Absent from profile.json when empty (older profiles unchanged)."""
    unfitted_reasons: Mapping[str, str] = field(default_factory=dict)
    """"class/phase/dtype" -> why the sampler left it out, of the unfitted groups it found a reason for (first-fit
    shapes too slow to take past the deadline: profile_fit.refused_reason); predict adds it to the class's line. Absent
    from profile.json when empty."""

    @property
    def serves_dtypes(self) -> tuple[str, ...]:
        sampled = {m.dtype for m in self.models}
        return tuple(sorted(sampled | {a for a, d in self.dtype_aliases.items() if d in sampled}))

    def model_dtype(self, dtype: str) -> str:
        """The sampled dtype whose models answer `dtype`."""
        return dtype if any(m.dtype == dtype for m in self.models) else self.dtype_aliases.get(dtype, dtype)


OPTIMIZER_SAMPLE_KEY = "optimizer_sample_bytes_per_param"
"""Provenance key: HBM bytes per parameter of the Adam step the profile's optimizer samples timed, the unit its
optimizer regressor answers in (predict/optimizer_bytes.py scales it to the bytes of the Adam a job runs)."""
SAMPLER_ADAM_BYTES_PER_PARAM = 72.0
"""What `llmperf profile` has always timed (op_sampler._optimizer): torch.optim.Adam, weight decay 0, over fp32
parameters, the foreach path on a GPU and the single-tensor one on a CPU, the same passes: exp_avg.lerp_(grad) (read
8, write 4), exp_avg_sq.mul_ (4 + 4), addcmul_(grad, grad) (8 + 4), sqrt (4 + 4), div_ (4 + 4), add_ eps (4 + 4),
param.addcdiv_(exp_avg, denom) (12 + 4): 72 B (torch/optim/adam.py _multi_tensor_adam, _single_tensor_adam). The
default for a profile without OPTIMIZER_SAMPLE_KEY."""


def optimizer_sample_bytes_per_param(meta: "ProfileMeta") -> float:
    """Bytes per parameter of the Adam the profile's optimizer samples ran (OPTIMIZER_SAMPLE_KEY in its provenance,
    else SAMPLER_ADAM_BYTES_PER_PARAM); read_profile_meta has checked it is a positive number."""
    return float(meta.provenance.get(OPTIMIZER_SAMPLE_KEY, SAMPLER_ADAM_BYTES_PER_PARAM))


def _check_optimizer_sample(directory: Path, provenance: object) -> None:
    if not isinstance(provenance, Mapping):
        return
    value = provenance.get(OPTIMIZER_SAMPLE_KEY, SAMPLER_ADAM_BYTES_PER_PARAM)
    try:  # a JSON true is no byte count (float(True) is 1)
        ok = not isinstance(value, bool) and math.isfinite(float(value)) and float(value) > 0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise _fail(directory, f"provenance {OPTIMIZER_SAMPLE_KEY} is {value!r}, not a positive number of bytes per "
                               f"parameter (the Adam its optimizer samples ran; {SAMPLER_ADAM_BYTES_PER_PARAM:g} for "
                               f"`llmperf profile`'s fp32 torch.optim.Adam)")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _roofline_doc(roofline: Mapping[str, RooflineConstants]) -> dict:
    return {dt: {k: (int(v) if k in ("num_sms", "dtype_bytes") else float(v)) for k, v in rc.__dict__.items()}
            for dt, rc in roofline.items()}


def roofline_sha256(roofline: Mapping[str, RooflineConstants]) -> str:
    """sha256 of the roofline constants as canonical JSON (sorted keys, counts as ints, the rest as floats), so
    the same constants written by any writer, or re-read and re-written, give the same digest."""
    return _sha(json.dumps(_roofline_doc(roofline), sort_keys=True).encode())


PROFILE_KEYS = frozenset({"format", "format_version", "name", "roofline", "roofline_sha256", "dtype_aliases",
                          "hardware", "library_versions", "provenance", "notes", "models", "meta_sha256", "unfitted",
                          "unfitted_reasons"})
"""The top-level keys of profile.json, as write_profile writes them."""


_FILE_KEYS = ("file", "sha256", "packed_file", "packed_sha256")
"""Per-model keys naming files and their digests: checked against the files themselves, so outside meta_sha256."""


def meta_sha256(doc: Mapping) -> str:
    """sha256 of profile.json's content as canonical JSON (sorted keys; floats as Python writes them, which read
    back exactly), leaving out this digest and each model's file name and file sha256 (checked against the file
    itself: a damaged one fails that check, and a profile re-pointed at other model files is still read). It covers
    what the file digests and roofline_sha256 do not: a model's floor_s and linear baseline scale its predictions,
    its train_ranges decide what is reported as extrapolation."""
    models = doc.get("models")
    if isinstance(models, list):
        models = [{k: v for k, v in m.items() if k not in _FILE_KEYS} if isinstance(m, dict) else m
                  for m in models]
    covered = {**{k: v for k, v in doc.items() if k != "meta_sha256"}, "models": models}
    return _sha(json.dumps(covered, sort_keys=True).encode())


def write_profile(directory: Path, meta: ProfileMeta, model_texts: Mapping[str, str]) -> Path:
    """Write the model files, then profile.json, into a staging folder swapped in for `directory` as a whole
    (staged_folder.py: a stopped or concurrent refit never leaves one fit's models beside another's profile.json).
    Its other files (reference_speed.json, framework_overhead.json) are kept; model files of the old profile are not."""
    from llmperf_hook.profile.staged_folder import replace_folder

    return replace_folder(directory, lambda stage: _write_files(stage, meta, model_texts),
                          keep=lambda name: not name.startswith(META_FILE) and not MODEL_FILE.fullmatch(name))


MODEL_FILE = re.compile(r"[a-z_]+\.(?:fwd|bwd)\.[a-z0-9]+\.(?:txt|json|trees)(?:\.gz)?")
"""A model or packed file's name (OP.PHASE.DTYPE.EXT, model_file_names and packed_name)."""


def _write_files(directory: Path, meta: ProfileMeta, model_texts: Mapping[str, str]) -> None:
    entries = []
    for entry in meta.models:
        data = encode_model_text(entry.file, model_texts[entry.file])
        (directory / entry.file).write_bytes(data)
        packed = pack_trees(parse_model_text(entry, model_texts[entry.file]), _sha(data))
        (directory / packed_name(entry.file)).write_bytes(packed)
        doc_entry = {**entry.__dict__, "sha256": _sha(data), "feature_names": list(entry.feature_names),
                     "train_ranges": {k: list(v) for k, v in entry.train_ranges.items()},
                     "packed_file": packed_name(entry.file), "packed_sha256": _sha(packed)}
        if entry.baseline is None:
            doc_entry.pop("baseline")  # profiles without one stay byte-identical to older writers' output
        else:
            doc_entry["baseline"] = {**entry.baseline.__dict__, "weights": list(entry.baseline.weights)}
        if entry.hinge is None:
            doc_entry.pop("hinge")  # likewise
        else:
            doc_entry["hinge"] = list(entry.hinge)
        if entry.unaligned_samples is None:
            doc_entry.pop("unaligned_samples")  # likewise
        entries.append(doc_entry)
    doc = {"format": PROFILE_FORMAT, "format_version": PROFILE_FORMAT_VERSION, "name": meta.name,
           "roofline": _roofline_doc(meta.roofline), "roofline_sha256": roofline_sha256(meta.roofline),
           "dtype_aliases": dict(meta.dtype_aliases),
           "hardware": dict(meta.hardware), "library_versions": dict(meta.library_versions),
           "provenance": dict(meta.provenance), "notes": list(meta.notes), "models": entries}
    fitted = {f"{m.op_class}/{m.phase}/{m.dtype}" for m in meta.models}
    unfitted = {k: int(n) for k, n in sorted(meta.unfitted.items()) if k not in fitted}  # a refit (refine) fitted it
    if unfitted:
        doc["unfitted"] = unfitted
    reasons = {k: str(why) for k, why in sorted(meta.unfitted_reasons.items()) if k in unfitted}
    if reasons:
        doc["unfitted_reasons"] = reasons
    doc["meta_sha256"] = meta_sha256(json.loads(json.dumps(doc)))  # as a reader will see it (lists, not tuples)
    (directory / META_FILE).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def _fail(directory: Path, what: str) -> ProfileError:
    return ProfileError(
        f"fitted profile {directory} is unusable: {what}. A damaged or stale profile is never used for "
        f"predictions. Re-create it (`llmperf profile ...`, or `python benchmarks/fit_shipped_profiles.py` for "
        f"the shipped ones), or delete the directory to fall back to the roofline model.")


def _entry(directory: Path, raw: dict) -> ModelEntry:
    entry = ModelEntry(
        op_class=str(raw["op_class"]), phase=str(raw["phase"]), dtype=str(raw["dtype"]), file=str(raw["file"]),
        model_format=str(raw["model_format"]), sha256=str(raw["sha256"]), schema_hash=str(raw["schema_hash"]),
        feature_names=tuple(raw["feature_names"]),
        train_ranges={k: (float(v[0]), float(v[1])) for k, v in raw["train_ranges"].items()},
        num_samples=int(raw["num_samples"]), holdout_mape=raw.get("holdout_mape"), floor_s=float(raw.get("floor_s", 0.0)),
        baseline=_baseline(directory, raw), hinge=_hinge(directory, raw),
        packed_file=None if raw.get("packed_file") is None else str(raw["packed_file"]),
        packed_sha256=None if raw.get("packed_sha256") is None else str(raw["packed_sha256"]),
        unaligned_samples=_unaligned_samples(directory, raw))
    if not (0.0 <= entry.floor_s < 10.0):
        raise _fail(directory, f"model {entry.file} has an implausible floor_s {entry.floor_s}")
    bad_ranges = {k: v for k, v in entry.train_ranges.items() if not (math.isfinite(v[0]) and math.isfinite(v[1])
                                                                       and v[0] <= v[1])}
    if bad_ranges:  # NaN compares False both ways: every shape would read as inside it, extrapolation unsaid
        raise _fail(directory, f"model {entry.file} has training range(s) that are not finite [low, high] pairs "
                               f"({', '.join(f'{k} {list(v)}' for k, v in sorted(bad_ranges.items()))})")
    if entry.op_class not in BUILDERS or entry.phase not in ("fwd", "bwd"):
        raise _fail(directory, f"model {entry.file} is for unknown op class/phase {entry.op_class}/{entry.phase}")
    expected = schema_hash(entry.op_class, entry.phase == "bwd")
    if entry.schema_hash != expected:
        raise _fail(directory, f"model {entry.file} was fitted with feature schema {entry.schema_hash}, this "
                               f"llmperf computes schema {expected} for {entry.op_class}/{entry.phase}")
    if entry.model_format not in ("lightgbm-text", "sklearn-gbr-json"):
        raise _fail(directory, f"model {entry.file} has unknown format {entry.model_format!r}")
    for name in filter(None, (entry.file, entry.packed_file)):
        if "/" in name or "\\" in name or name.startswith("."):
            raise _fail(directory, f"model file name {name!r} points outside the profile")
    if entry.file not in model_file_names(entry):
        # outside meta_sha256 with the other file keys, and its file's sha256 only proves the file is the one named:
        # re-pointed at another model's file (and digest), layernorm/fwd predicted with the bwd model's times
        raise _fail(directory, f"model {entry.op_class}/{entry.phase}/{entry.dtype} names file {entry.file!r}, "
                               f"not {model_file_names(entry)[0]!r} (corrupted or edited: another model's file)")
    if entry.packed_file is not None and entry.packed_file != packed_name(entry.file):
        # outside meta_sha256 like the other file keys, but unlike them a changed name is not caught by its file
        # (a packed file that is not there is no damage: the text is parsed), so it is checked against the one
        # write_profile derives from the model file's name
        raise _fail(directory, f"model {entry.file} names packed file {entry.packed_file!r}, not "
                               f"{packed_name(entry.file)!r} (corrupted or edited)")
    return entry


MODEL_FILE_EXTENSIONS = {"lightgbm-text": ("txt.gz", "txt"), "sklearn-gbr-json": ("json", "json.gz")}
"""The endings of a model file per format, the one build_profile writes first (a .gz is decompressed on reading)."""


def model_file_names(entry: ModelEntry) -> tuple[str, ...]:
    """The names a model's file may have: OP.PHASE.DTYPE.EXT, as build_profile.fit_samples names it."""
    stem = f"{entry.op_class}.{entry.phase}.{entry.dtype}"
    return tuple(f"{stem}.{ext}" for ext in MODEL_FILE_EXTENSIONS.get(entry.model_format, ()))


def _hinge(directory: Path, raw: dict) -> tuple[float, float, float, float] | None:
    values = raw.get("hinge")
    if values is None:
        return None
    if raw["op_class"] not in HINGE_TERMS or len(values) != 4 or not Hinge.from_sequence(values).valid():
        raise _fail(directory, f"model {raw['file']} has a malformed hinge {values!r} (four positive times and "
                               f"per-element times, fixed times under 10 s, for the classes {sorted(HINGE_TERMS)})")
    return Hinge.from_sequence(values).as_tuple()


def _unfitted(directory: Path, raw: object) -> dict[str, int]:
    """profile.json's "unfitted": {"class/phase/dtype": samples}, each count a non-negative integer."""
    if not isinstance(raw, dict) or not all(
            isinstance(k, str) and k.count("/") == 2 and isinstance(n, int) and not isinstance(n, bool) and n >= 0
            for k, n in raw.items()):
        raise _fail(directory, f"{META_FILE}'s unfitted {raw!r} is not a mapping of 'class/phase/dtype' to a count "
                               f"of samples")
    return dict(raw)


def _unfitted_reasons(directory: Path, raw: object, unfitted: Mapping[str, int]) -> dict[str, str]:
    """profile.json's "unfitted_reasons": {"class/phase/dtype": why}, each of a group in "unfitted"."""
    if not isinstance(raw, dict) or not all(isinstance(k, str) and k in unfitted and isinstance(why, str)
                                            for k, why in raw.items()):
        raise _fail(directory, f"{META_FILE}'s unfitted_reasons {raw!r} is not a mapping of its unfitted "
                               f"'class/phase/dtype' groups to a reason")
    return dict(raw)


def _unaligned_samples(directory: Path, raw: dict) -> int | None:
    count = raw.get("unaligned_samples")
    if count is None:
        return None
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= int(raw["num_samples"]):
        raise _fail(directory, f"model {raw['file']} has unaligned_samples {count!r}, not a count of its "
                               f"{raw['num_samples']} samples")
    return count


def _baseline(directory: Path, raw: dict) -> LinearBaseline | None:
    doc = raw.get("baseline")
    if doc is None:
        return None
    base = LinearBaseline(tuple(float(w) for w in doc["weights"]), float(doc["intercept"]), float(doc["low"]),
                          float(doc["high"]))
    values = (*base.weights, base.intercept, base.low, base.high)
    if len(base.weights) != len(raw["feature_names"]) or not all(abs(v) < 1e6 for v in values) \
            or not base.low <= base.high:
        raise _fail(directory, f"model {raw['file']} has a malformed linear baseline")
    return base


def check_no_pickle(directory: Path) -> None:
    """Refuse a profile folder holding a pickle: llmperf writes and reads only JSON and LightGBM text, so a pickle
    there was put by someone else, and the folder is not what `llmperf profile` wrote (a shared profile is exactly
    where a planted pickle would be loaded by a tool that trusts it; pickle_scan.py says what counts as one)."""
    reason = planted_pickle_reason(directory, f"{META_FILE} and LightGBM text dumps")
    if reason is not None:
        raise _fail(directory, reason)


def read_profile_meta(directory: Path) -> ProfileMeta:
    check_no_pickle(directory)
    path = directory / META_FILE
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise _fail(directory, f"{META_FILE} is missing") from None
    except (OSError, ValueError) as err:
        raise _fail(directory, f"{META_FILE} is not valid JSON ({err})") from err
    if not isinstance(doc, dict) or doc.get("format") != PROFILE_FORMAT:
        raise _fail(directory, f"{META_FILE} is not an llmperf profile (format={doc.get('format') if isinstance(doc, dict) else None!r})")
    if doc.get("format_version") != PROFILE_FORMAT_VERSION:
        # repr: a string "1" printed as `format_version 1 is not 1`
        raise _fail(directory, f"format_version {doc.get('format_version')!r} is not {PROFILE_FORMAT_VERSION!r}, the "
                               f"only one this llmperf reads (a newer llmperf wrote it, or the field was edited)")
    unknown = sorted(set(doc) - PROFILE_KEYS)
    if unknown:  # a damaged key name: "meta_sha257" would otherwise read as a profile without its digest
        raise _fail(directory, f"{META_FILE} has key(s) no llmperf writer writes: {', '.join(unknown)} (a damaged "
                               f"or edited key name)")
    try:
        rc = {dt: RooflineConstants(**{k: (int(v) if k in ("num_sms", "dtype_bytes") else float(v))
                                       for k, v in consts.items()}) for dt, consts in doc["roofline"].items()}
        models = tuple(_entry(directory, m) for m in doc["models"])
        meta = ProfileMeta(name=str(doc["name"]), roofline=rc, dtype_aliases=dict(doc["dtype_aliases"]),
                           hardware=doc["hardware"], library_versions=doc["library_versions"],
                           provenance=doc["provenance"], models=models, notes=tuple(doc.get("notes", ())),
                           unfitted=(unfitted := _unfitted(directory, doc.get("unfitted", {}))),
                           unfitted_reasons=_unfitted_reasons(directory, doc.get("unfitted_reasons", {}), unfitted))
    except ProfileError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:  # AttributeError: a list or
        # string where a mapping belongs ("roofline": "x")
        raise _fail(directory, f"{META_FILE} lacks or mistypes a field ({type(err).__name__}: {err})") from err
    _check_roofline_sha(directory, doc, rc)
    _check_optimizer_sample(directory, meta.provenance)
    if "meta_sha256" not in doc:
        raise _missing_digest(directory, meta)
    if doc["meta_sha256"] != meta_sha256(doc):
        raise _fail(directory, f"{META_FILE} does not match its meta_sha256 (corrupted or edited: a changed digit "
                               f"of a model's floor, baseline or training range would change or hide what it "
                               f"predicts)")
    bad = [f"{r.peak_flop_per_s}/{r.memory_bandwidth_bytes_per_s}" for r in rc.values()
           if not (r.peak_flop_per_s > 0 and r.memory_bandwidth_bytes_per_s > 0 and r.num_sms > 0)]
    missing = sorted({m.dtype for m in models} - set(rc))
    if bad or missing:
        raise _fail(directory, f"roofline constants invalid ({bad}) or missing for dtypes {missing}")
    return meta


def _missing_digest(directory: Path, meta: ProfileMeta) -> ProfileError:
    """A profile.json without meta_sha256 is refused, shipped or not: without it an edit of a model's floor,
    baseline, training range or of the hardware fingerprint goes unnoticed. A user profile may come from llmperf
    before 811813e2 (26 Nov 2026), whose write_profile wrote none; one sampled by `llmperf profile` is re-fitted from
    its samples in the store by one command: every fit refits every dtype the store holds for the name
    (profile_fit.fit_and_write), so the dtype with the most classes is named with only its classes (a class that
    dtype never had would get the 8 new shapes of a first fit)."""
    edit = ("an edit of a model's floor, baseline or training range, or of the hardware fingerprint, would go "
            "unnoticed")
    sampled = re.match(r"llmperf profile --device (cpu|cuda)\b", str(meta.provenance.get("samples", "")))
    if is_shipped(directory) or sampled is None:  # fitted by a script from published samples: no command re-fits it
        return _fail(directory, f"{META_FILE} has no meta_sha256, the digest every profile written by llmperf "
                                f"carries (the line was removed or the file written by hand: {edit})")
    classes: dict[str, set[str]] = {}
    for m in meta.models:
        classes.setdefault(m.dtype, set()).add(m.op_class)
    dtype = max(sorted(classes), key=lambda dt: len(classes[dt]))
    return ProfileError(f"fitted profile {directory} is unusable: {META_FILE} has no meta_sha256 (an older llmperf "
                        f"wrote none, before 27 Nov 2026; else the line was removed or the file written by hand), "
                        f"without which {edit}. Re-fit it on the machine that measured it (with its --store, if it "
                        f"had one): `llmperf profile --device {sampled.group(1)} --dtype {dtype} --ops "
                        f"{','.join(sorted(classes[dtype]))} --budget 0.2 --name {directory.name}` (the samples in the "
                        f"store are reused, not measured again, and every dtype of the profile is refitted), or get "
                        f"an intact copy from whoever fitted it; or delete the directory to fall back to the roofline "
                        f"model.")


@lru_cache(maxsize=1)
def installed_torch_version() -> str | None:
    """torch's version from its package metadata (no import; once per process: `tune` predicts thousands of times)."""
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def measured_under_notes(meta: ProfileMeta) -> tuple[str, ...]:
    """One line when the profile's samples were timed under another torch than the one installed here (the
    fingerprint's "torch", local_hardware.fingerprint; profiles without it, e.g. the shipped ones fitted from
    public samples, say nothing): another torch brings other kernels, so the same op may time differently. The
    installed version is read from the package metadata: predict never imports torch."""
    theirs = meta.hardware.get("torch") if isinstance(meta.hardware, Mapping) else None
    if not theirs:  # checked first: the metadata lookup costs tens of milliseconds of a predict
        return ()
    ours = installed_torch_version()
    # No torch here: the job's environment is unknown. The local build tag (+cu121, +cpu) is left out: a GPU profile
    # is often used from a login node's CPU build of the same torch.
    if ours is None or ours.split("+")[0] == str(theirs).split("+")[0]:
        return ()
    return (f"operator profile {meta.name} was measured under torch {theirs}; this environment has torch {ours}, "
            f"whose kernels may time the same ops differently. Re-measure with `llmperf profile ... --name "
            f"{meta.name}` (samples of the other torch are measured again, not mixed in)",)


def is_shipped(directory: Path) -> bool:
    """Whether `directory` is one of the profiles shipped with llmperf (configs/profiles/NAME): a missing
    roofline_sha256 is damage there (benchmarks/fit_shipped_profiles.py, fit_measured_profile.py write it), and a
    missing meta_sha256 is not re-fitted by `llmperf profile` but by those scripts."""
    try:
        shipped_root = (configs_dir() / "profiles").resolve()
    except FileNotFoundError:
        return False
    return directory.resolve().parent == shipped_root


def _check_roofline_sha(directory: Path, doc: dict, rc: Mapping[str, RooflineConstants]) -> None:
    """The roofline constants must match the roofline_sha256 written with them. Profiles written before the
    digest existed have none and are read as before; a shipped one without it is refused."""
    expected = doc.get("roofline_sha256")
    if expected is None and is_shipped(directory):
        raise _fail(directory, f"{META_FILE} has no roofline_sha256, which every shipped profile carries")
    if expected is None:
        return
    if expected != roofline_sha256(rc):
        consts = "; ".join(f"{dt}: peak {r.peak_flop_per_s:.4g} FLOP/s, memory {r.memory_bandwidth_bytes_per_s:.4g} "
                           f"B/s, {r.num_sms} SMs/cores, {r.dtype_bytes} B" for dt, r in sorted(rc.items()))
        raise _fail(directory, f"its roofline constants ({consts}) do not match their roofline_sha256 in {META_FILE} "
                               f"(corrupted or edited: every model predicts a ratio to the roofline it was fitted "
                               f"with, so a changed peak or bandwidth would scale every operator time)")


def _verified_bytes(directory: Path, entry: ModelEntry) -> bytes:
    """The model file's bytes after checking them against its sha256 in profile.json."""
    try:
        data = (directory / entry.file).read_bytes()
    except OSError as err:
        raise _fail(directory, f"model file {entry.file} cannot be read ({err})") from err
    if _sha(data) != entry.sha256:
        raise _fail(directory, f"model file {entry.file} does not match its sha256 in {META_FILE} (corrupted or edited)")
    return data


def read_model_text(directory: Path, entry: ModelEntry) -> str:
    """The model file's text after checking its sha256 against profile.json."""
    data = _verified_bytes(directory, entry)
    if entry.file.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as err:
            raise _fail(directory, f"model file {entry.file} is not valid gzip ({err})") from err
    try:
        return data.decode()
    except UnicodeDecodeError as err:
        raise _fail(directory, f"model file {entry.file} is not text ({err})") from err


def parse_model_text(entry: ModelEntry, text: str) -> TreeEnsemble:
    """The trees of a model file's text (LightGBM text dump or scikit-learn JSON)."""
    return parse_lightgbm_text(text) if entry.model_format == "lightgbm-text" else parse_sklearn_json(json.loads(text))


def read_ensemble(directory: Path, entry: ModelEntry) -> TreeEnsemble:
    """A model's trees: from its packed file when profile.json names one and it is there, else parsed from the model
    text. Either way the model text must match its sha256 (a damaged or removed text is refused, as when it is
    parsed)."""
    if entry.packed_file is not None and (directory / entry.packed_file).is_file():
        _verified_bytes(directory, entry)
        ens = _read_packed(directory, entry)
        if ens is not None:
            return ens
    text = read_model_text(directory, entry)
    try:
        return parse_model_text(entry, text)
    except (ProfileError, ValueError) as err:  # ValueError: scikit-learn JSON that is not JSON
        raise _fail(directory, f"model {entry.file} is unusable ({err})") from err


def _read_packed(directory: Path, entry: ModelEntry) -> TreeEnsemble | None:
    """The packed file's trees; None when it was built from another text than profile.json names (that text is the
    model). The packed file is a cache of the text, so an absent one is no damage (profiles copied without it, or
    written before packed files existed), but one that is there must match its packed_sha256 and be well formed:
    the fix named is to delete it, which has the text parsed."""
    try:
        data = (directory / entry.packed_file).read_bytes()
        if _sha(data) != entry.packed_sha256:
            raise ProfileError(f"it does not match its packed_sha256 in {META_FILE} (corrupted or edited)")
        return unpack_trees(data, entry.sha256)
    except StalePackedTrees:
        return None
    except (OSError, ProfileError) as err:
        raise _fail(directory, f"packed model file {entry.packed_file} is unusable ({err}); deleting it has "
                               f"{entry.file} parsed instead") from err


def repack_profile(directory: Path) -> Path:
    """Rewrite a profile with its packed files (one written before they existed): same metadata, same model texts."""
    meta = read_profile_meta(directory)
    return write_profile(directory, meta, {m.file: read_model_text(directory, m) for m in meta.models})


def encode_model_text(file: str, text: str) -> bytes:
    """The bytes stored for a model: its text, gzip-compressed when the name ends in .gz (LightGBM dumps shrink
    about 3.6x; `gunzip` gives back the text LightGBM loads). mtime 0 keeps refits byte-reproducible."""
    data = text.encode()
    return gzip.compress(data, compresslevel=9, mtime=0) if file.endswith(".gz") else data
