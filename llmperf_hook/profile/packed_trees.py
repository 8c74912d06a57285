"""A parsed tree ensemble stored as flat binary arrays beside its LightGBM text (`NAME.trees.gz`), no pickle.

Why: parsing a LightGBM text dump means converting every node's numbers from decimal text (about 0.7 us a
number with numpy, ~100k nodes x 6 numbers per shipped profile), which was a quarter of a whole `llmperf
predict` process (GPT-3 175B on 1,024 GPUs: 120 ms of 0.45 s for its 14 models). The arrays that
tree_eval.TreeEnsemble walks are written once, when the profile is written (profile_io.write_profile: the fitting
scripts and `llmperf profile`), and read back with np.frombuffer.

Layout: gzip of one JSON header line, then the arrays' little-endian bytes back to back in the header's order.
The header lists each array's name, stored dtype (integers narrowed losslessly, e.g. feature indices as int16)
and length, the ensemble's scalars, and `source_sha256`, the sha256 of the model text it was built from (the
file profile.json names), so a packed file left over from another fit is never used (the text is parsed). Only
plain numeric dtypes are accepted (np.frombuffer cannot build objects), every index is bounds-checked on reading,
and the text stays the canonical form: a profile without packed files (written before them, or copied or left
without one) is parsed from text as before (profile_io.read_ensemble).
"""

from __future__ import annotations

import gzip
import json
import zlib

import numpy as np

from llmperf_hook.errors import ProfileError
from llmperf_hook.profile.tree_eval import TreeEnsemble

PACKED_FORMAT = "llmperf-trees"
PACKED_VERSION = 1
PACKED_SUFFIX = ".trees.gz"

_INT_FIELDS = ("feature", "left", "right", "missing_type", "roots", "coef_feature")
_FLOAT_FIELDS = ("threshold", "leaf_value", "leaf_const", "coef_value", "feature_low", "feature_high")
_BOOL_FIELDS = ("default_left",)
_FIELDS = (*_INT_FIELDS, *_FLOAT_FIELDS, *_BOOL_FIELDS)
_REQUIRED = ("feature", "threshold", "left", "right", "default_left", "missing_type", "leaf_value", "roots")
_STORED_DTYPES = frozenset({"|i1", "<i2", "<i4", "<i8", "<f8", "|b1"})
"""Plain numeric dtypes only: np.frombuffer of these can never construct an object."""


class StalePackedTrees(ProfileError):
    """The packed file was built from another model text than the one profile.json names (a text re-pointed or
    refitted without repacking): the text is the model, so it is parsed instead."""


def packed_name(model_file: str) -> str:
    """`gemm.fwd.fp16.txt.gz` -> `gemm.fwd.fp16.trees.gz`."""
    stem = model_file[:-3] if model_file.endswith(".gz") else model_file
    for suffix in (".txt", ".json"):
        stem = stem[:-len(suffix)] if stem.endswith(suffix) else stem
    return stem + PACKED_SUFFIX


def _narrow(values: np.ndarray) -> np.ndarray:
    """Integers in the smallest signed type that holds them exactly (child indices < 2^31, features < 2^15)."""
    if values.dtype.kind != "i" or values.size == 0:
        return values
    lo, hi = int(values.min()), int(values.max())
    for dtype in (np.int8, np.int16, np.int32):
        info = np.iinfo(dtype)
        if info.min <= lo and hi <= info.max:
            return values.astype(dtype)
    return values.astype(np.int64)


def pack_trees(ens: TreeEnsemble, source_sha256: str) -> bytes:
    """The bytes of `ens` as a packed file (gzip with mtime 0: refits of the same text are byte-identical)."""
    arrays, payload = [], []
    for name in _FIELDS:
        values = getattr(ens, name)
        if values is None:
            continue
        stored = _narrow(np.asarray(values))
        stored = np.ascontiguousarray(stored, dtype=stored.dtype.newbyteorder("<"))
        arrays.append({"name": name, "dtype": stored.dtype.str, "shape": list(stored.shape)})
        payload.append(stored.tobytes())
    header = {"format": PACKED_FORMAT, "version": PACKED_VERSION, "source_sha256": source_sha256,
              "num_features": ens.num_features, "base_score": ens.base_score, "cast_float32": ens.cast_float32,
              "max_depth": ens.max_depth, "arrays": arrays}
    raw = json.dumps(header, sort_keys=True).encode() + b"\n" + b"".join(payload)
    return gzip.compress(raw, compresslevel=9, mtime=0)


