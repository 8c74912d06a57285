"""Fit `LayoutFit`s (comm_model.py) from collective timings: public NCCL samples or `llmperf profile --comm`.

Fit: rows implying an impossible bus bandwidth (> MAX_PLAUSIBLE_BUSBW) are dropped as corrupt, and so are rows
more than DISTURBED_RATIO x slower than a larger message of the same layout (`disturbed`: time must not fall as
the bytes grow; trained on 25 % of the samples, MAPE on the undisturbed test rows: Perlmutter all-gather 1x4
150 % -> 5.0 %, Vista all-gather 4x1 29 % -> 1.6 %, 8x1 50 % -> 0.6 %); a least-median
start (robust to half the rows being wrong) marks outliers (|log residual - median| > max(6 x 1.4826 MAD,
log 1.5)); alpha-beta is then least squares on relative error over the inliers; the residual is the median
log-ratio over up to 40 message-size bins, made the nearest curve under which time never falls as the bytes grow
(monotone_residual: Vista all-gather 2x1 fell 5.5 % from one size to the next; hold-out MAPE of
benchmarks/bench_comm_accuracy.py moves by at most 0.06 points).
"""

from __future__ import annotations

import csv
import math
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping

import numpy as np

from llmperf_hook.profile.comm_model import CommModel, LayoutFit, ring_factor
from llmperf_hook.profile.public_samples import ATTRIBUTION

MIN_OUTLIER_LOG = float(np.log(1.5))
MIN_PLAUSIBLE_FRACTION = 0.5
"""A layout with more corrupt rows than this is not kept: its collectives use the nearest kept layout."""
MAX_SHIPPED_FIT_MAPE = 0.15
"""A layout whose fit misses its own samples by more than this on average is too noisy to keep."""
MAX_PLAUSIBLE_BUSBW = 1e12
"""Bytes/s of bus bandwidth no GPU link reaches (NVLink 5 is 900 GB/s per GPU): faster samples are corrupt.
This drops the Vista all-gather rows of ~117 us for 0.27-1.1 GB messages (README of the samples)."""
_FILE = re.compile(r"^NVIDIA[^_]+_(allreduce|allgather|reducescatter|alltoall|p2p)(_large)?_fp16_(\d+)_(\d+)$")


@dataclass(frozen=True)
class CommSamples:
    """Timings of one collective on one layout."""

    collective: str
    nodes: int
    gpus_per_node: int
    nbytes: np.ndarray
    time_s: np.ndarray
    size_class: str = ""
    """"small" / "large" for the public files (which of the authors' error rows it belongs to)."""


