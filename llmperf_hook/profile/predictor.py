"""A loaded fitted profile as an `OpClassPredictor` (predict/op_times.py): vectorised per op class.

seconds = (roofline_s + floor_s) * exp(linear baseline + tree_ensemble(features)), or with the model's hinge
(profile/hinge.py) in place of roofline_s + floor_s; one ensemble walk per (op class, direction) for all ops of
the call. Phases: "fwd" and "recompute" use the forward regressor, "bwd" the backward one, "step" (the optimizer)
the single optimizer regressor. numpy only: safe on the predict path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from llmperf_hook.errors import ProfileError
from llmperf_hook.graph.op import Op
from llmperf_hook.hardware.spec import ClusterSpec
from llmperf_hook.profile.features import OPTIONAL_DIMS, REQUIRED_DIMS, build_features, profile_dims
from llmperf_hook.profile.hinge import Hinge, hinge_terms, priced_s
from llmperf_hook.profile.profile_io import ModelEntry, ProfileMeta, read_ensemble, read_profile_meta
from llmperf_hook.profile.tree_eval import TreeEnsemble

_PHASE_MODEL = {"fwd": "fwd", "recompute": "fwd", "bwd": "bwd", "step": "fwd"}
DTYPE_FREE_CLASSES = frozenset({"optimizer"})
"""Classes whose work does not depend on the training dtype: a mixed-precision Adam step updates fp32 master
weights and moments whatever the model dtype (the graph marks it fp32), so one regressor answers every dtype."""


class FittedProfile:
    """Operator-time predictor from a profile directory (models parsed on first use, then kept)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.meta: ProfileMeta = read_profile_meta(directory)
        self._entries = {(m.op_class, m.phase, m.dtype): m for m in self.meta.models}
        self._ensembles: dict[tuple[str, str, str], TreeEnsemble] = {}
        self._keys: dict[tuple[str, str, str], tuple[str, str, str]] = {}
        """_key's answers: asked per op (supports, predict_s, extrapolation_warnings), from metadata fixed here."""
        backend = "lightgbm" if all(m.model_format == "lightgbm-text" for m in self.meta.models) else "sklearn"
        self.name = f"{backend}:{self.meta.name}"

    @property
    def op_classes(self) -> tuple[str, ...]:
        return tuple(sorted({c for c, _, _ in self._entries}))

    def _key(self, op_class: str, phase: str, dtype: str) -> tuple[str, str, str]:
        asked = (op_class, phase, dtype)
        if asked not in self._keys:
            self._keys[asked] = self._model_key(op_class, phase, dtype)
        return self._keys[asked]

    def _model_key(self, op_class: str, phase: str, dtype: str) -> tuple[str, str, str]:
        """The (class, phase, dtype) of the model that answers an op: the phase's model, the dtype's stand-in."""
        key = (op_class, _PHASE_MODEL.get(phase, ""), self.meta.model_dtype(dtype))
        if key not in self._entries and op_class in DTYPE_FREE_CLASSES:
            sampled = sorted(d for c, p, d in self._entries if (c, p) == key[:2])
            return (*key[:2], sampled[0]) if sampled else key
        return key

    def supports(self, op_class: str, phase: str, dtype: str) -> bool:
        return self._key(op_class, phase, dtype) in self._entries

    def unfitted_note(self, op_class: str, phase: str, dtype: str) -> str | None:
        """Why an op this profile was asked to sample has no model (ProfileMeta.unfitted), as the per-class cost
        model line says it: "not fitted in NAME: 0 samples", and the sampler's reason when it recorded one
        (ProfileMeta.unfitted_reasons); None when it has a model or was never asked for."""
        key = self._key(op_class, phase, dtype)
        count = self.meta.unfitted.get("/".join(key)) if key not in self._entries else None
        if count is None:
            return None
        why = self.meta.unfitted_reasons.get("/".join(key))
        return f"not fitted in {self.meta.name}: {count} sample{'' if count == 1 else 's'}{f'; {why}' if why else ''}"

    def _ensemble(self, key: tuple[str, str, str]) -> TreeEnsemble:
        if key not in self._ensembles:
            entry = self._entries[key]
            ens = read_ensemble(self.directory, entry)
            if ens.num_features != len(entry.feature_names):
                raise ProfileError(f"fitted profile {self.directory}: model {entry.file} has {ens.num_features} "
                                   f"features, its metadata lists {len(entry.feature_names)}; re-create the profile")
            self._ensembles[key] = ens
        return self._ensembles[key]

    def _dims_arrays(self, op_class: str, ops: Sequence[Op]) -> dict[str, np.ndarray]:
        need = REQUIRED_DIMS[op_class]
        for op in ops:
            missing = [k for k in need if k not in op.dims]
            if missing:
                raise ProfileError(f"op {op.name} ({op_class}) lacks dims {missing}; the profile needs {list(need)} "
                                   f"(graph/op.py dims table)")
        out = {k: np.fromiter((float(op.dims[k]) for op in ops), dtype=np.float64, count=len(ops)) for k in need}
        out = profile_dims(op_class, out)
        for k in OPTIONAL_DIMS.get(op_class, ()):
            if any(k in op.dims for op in ops):
                out[k] = np.fromiter((float(op.dims.get(k, np.nan)) for op in ops), dtype=np.float64, count=len(ops))
        return out

    def predict_class_s(self, op_class: str, phase: str, dtype: str, dims: dict[str, np.ndarray]) -> np.ndarray:
        """Seconds for shapes given as dims arrays as the profile's samples are keyed (features.profile_dims of a
        graph op's dims; one ensemble walk)."""
        key = self._key(op_class, phase, dtype)
        entry = self._entries[key]
        block = build_features(op_class, key[1] == "bwd", dims, self.meta.roofline[key[2]])
        if block.names != entry.feature_names:
            raise ProfileError(f"fitted profile {self.directory} is unusable: model {entry.file} lists features "
                               f"{list(entry.feature_names)}, this llmperf computes {list(block.names)} for "
                               f"{op_class}/{phase} (an edited profile.json, or one from another llmperf version). A "
                               f"damaged or stale profile is never used for predictions. Re-create it (`llmperf "
                               f"profile ...`), or delete the directory to fall back to the roofline model.")
        log_ratio = self._ensemble(key).predict(block.matrix)
        if entry.baseline is not None:
            log_ratio = log_ratio + entry.baseline.predict(block.matrix)
        if entry.hinge is None:
            seconds = (block.roofline_s + entry.floor_s) * np.exp(log_ratio)
        else:
            rc = self.meta.roofline[key[2]]
            seconds = priced_s(Hinge.from_sequence(entry.hinge), hinge_terms(op_class, dims), np.exp(log_ratio),
                               key[1] == "bwd", rc.dtype_bytes, rc.memory_bandwidth_bytes_per_s)
        if not np.all(np.isfinite(seconds)) or np.any(seconds <= 0):
            raise ProfileError(f"fitted profile {self.directory}: {entry.file} produced a non-finite time")
        return seconds

    def predict_s(self, ops: Sequence[Op], cluster: ClusterSpec) -> Sequence[float]:
        out = np.empty(len(ops))
        groups: dict[tuple[str, str, str], list[int]] = {}
        for i, op in enumerate(ops):
            key = self._key(op.op_class, op.phase, op.dtype)
            if key not in self._entries:
                raise ProfileError(f"profile {self.meta.name} has no {op.op_class}/{op.phase} model for {op.dtype} "
                                   f"(call supports() first)")
            groups.setdefault(key, []).append(i)
        for (op_class, phase, dtype), idx in groups.items():
            dims = _optional_within_range(self._entries[(op_class, phase, dtype)],
                                          self._dims_arrays(op_class, [ops[i] for i in idx]))
            out[idx] = self.predict_class_s(op_class, phase, dtype, dims)
        return out.tolist()

    def extrapolation_warnings(self, ops: Sequence[Op]) -> tuple[str, ...]:
        """One line per (op class, dim) whose value lies outside the sampled range (predicted, but less sure)."""
        by_key: dict[tuple[str, str, str], list[Op]] = {}
        for op in ops:
            by_key.setdefault(self._key(op.op_class, op.phase, op.dtype), []).append(op)
        found = []
        for key, entry in sorted(self._entries.items()):
            found += _outside(entry, by_key.get(key, []))
        return _extrapolation_lines(found)