def unpack_trees(data: bytes, source_sha256: str) -> TreeEnsemble:
    """The ensemble stored in `data`; ProfileError if it is damaged, of another format or built from another text."""
    try:
        raw = gzip.decompress(data)
        line, _, payload = raw.partition(b"\n")
        header = json.loads(line)
    except (OSError, EOFError, zlib.error, ValueError) as err:
        raise ProfileError(f"packed trees are not readable ({type(err).__name__}: {err})") from err
    if not isinstance(header, dict) or header.get("format") != PACKED_FORMAT or header.get("version") != PACKED_VERSION:
        raise ProfileError(f"packed trees are not {PACKED_FORMAT} version {PACKED_VERSION}")
    if header.get("source_sha256") != source_sha256:
        raise StalePackedTrees("packed trees were built from another model text than the one profile.json names")
    try:
        fields = _read_arrays(header["arrays"], payload)
        ens = TreeEnsemble(**fields, num_features=int(header["num_features"]), base_score=float(header["base_score"]),
                           cast_float32=bool(header["cast_float32"]), max_depth=int(header["max_depth"]))
    except (KeyError, TypeError, ValueError) as err:
        raise ProfileError(f"packed trees have a malformed header ({type(err).__name__}: {err})") from err
    check_tree_bounds(ens)
    return ens


def _read_arrays(specs: list, payload: bytes) -> dict[str, np.ndarray]:
    fields, offset = {}, 0
    for spec in specs:
        name, dtype, shape = spec["name"], np.dtype(spec["dtype"]), tuple(int(n) for n in spec["shape"])
        if name not in _FIELDS or name in fields \
                or dtype.str not in _STORED_DTYPES or len(shape) not in (1, 2) or min(shape, default=0) < 0:
            raise ProfileError(f"packed trees list an unexpected array {name!r} ({dtype.str}, shape {shape})")
        count = int(np.prod(shape))
        if offset + count * dtype.itemsize > len(payload):
            raise ProfileError(f"packed trees hold {len(payload)} bytes of arrays, their header lists more")
        values = np.frombuffer(payload, dtype=dtype, count=count, offset=offset).reshape(shape)
        offset += count * dtype.itemsize
        kind = np.int64 if name in _INT_FIELDS else np.float64 if name in _FLOAT_FIELDS else bool
        fields[name] = values.astype(kind)  # the dtypes tree_eval's text parser builds: same walk, same numbers
    if offset != len(payload):
        raise ProfileError(f"packed trees hold {len(payload)} bytes of arrays, their header lists {offset}")
    missing = [k for k in _REQUIRED if k not in fields]
    if missing:
        raise ProfileError(f"packed trees lack the arrays {missing}")
    return fields


def check_tree_bounds(ens: TreeEnsemble) -> None:
    """Every index the walk follows stays inside its array (a damaged file must fail here, not as an IndexError or
    a wrong leaf): node arrays of one length, children and roots to a node or a leaf, features < num_features."""
    nodes, leaves = ens.feature.size, ens.leaf_value.size

    def _refs_ok(refs: np.ndarray) -> bool:
        return bool(np.all(np.where(refs >= 0, refs < nodes, ~refs < leaves)))

    same = all(getattr(ens, k).shape == (nodes,) for k in ("threshold", "left", "right", "default_left",
                                                            "missing_type"))
    linear_ok = ens.leaf_const is None or (
        ens.leaf_const.shape == (leaves,) and ens.coef_feature is not None and ens.coef_value is not None
        and ens.coef_feature.shape == ens.coef_value.shape and ens.coef_feature.shape[:1] == (leaves,)
        and bool(np.all((ens.coef_feature >= -1) & (ens.coef_feature < ens.num_features))))
    ranges_ok = all(getattr(ens, k) is None or getattr(ens, k).shape == (ens.num_features,)
                    for k in ("feature_low", "feature_high"))
    if not (same and linear_ok and ranges_ok and leaves > 0 and ens.roots.size > 0 and _refs_ok(ens.left)
            and _refs_ok(ens.right) and _refs_ok(ens.roots)
            and bool(np.all((ens.feature >= 0) & (ens.feature < ens.num_features)))
            and bool(np.all((ens.missing_type >= 0) & (ens.missing_type <= 2)))):
        raise ProfileError("packed trees are inconsistent (array lengths, child, leaf or feature indices out of range)")