def _alpha_beta(x: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """Minimise sum(((a + b x - t) / t)^2) with a >= 0, b > 0."""
    a_mat = np.column_stack([1.0 / t, x / t])
    (a, b), *_ = np.linalg.lstsq(a_mat, np.ones_like(t), rcond=None)
    if a < 0 or not np.isfinite(a):
        a, b = 0.0, float(np.sum(x / t) / np.sum((x / t) ** 2))
    if b <= 0 or not np.isfinite(b):
        b = float(np.median(t / np.maximum(x, 1.0)))
    return float(a), float(b)


def _lmeds(x: np.ndarray, t: np.ndarray, trials: int = 200) -> tuple[float, float]:
    """Least median of squares (Rousseeuw 1984): the two-point alpha-beta line with the smallest median
    |log residual|; robust to up to half of the rows being corrupt, where least squares is not."""
    rng = np.random.default_rng(0)
    best, best_ab = np.inf, _alpha_beta(x, t)
    for _ in range(trials):
        i, j = rng.choice(len(t), 2, replace=False)
        if x[i] == x[j]:
            continue
        b = (t[j] - t[i]) / (x[j] - x[i])
        a = t[i] - b * x[i]
        if b <= 0 or a < 0:
            continue
        med = float(np.median(np.abs(np.log(t / (a + b * x)))))
        if med < best:
            best, best_ab = med, (float(a), float(b))
    return best_ab


def _inliers(x: np.ndarray, t: np.ndarray) -> np.ndarray:
    a, b = _lmeds(x, t)
    keep = np.ones(t.shape, dtype=bool)
    for _ in range(3):
        r = np.log(t / (a + b * x))
        mad = 1.4826 * np.median(np.abs(r - np.median(r)))
        new = np.abs(r - np.median(r)) <= max(6.0 * mad, MIN_OUTLIER_LOG)
        if (new == keep).all() or new.sum() < 2:
            break
        keep = new
        a, b = _alpha_beta(x[keep], t[keep])
    return keep


def _residual_curve(lx: np.ndarray, r: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    num_bins = int(min(40, max(1, len(r) // 8)))
    if num_bins < 2 or np.ptp(lx) <= 0:
        return (), ()
    edges = np.quantile(lx, np.linspace(0, 1, num_bins + 1))
    knots, vals = [], []
    for lo, hi in zip(edges[:-1], edges[1:]):
        m = (lx >= lo) & (lx <= hi)
        if m.sum() >= 3:
            knots.append(float(np.median(lx[m])))
            vals.append(float(np.median(r[m])))
    order = np.argsort(knots)
    return tuple(np.round(np.asarray(knots)[order], 6)), tuple(np.round(np.asarray(vals)[order], 6))


def monotone_residual(knots_log2: tuple[float, ...], vals: tuple[float, ...], alpha_s: float,
                      s_per_byte: float) -> tuple[float, ...]:
    """The nearest residual (least squares) that never makes time fall as the bytes grow (an undisturbed
    collective on a larger buffer cannot finish sooner: `disturbed`). log t = log(alpha + beta x) + r(log x); the
    first term rises by the elasticity e(x) = beta x / (alpha + beta x) per unit of ln x, which grows with x, so a
    residual segment whose slope is at least -e at its left knot keeps t non-decreasing over the segment. With
    c_i = e(x_(i-1)) x (ln x_i - ln x_(i-1)) and C its running sum, r_i - r_(i-1) >= -c_i is r + C non-decreasing:
    an isotonic regression of r + C (pool adjacent violators, Barlow et al. 1972), minus C."""
    if len(vals) < 2:
        return tuple(vals)
    x = 2.0 ** np.asarray(knots_log2)
    elasticity = s_per_byte * x[:-1] / (alpha_s + s_per_byte * x[:-1])
    cum = np.concatenate([[0.0], np.cumsum(elasticity * np.diff(knots_log2) * np.log(2.0))])
    fitted = _isotonic(np.asarray(vals) + cum) - cum
    out = [round(float(fitted[0]), 6)]
    for i in range(1, len(fitted)):  # stored to 6 decimals: round so that no step falls by the rounding
        lowest = out[-1] - (cum[i] - cum[i - 1])
        out.append(max(round(float(fitted[i]), 6), math.ceil(lowest * 1e6) / 1e6))
    return tuple(out)


def _isotonic(y: np.ndarray) -> np.ndarray:
    """Non-decreasing least-squares fit of y (pool adjacent violators, equal weights)."""
    blocks: list[list[float]] = []  # [mean, count]
    for v in y:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, n2 = blocks.pop()
            m1, n1 = blocks.pop()
            blocks.append([(m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2])
    return np.concatenate([np.full(int(n), m) for m, n in blocks])


def plausible(s: CommSamples) -> np.ndarray:
    """Positive finite times whose implied bus bandwidth is physically possible."""
    factor = ring_factor(s.collective, s.nodes * s.gpus_per_node) or 1.0
    ok = np.isfinite(s.time_s) & (s.time_s > 0) & (s.nbytes > 0)
    return ok & (factor * s.nbytes / np.where(ok, s.time_s, 1.0) <= MAX_PLAUSIBLE_BUSBW)


DISTURBED_RATIO = 1.5
"""An undisturbed collective on a larger buffer moves more bytes over the same links, so it cannot finish
sooner; a row slower than this many times larger messages of the same layout (its time not monotone in size far
beyond the few-percent run-to-run noise) was disturbed by something outside the collective (another job on the
links, a throttled or preempted rank)."""
DISTURBED_WITNESSES = 3
"""Larger messages that must all be that much faster: one or two corrupt too-fast rows (the Vista ~117 us
all-gathers that pass the bandwidth check) cannot make the honest rows before them look disturbed."""


def disturbed(s: CommSamples) -> np.ndarray:
    """True for plausible rows slower than DISTURBED_RATIO x the DISTURBED_WITNESSES-th fastest plausible row
    among strictly larger messages of the same layout (monotonicity of time in bytes); False otherwise."""
    idx = np.flatnonzero(plausible(s))
    order = idx[np.argsort(s.nbytes[idx], kind="stable")]
    t, x = s.time_s[order], s.nbytes[order]
    after = np.searchsorted(x, x, side="right")
    k = DISTURBED_WITNESSES
    witness = np.array([np.partition(t[a:], k - 1)[k - 1] if len(t) - a >= k else np.inf for a in after])
    out = np.zeros(s.time_s.shape, dtype=bool)
    out[order] = t > DISTURBED_RATIO * witness
    return out


def fit_layout(s: CommSamples) -> LayoutFit:
    keep = plausible(s) & ~disturbed(s)
    x, t = s.nbytes[keep], s.time_s[keep]
    inl = _inliers(x, t) if len(t) >= 8 else np.ones(t.shape, dtype=bool)
    a, b = _alpha_beta(x[inl], t[inl])
    n = s.nodes * s.gpus_per_node
    factor = ring_factor(s.collective, n) or 1.0
    knots, vals = _residual_curve(np.log2(x[inl]), np.log(t[inl] / (a + b * x[inl])))
    vals = monotone_residual(knots, vals, a, b)
    fit = LayoutFit(s.collective, s.nodes, s.gpus_per_node, a, factor / b, knots, vals,
                    (float(x.min()), float(x.max())), int(inl.sum()), int((~inl).sum() + (~keep).sum()))
    # Error over the rows it was fitted from: the disturbed ones measure something else (comm_fit.disturbed).
    mape = float(np.mean(np.abs(fit.predict_s(x, n, s.collective) / t - 1.0)))
    return replace(fit, fit_mape=round(mape, 6), plausible_fraction=round(float(keep.mean()), 6))


def public_nbytes(collective: str, shape_elems: np.ndarray, group_size: int) -> np.ndarray:
    """The bytes comm_model prices (the whole buffer: all-gather output, reduce-scatter input) of public samples
    whose `shape` is the fp16 tensor each rank passes. The authors' sampler (estimate-train-time,
    docs/advanced/nccl-sampling.md, nccl_functions.py) all-gathers `torch.rand(shape)` from every rank into a list
    of world-size such tensors, so the output is group_size x shape; its all-reduce buffer, reduce-scatter input
    (chunked by world size) and p2p message are `shape` itself. Read as the output, the Perlmutter all-gather 1x2
    fit ran at 24 GB/s of bus bandwidth where the same NVLink3 pair carries 75 GB/s of all-reduce and 91 GB/s of
    p2p; read as the input, 49 GB/s, and Vista's 2x1 all-gather 37-47 GB/s next to its all-reduce's 47 GB/s (NCCL
    bus bandwidth is the link's, whatever the collective: NCCL-tests PERFORMANCE.md)."""
    return shape_elems * 2.0 * (group_size if collective == "allgather" else 1)


def read_public_comm(nccl_dir: Path) -> list[CommSamples]:
    """Per-layout public files (`..._N_G.csv`); `shape` is fp16 elements per rank (public_nbytes), `dur(us)`
    microseconds."""
    out = []
    for path in sorted(nccl_dir.glob("*.csv")):
        m = _FILE.match(path.stem)
        if not m:
            continue
        with path.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
        shape = np.asarray([float(r["shape"]) for r in rows])
        dur = np.asarray([float(r["dur(us)"]) for r in rows])
        nodes, gpn = int(m.group(3)), int(m.group(4))
        out.append(CommSamples(m.group(1), nodes, gpn, public_nbytes(m.group(1), shape, nodes * gpn), dur * 1e-6,
                               "large" if m.group(2) else "small"))
    return out


def pool_layouts(samples: list[CommSamples]) -> list[CommSamples]:
    """Merge the small- and large-message files of the same collective and layout into one fit set."""
    merged: dict[tuple[str, int, int], list[CommSamples]] = {}
    for s in samples:
        merged.setdefault((s.collective, s.nodes, s.gpus_per_node), []).append(s)
    return [CommSamples(k[0], k[1], k[2], np.concatenate([s.nbytes for s in v]), np.concatenate([s.time_s for s in v]))
            for k, v in sorted(merged.items())]


def fit_comm_model(cluster: str, samples: list[CommSamples], provenance: Mapping[str, str],
                   max_fit_mape: float = float("inf")) -> CommModel:
    """Fit every layout; keep those the data supports (MIN_PLAUSIBLE_FRACTION; `max_fit_mape`, which the shipped
    models set to MAX_SHIPPED_FIT_MAPE while a user's own measurements are always kept)."""
    kept, rejected = [], []
    for s in pool_layouts(samples):
        if int(plausible(s).sum()) < 4:
            rejected.append(f"{s.collective} {s.nodes}x{s.gpus_per_node}: fewer than 4 plausible samples")
            continue
        fit = fit_layout(s)
        if fit.plausible_fraction < MIN_PLAUSIBLE_FRACTION or fit.fit_mape > max_fit_mape:
            rejected.append(f"{s.collective} {s.nodes}x{s.gpus_per_node}: {1 - fit.plausible_fraction:.0%} corrupt "
                            f"or disturbed rows, fit error {fit.fit_mape:.0%} (data too noisy or corrupt; nearest "
                            f"layout used)")
            continue
        kept.append(fit)
    prov = dict(provenance)
    if rejected:
        prov["rejected_layouts"] = "; ".join(rejected)
    return CommModel(cluster, tuple(kept), prov)


def fit_cluster_comm_model(data_root: Path, hw) -> CommModel:
    """The shipped comm model of a ShippedHardware's cluster from op-samples/<folder>/nccl."""
    samples = read_public_comm(data_root / hw.folder / "nccl")
    prov = {"samples": f"op-samples/{hw.folder}/nccl (public)", "attribution": ATTRIBUTION, "license": "MIT",
            "fitted_by": "benchmarks/fit_shipped_profiles.py",
            "fitted_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "note": "Perlmutter inter-node samples reflect the authors' NCCL setup (0.7-2.5 GB/s), not Slingshot-11."
            if hw.cluster == "perlmutter" else "Vista: 1 GH200 per node, every collective crosses InfiniBand."}
    return fit_comm_model(hw.cluster, samples, prov, MAX_SHIPPED_FIT_MAPE)