def _optional_within_range(entry: ModelEntry, dims: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Optional dims refine an answer only inside the range they were sampled over: a shape with any of them
    outside (e.g. a whole 32-layer model in one stage, against stage samples of 4-12 layers) gets the
    required-dims-only answer (all optional dims UNKNOWN) instead of an extrapolation along them."""
    optional = [k for k in OPTIONAL_DIMS.get(entry.op_class, ()) if k in dims]
    if not optional:
        return dims
    outside = np.zeros(len(next(iter(dims.values()))), dtype=bool)
    for k in optional:
        lo, hi = entry.train_ranges.get(k, (-np.inf, np.inf))
        outside |= np.isfinite(dims[k]) & ((dims[k] < lo) | (dims[k] > hi))
    return {k: (np.where(outside, np.nan, v) if k in optional else v) for k, v in dims.items()}


def _outside(entry: ModelEntry, ops: Sequence[Op]) -> list[tuple[str, str, str, str]]:
    """(op class, dim, phase, what) for each dim of the entry's ops outside its sampled range."""
    found = []
    keyed = [profile_dims(op.op_class, op.dims) for op in ops]  # each op's dims as the samples are keyed, once
    for dim, (lo, hi) in entry.train_ranges.items():
        values = [float(dims[dim]) for dims in keyed if dim in dims]
        if values and (min(values) < lo or max(values) > hi):
            found.append((entry.op_class, dim, entry.phase, f"{dim} in [{min(values):g}, {max(values):g}] extends "
                          f"beyond the profiled range [{lo:g}, {hi:g}]; extrapolated along the roofline"))
    return found


def _extrapolation_lines(found: Sequence[tuple[str, str, str, str]]) -> tuple[str, ...]:
    """One line per (op class, dim); where its phases were sampled over different ranges, one per range naming its
    phases ('gemm (bwd): n in ...' and 'gemm (fwd): n in ...'), where two unlabelled lines read as one warning
    repeated with contradicting ranges."""
    by_dim: dict[tuple[str, str], dict[str, list[str]]] = {}
    for op_class, dim, phase, what in found:
        by_dim.setdefault((op_class, dim), {}).setdefault(what, []).append(phase)
    lines = []
    for (op_class, _), by_what in by_dim.items():
        for what, phases in by_what.items():
            label = f" ({'/'.join(dict.fromkeys(phases))})" if len(by_what) > 1 else ""
            lines.append(f"{op_class}{label}: {what}")
    return tuple(lines)
