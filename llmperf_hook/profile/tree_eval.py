"""Evaluate tree ensembles stored as data, with numpy only (no lightgbm / sklearn import on the predict path).

Two stored forms, one evaluator:
- LightGBM text dumps (`Booster.model_to_string()`): numeric splits with LightGBM's missing-value rules
  (LightGBM `Tree::NumericalDecision`: NaN becomes 0 unless missing_type is NaN; a missing value goes to the
  default-left / right child; otherwise `x <= threshold` goes left; negative child = ~leaf index).
- scikit-learn gradient boosting exported as JSON arrays (fallback when lightgbm is missing): `x <= threshold`
  goes left with x cast to float32, as sklearn's trees compare.
LightGBM linear trees (`linear_tree=True`, `is_linear=1` blocks) answer leaf_const + coefficients . features in
each leaf (LightGBM `Tree::Predict`), and the plain leaf value where one of those features is NaN. Unlike
LightGBM, the features of that linear term are first clipped to the range they spanned in training (the
header's `feature_infos`): identical inside it, and outside a linear leaf stays at its edge value like a constant
leaf instead of extending its slope (the roofline normaliser carries the scaling there).

All trees are packed into flat arrays and walked together: one numpy step per depth level, for every shape and
every tree at once, so a whole graph's ops of one class cost a few milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmperf_hook.errors import ProfileError

_ZERO = 1e-35  # LightGBM kZeroThreshold
_MISSING_NONE, _MISSING_ZERO, _MISSING_NAN = 0, 1, 2
_CHUNK = 2048  # rows walked at once: bounds the [rows x trees] index arrays to a few MB


@dataclass(frozen=True)
class LinearBaseline:
    """A linear term under the trees: weights . features + intercept, clipped to the range it spanned over its
    training rows (so it never extrapolates further than a leaf would)."""

    weights: tuple[float, ...]
    intercept: float
    low: float
    high: float

    def predict(self, x: np.ndarray) -> np.ndarray:
        if len(self.weights) != x.shape[1]:
            raise ProfileError(f"linear baseline has {len(self.weights)} weights for {x.shape[1]} features")
        return np.clip(x @ np.asarray(self.weights, dtype=np.float64) + self.intercept, self.low, self.high)


@dataclass(frozen=True)
class TreeEnsemble:
    """Flat node arrays of all trees; a child index < 0 means leaf (~child) of the same tree."""

    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    """Global node index of the left child, or -(global leaf index) - 1."""
    right: np.ndarray
    default_left: np.ndarray
    missing_type: np.ndarray
    leaf_value: np.ndarray
    roots: np.ndarray
    """Per tree: global root node index, or -(global leaf index) - 1 for a single-leaf tree."""
    num_features: int
    base_score: float = 0.0
    cast_float32: bool = False
    """sklearn trees compare float32 inputs."""
    max_depth: int = 64
    leaf_const: np.ndarray | None = None
    """Linear trees: per global leaf, the constant of its linear model (None: constant leaves only)."""
    coef_feature: np.ndarray | None = None
    """Linear trees: [leaves, k] feature index of each coefficient (-1 pads a leaf with fewer than k)."""
    coef_value: np.ndarray | None = None
    """Linear trees: [leaves, k] coefficients (already scaled by the shrinkage, as LightGBM stores them)."""
    feature_low: np.ndarray | None = None
    """Linear trees: per feature, the smallest training value (the linear term's inputs are clipped to it)."""
    feature_high: np.ndarray | None = None

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Sum of leaf values (+ base score) per row; repeated rows are evaluated once, in chunks."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.num_features:
            raise ProfileError(f"tree ensemble expects {self.num_features} features, got shape {x.shape}")
        if self.cast_float32:
            x = x.astype(np.float32).astype(np.float64)
        if x.shape[0] == 0:
            return np.zeros(0)
        uniq, inverse = np.unique(x, axis=0, return_inverse=True)
        chunk = _CHUNK if self.coef_value is None else \
            max(16, _CHUNK * 8 // max(1, self.roots.size * self.coef_value.shape[1] // 64))
        out = np.concatenate([self._walk(uniq[i:i + chunk]) for i in range(0, uniq.shape[0], chunk)])
        return out[inverse.reshape(-1)]

    def _walk(self, x: np.ndarray) -> np.ndarray:
        node = np.broadcast_to(self.roots, (x.shape[0], self.roots.size)).copy()
        rows = np.arange(x.shape[0])[:, None]
        for _ in range(self.max_depth + 1):
            inner = node >= 0
            if not inner.any():
                break
            idx = np.where(inner, node, 0)
            fval = x[rows, self.feature[idx]]
            node = np.where(inner, self._step(idx, fval), node)
        if (node >= 0).any():
            raise ProfileError("tree ensemble is malformed (a path is deeper than its declared depth or cyclic)")
        leaf = -node - 1
        if self.leaf_const is None:
            return self.base_score + self.leaf_value[leaf].sum(axis=1)
        # [rows, trees, k] feature values of each reached leaf's coefficients.
        feat = self.coef_feature[leaf]
        xc = x if self.feature_low is None else np.clip(x, self.feature_low, self.feature_high)
        vals = np.where(feat >= 0, xc[rows[:, :, None], np.maximum(feat, 0)], 0.0)
        linear = self.leaf_const[leaf] + (np.nan_to_num(vals) * self.coef_value[leaf]).sum(axis=2)
        nan = np.isnan(vals).any(axis=2)
        return self.base_score + np.where(nan, self.leaf_value[leaf], linear).sum(axis=1)

    def _step(self, idx: np.ndarray, fval: np.ndarray) -> np.ndarray:
        mt = self.missing_type[idx]
        fval = np.where(np.isnan(fval) & (mt != _MISSING_NAN), 0.0, fval)
        missing = ((mt == _MISSING_ZERO) & (np.abs(fval) <= _ZERO)) | ((mt == _MISSING_NAN) & np.isnan(fval))
        go_left = np.where(missing, self.default_left[idx], fval <= self.threshold[idx])
        return np.where(go_left, self.left[idx], self.right[idx])


def _ints(text: str) -> list[int]:
    return [int(t) for t in text.split()]


def _floats(text: str) -> list[float]:
    return [float(t) for t in text.split()]


def _parse_blocks(text: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    header: dict[str, str] = {}
    trees: list[dict[str, str]] = []
    current = header
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Tree="):
            current = {}
            trees.append(current)
        elif line == "end of trees":
            break
        elif "=" in line:
            key, _, value = line.partition("=")
            current[key] = value
        elif line:  # bare flags such as "average_output" (random-forest mode)
            current[line] = ""
    return header, trees


class _Packer:
    """Appends trees to flat arrays, offsetting child and leaf indices."""

    def __init__(self) -> None:
        self.cols: dict[str, list] = {k: [] for k in
                                      ("feature", "threshold", "left", "right", "default_left", "missing_type")}
        self.leaves: list[float] = []
        self.roots: list[int] = []
        self.depth = 0

    def add(self, feature, threshold, left, right, leaf_value, default_left, missing_type) -> None:
        n_off, l_off = len(self.cols["feature"]), len(self.leaves)
        fix = (lambda c: c + n_off if c >= 0 else -((-c - 1) + l_off) - 1)
        if len(feature) == 0:
            self.roots.append(-l_off - 1)
        else:
            self.roots.append(n_off)
        for key, vals in (("feature", feature), ("threshold", threshold), ("default_left", default_left),
                          ("missing_type", missing_type)):
            self.cols[key].extend(vals)
        self.cols["left"].extend(fix(c) for c in left)
        self.cols["right"].extend(fix(c) for c in right)
        self.leaves.extend(leaf_value)
        self.depth = max(self.depth, len(feature))

    def build(self, num_features: int, base: float, cast32: bool) -> TreeEnsemble:
        c = self.cols
        if not self.roots:
            raise ProfileError("tree ensemble has no trees")
        return TreeEnsemble(
            feature=np.asarray(c["feature"] or [0], dtype=np.int64),
            threshold=np.asarray(c["threshold"] or [0.0], dtype=np.float64),
            left=np.asarray(c["left"] or [-1], dtype=np.int64), right=np.asarray(c["right"] or [-1], dtype=np.int64),
            default_left=np.asarray(c["default_left"] or [False], dtype=bool),
            missing_type=np.asarray(c["missing_type"] or [0], dtype=np.int64),
            leaf_value=np.asarray(self.leaves, dtype=np.float64), roots=np.asarray(self.roots, dtype=np.int64),
            num_features=num_features, base_score=base, cast_float32=cast32, max_depth=self.depth)


def parse_lightgbm_text(text: str) -> TreeEnsemble:
    """Parse a LightGBM text model (LIGHTGBM_TEXT_VERSIONS) of a single-output regression with numeric splits."""
    try:
        header, trees = _parse_blocks(text)
        if header.get("num_tree_per_iteration", "1") != "1" or header.get("num_class", "1") != "1":
            raise ProfileError("LightGBM model is not a single-output regression")
        _check_lightgbm_header(header)
        average = "average_output" in header
        if any(int(t.get("num_cat", "0")) != 0 for t in trees):
            raise ProfileError("LightGBM model uses categorical splits, which profiles never contain")
        ens = _pack_lightgbm(trees, int(header["max_feature_idx"]) + 1)
        if ens.leaf_const is not None:
            low, high = _feature_ranges(header.get("feature_infos", ""), ens.num_features)
            ens = TreeEnsemble(**{**ens.__dict__, "feature_low": low, "feature_high": high})
    except ProfileError:
        raise
    except (KeyError, ValueError, IndexError) as err:
        raise ProfileError(f"LightGBM model text is corrupted ({type(err).__name__}: {err})") from err
    if average:
        scaled = {k: getattr(ens, k) / len(trees) for k in ("leaf_value", "leaf_const", "coef_value")
                  if getattr(ens, k) is not None}
        return TreeEnsemble(**{**ens.__dict__, **scaled})
    return ens


LIGHTGBM_TEXT_VERSIONS = ("v2", "v3", "v4")
"""`version=` of the LightGBM text formats this evaluator reads (LightGBM 2.x-4.x, gbdt.cpp SaveModelToString);
a later format may store trees differently, so it is refused rather than walked as if it were one of these."""
IDENTITY_LINK_OBJECTIVES = ("regression", "regression_l1", "huber", "fair", "quantile", "mape")
"""Objectives whose prediction is the raw sum of the trees (the only ones profiles are fitted with); for others
(poisson, gamma, tweedie: exp of it; binary: a sigmoid) LightGBM transforms the sum, which this evaluator does not."""


def _check_lightgbm_header(header: dict[str, str]) -> None:
    version = header.get("version")
    if version not in LIGHTGBM_TEXT_VERSIONS:
        raise ProfileError(f"LightGBM model text has format version={version} (from the LightGBM that wrote it); "
                           f"this llmperf reads {', '.join(LIGHTGBM_TEXT_VERSIONS)}")
    words = header.get("objective", "").split() or [""]
    # reg_sqrt=True appends " sqrt" (RegressionL2loss::ToString): the prediction is then the sum squared.
    if words[0] not in IDENTITY_LINK_OBJECTIVES or "sqrt" in words[1:]:
        raise ProfileError(f"LightGBM model has objective {' '.join(words)!r}, whose predictions are not the sum of "
                           f"its trees; profiles are fitted with {', '.join(IDENTITY_LINK_OBJECTIVES)}")


def _feature_ranges(infos: str, num_features: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature [min:max] of the training data from LightGBM's `feature_infos` ("none": a constant or unused
    feature, left unclipped)."""
    low, high = np.full(num_features, -np.inf), np.full(num_features, np.inf)
    items = infos.split()
    if len(items) != num_features:
        raise ProfileError(f"LightGBM linear-tree model has {len(items)} feature ranges for {num_features} features")
    for i, item in enumerate(items):
        if item.startswith("[") and item.endswith("]"):
            lo, _, hi = item[1:-1].partition(":")
            low[i], high[i] = float(lo), float(hi)
    return low, high


def _column(trees: list[dict[str, str]], key: str, dtype: type) -> np.ndarray:
    """One field of every tree as a flat array: a single split + conversion instead of one per value."""
    return np.array(" ".join(t.get(key, "") for t in trees).split(), dtype=dtype)


def _pack_lightgbm(trees: list[dict[str, str]], num_features: int) -> TreeEnsemble:
    """Flat arrays of all trees (as _Packer builds them), vectorised: parsing dominates a predict's start-up."""
    if not trees:
        raise ProfileError("tree ensemble has no trees")
    inner = np.array([len(t.get("split_feature", "").split()) for t in trees], dtype=np.int64)
    leaves = np.array([len(t["leaf_value"].split()) for t in trees], dtype=np.int64)
    n_off = np.repeat(np.cumsum(inner) - inner, inner)
    l_off = np.repeat(np.cumsum(leaves) - leaves, inner)
    fix = (lambda c: np.where(c >= 0, c + n_off, -((-c - 1) + l_off) - 1))
    dt = _column(trees, "decision_type", np.int64)
    roots = np.where(inner > 0, np.cumsum(inner) - inner, -(np.cumsum(leaves) - leaves) - 1)
    if inner.sum() == 0:  # stumps only: keep one dummy node so indexing stays valid
        feature, threshold, left, right = (np.zeros(1, np.int64), np.zeros(1), np.full(1, -1), np.full(1, -1))
        default_left, missing_type = np.zeros(1, bool), np.zeros(1, np.int64)
    else:
        feature, threshold = _column(trees, "split_feature", np.int64), _column(trees, "threshold", np.float64)
        left, right = fix(_column(trees, "left_child", np.int64)), fix(_column(trees, "right_child", np.int64))
        default_left, missing_type = (dt & 2).astype(bool), (dt >> 2) & 3
    leaf_value = _column(trees, "leaf_value", np.float64)
    return TreeEnsemble(feature=feature, threshold=threshold, left=left, right=right, default_left=default_left,
                        missing_type=missing_type, leaf_value=leaf_value,
                        roots=roots.astype(np.int64), num_features=num_features, base_score=0.0, cast_float32=False,
                        max_depth=int(inner.max()), **_linear_leaves(trees, leaf_value, num_features))


def _linear_leaves(trees: list[dict[str, str]], leaf_value: np.ndarray, num_features: int) -> dict:
    """leaf_const / coef_feature / coef_value of linear trees ({} when no tree is linear); a constant tree's
    leaves become linear models without coefficients."""
    is_linear = [t.get("is_linear", "0") == "1" for t in trees]
    if not any(is_linear):
        return {}
    linear = [t for t, lin in zip(trees, is_linear) if lin]
    const = np.concatenate([_floats(t["leaf_const"]) if lin else _floats(t["leaf_value"])
                            for t, lin in zip(trees, is_linear)])
    counts = np.concatenate([_ints(t["num_features"]) if lin else [0] * len(t["leaf_value"].split())
                             for t, lin in zip(trees, is_linear)]).astype(np.int64)
    feats = _column(linear, "leaf_features", np.int64)
    coefs = _column(linear, "leaf_coeff", np.float64)
    if not (const.size == counts.size == leaf_value.size and feats.size == coefs.size == counts.sum()) \
            or (feats.size and (feats.min() < 0 or feats.max() >= num_features)):
        raise ProfileError("LightGBM linear-tree leaves are inconsistent (counts, features or coefficients)")
    k = max(1, int(counts.max(initial=0)))
    row = np.repeat(np.arange(counts.size), counts)
    col = np.arange(feats.size) - np.repeat(np.cumsum(counts) - counts, counts)
    coef_feature, coef_value = np.full((counts.size, k), -1, np.int64), np.zeros((counts.size, k))
    coef_feature[row, col], coef_value[row, col] = feats, coefs
    return {"leaf_const": const, "coef_feature": coef_feature, "coef_value": coef_value}


def parse_sklearn_json(model: dict) -> TreeEnsemble:
    """Parse the JSON written by `fit.export_sklearn_gbr` (sklearn GradientBoostingRegressor trees)."""
    try:
        lr = float(model["learning_rate"])
        packer = _Packer()
        for t in model["trees"]:
            feat, left, right = t["feature"], t["left"], t["right"]
            leaf_of = {i: j for j, i in enumerate(i for i, f in enumerate(feat) if f < 0)}
            inner = [i for i, f in enumerate(feat) if f >= 0]
            pos = {i: j for j, i in enumerate(inner)}
            ref = (lambda c: pos[c] if c in pos else -leaf_of[c] - 1)
            leaves = [lr * t["value"][i] for i in leaf_of]
            packer.add([feat[i] for i in inner], [t["threshold"][i] for i in inner], [ref(left[i]) for i in inner],
                       [ref(right[i]) for i in inner], leaves, [False] * len(inner), [0] * len(inner))
        return packer.build(int(model["num_features"]), float(model["init"]), True)
    except (KeyError, ValueError, IndexError, TypeError) as err:
        raise ProfileError(f"scikit-learn tree JSON is corrupted ({type(err).__name__}: {err})") from err
