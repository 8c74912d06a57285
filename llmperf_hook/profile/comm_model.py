"""Fitted communication model of one cluster: alpha-beta per collective and group layout plus a learned residual.

    t(bytes) = (alpha_s + factor(n) * bytes / busbw_bytes_per_s) * exp(residual(log2 bytes))

`factor(n)` is the ring traffic per rank of NCCL-tests' bus-bandwidth convention (NCCL-tests PERFORMANCE.md):
all-reduce 2(n-1)/n, all-gather / reduce-scatter / all-to-all (n-1)/n, send/recv 1. `bytes` is the whole
buffer of the collective (all-reduce buffer, all-gather output, reduce-scatter input, one p2p message).
The residual is a piecewise-linear curve of median log-ratios over message-size bins, held at its edge values
outside them, so the fitted alpha-beta stays in charge outside the sampled sizes. Layouts not sampled take the
nearest sampled layout of the same tier (inside a node / across nodes) with their own n in factor(n).
Reduce-scatter and all-to-all, when not sampled, reuse the all-gather fit of the layout (same per-rank ring traffic).

Physical figures of the cluster the job runs on (predict/alpha_beta.py) bound the fit, because a fit only knows
the sizes it saw: (1) no collective is priced faster than its links at line rate plus the tier's latency
(line_rate_time_s); (2) below its smallest sample a fit's alpha is not identifiable (0 or 3 ms when the smallest
sample takes milliseconds), so time follows the cluster's alpha-beta there, scaled to meet the fit at that
sample (continuous and non-decreasing in size) but by at most 1 / MIN_RATE_FRACTION (MAX_BELOW_SAMPLE_SCALE);
(3) a fit slower than MIN_RATE_FRACTION of the cluster's
alpha-beta rate for the op's layout, at its largest sample or in its bandwidth limit, measured another transport
than this cluster's network (the Perlmutter samples: 0.6-4.4 GB/s of bus bandwidth across nodes where Slingshot-11
gives 80 GB/s per node; op-samples README), and that layout is priced by the cluster's alpha-beta. (3), and
message sizes beyond a fit's samples, are named in predict's warnings (extrapolation_warnings).

Stored as JSON with a checksum; numpy only (predict path). Read as op profiles are (profile_io.py): a folder
holding a pickle is refused (pickle_scan.py: fitted models are data, shared between clusters), and so is a file
whose checksum, format or any field is off; never a silently wrong number.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from llmperf_hook.errors import ProfileError
from llmperf_hook.graph.op import Collective, Op
from llmperf_hook.hardware.spec import ClusterSpec
from llmperf_hook.predict.alpha_beta import AlphaBetaPredictor, collective_time_s, line_rate
from llmperf_hook.profile.pickle_scan import planted_pickle_reason

COMM_FORMAT = "llmperf-comm-model"
COMM_FORMAT_VERSION = 1
COMM_FILE = "comm_model.json"
SOURCE_OF = {"allreduce": "allreduce", "allgather": "allgather", "reducescatter": "reducescatter",
             "alltoall": "alltoall", "p2p": "p2p"}
FALLBACK_OF = {"reducescatter": "allgather", "alltoall": "allgather"}
MIN_RATE_FRACTION = 0.1
"""Fitted speed over the cluster's alpha-beta speed (its links x bus efficiency) below which a fit describes
another transport, not this cluster's network. A healthy NCCL on the tier's links loses at most ~4x to how it runs:
its LL protocol carries 4 flag bytes per 8 (half the link; NCCL docs, NCCL_PROTO) and the slower algorithm moves
~2x the bytes (double binary tree vs ring all-reduce, alpha_beta.py); a further order of magnitude is a different
transport, e.g. NCCL's TCP socket transport where the RDMA / libfabric plugin is not loaded (NCCL docs,
NCCL_NET / NCCL_IB_DISABLE). Shipped fits: Perlmutter inside a node 0.33-1.5, across nodes 0.015-0.055; Vista
0.74-1.14 (benchmarks/bench_comm_extrapolation.py, column fit/ab)."""


MAX_BELOW_SAMPLE_SCALE = 1.0 / MIN_RATE_FRACTION
"""Below its smallest sample a fit is followed as the cluster's alpha-beta times (fit / alpha-beta at that sample),
held to at most 10x: rule (3) applied to the fixed cost. A smallest sample more than 10x slower than the cluster's
latency plus bytes over its links carries a cost that NCCL's protocol and algorithm choices do not explain (they
account for up to ~4x, MIN_RATE_FRACTION), e.g. a 3 ms alpha from samples that start at hundreds of MB where NVLink's
latency is microseconds; scaling every smaller message by it would price a 1 KB all-gather in milliseconds."""


def ring_factor(collective: str, n: int) -> float:
    """Bytes each rank moves per buffer byte (NCCL-tests bus bandwidth factors)."""
    n = max(int(n), 1)
    if n == 1:
        return 0.0
    if collective == "allreduce":
        return 2.0 * (n - 1) / n
    if collective in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) / n
    return 1.0


@dataclass(frozen=True)
class LayoutFit:
    """alpha-beta + residual of one collective on one layout (nodes x GPUs per node)."""

    collective: str
    nodes: int
    gpus_per_node: int
    alpha_s: float
    busbw_bytes_per_s: float
    residual_knots_log2_bytes: tuple[float, ...]
    residual_log: tuple[float, ...]
    bytes_range: tuple[float, float]
    num_samples: int
    dropped_outliers: int = 0
    fit_mape: float = 0.0
    """Mean absolute percentage error of the fit over the samples it was fitted from (plausible, undisturbed)."""
    plausible_fraction: float = 1.0
    """Share of the layout's samples that were physically possible and undisturbed (comm_fit.plausible,
    comm_fit.disturbed); the rest were dropped as corrupt."""

    @property
    def group_size(self) -> int:
        return self.nodes * self.gpus_per_node

    def predict_s(self, nbytes: np.ndarray, n: int, collective: str, share: float = 1.0) -> np.ndarray:
        """`share`: groups crossing the network from one node at once (each gets 1/share of the NICs)."""
        base = self.alpha_s + share * ring_factor(collective, n) * nbytes / self.busbw_bytes_per_s
        if not self.residual_knots_log2_bytes:
            return base
        res = np.interp(np.log2(np.maximum(nbytes, 1.0)), self.residual_knots_log2_bytes, self.residual_log)
        return base * np.exp(res)


@dataclass(frozen=True)
class CommModel:
    """All layout fits of one cluster, with provenance."""

    cluster: str
    layouts: tuple[LayoutFit, ...]
    provenance: dict

    def to_json(self) -> dict:
        body = {"cluster": self.cluster, "layouts": [asdict(f) for f in self.layouts], "provenance": self.provenance}
        return {"format": COMM_FORMAT, "format_version": COMM_FORMAT_VERSION, **body, "checksum": _checksum(body)}


def _checksum(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def write_comm_model(directory: Path, model: CommModel) -> Path:
    """Written beside and renamed over (one rename): a reader, or a fit interrupted half way, never leaves or sees
    half a file in place of the previous model."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / COMM_FILE
    tmp = directory / f".{COMM_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(model.to_json(), separators=(",", ":")) + "\n")
    os.replace(tmp, path)
    return path


def _bad(path: Path, what: str) -> ProfileError:
    return ProfileError(f"communication model {path} is unusable: {what}. It is never used for predictions in "
                        f"this state; re-create it with `torchrun ... -m llmperf_hook.profile.comm_sampler` / "
                        f"`llmperf profile --comm`, or delete it to fall back to the cluster's alpha-beta.")


def _layout(raw: dict) -> LayoutFit:
    fit = LayoutFit(**{**raw, "residual_knots_log2_bytes": tuple(raw["residual_knots_log2_bytes"]),
                       "residual_log": tuple(raw["residual_log"]), "bytes_range": tuple(raw["bytes_range"])})
    ok = (fit.collective in SOURCE_OF and fit.nodes >= 1 and fit.gpus_per_node >= 1 and fit.alpha_s >= 0
          and math.isfinite(fit.alpha_s) and fit.busbw_bytes_per_s > 0 and math.isfinite(fit.busbw_bytes_per_s)
          and len(fit.residual_knots_log2_bytes) == len(fit.residual_log)
          and all(math.isfinite(v) and abs(v) < 5 for v in fit.residual_log)
          # np.interp needs finite knots in increasing order (comm_fit writes bin medians, sorted)
          and all(math.isfinite(k) for k in fit.residual_knots_log2_bytes)
          and all(a <= b for a, b in zip(fit.residual_knots_log2_bytes, fit.residual_knots_log2_bytes[1:]))
          # the sampled sizes decide where the cluster's figures take over (CommPredictor._group_s)
          and len(fit.bytes_range) == 2 and all(math.isfinite(b) and b > 0 for b in fit.bytes_range)
          and fit.bytes_range[0] <= fit.bytes_range[1])
    if not ok:
        raise ValueError(f"layout entry out of range: {raw}")
    return fit


def read_comm_model(directory: Path) -> CommModel:
    path = directory / COMM_FILE
    reason = planted_pickle_reason(directory, COMM_FILE)
    if reason is not None:
        raise _bad(path, reason)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise _bad(path, f"cannot be read as JSON ({err})") from err
    if not isinstance(doc, dict) or doc.get("format") != COMM_FORMAT or doc.get("format_version") != COMM_FORMAT_VERSION:
        raise _bad(path, "not an llmperf communication model of this format version")
    body = {k: doc.get(k) for k in ("cluster", "layouts", "provenance")}
    if doc.get("checksum") != _checksum(body):
        raise _bad(path, "its checksum does not match its content (corrupted or edited)")
    try:
        return CommModel(str(doc["cluster"]), tuple(_layout(f) for f in doc["layouts"]), dict(doc["provenance"]))
    except (KeyError, TypeError, ValueError) as err:
        raise _bad(path, f"a field is missing or out of range ({err})") from err


class CommPredictor:
    """`OpClassPredictor` for collectives from a CommModel (vectorised per collective and layout)."""

    def __init__(self, model: CommModel) -> None:
        self.model = model
        self.name = f"alpha-beta+residual:{model.cluster}"
        self._by_kind: dict[str, list[LayoutFit]] = {}
        self._fractions: dict[tuple, tuple[ClusterSpec, float]] = {}
        for fit in model.layouts:
            self._by_kind.setdefault(fit.collective, []).append(fit)

    def _kind(self, op_class: str) -> str | None:
        if op_class in self._by_kind:
            return op_class
        fallback = FALLBACK_OF.get(op_class)
        return fallback if fallback in self._by_kind else None

    def supports(self, op_class: str, phase: str, dtype: str) -> bool:
        return self._kind(op_class) is not None

    def layout_for(self, op_class: str, c: Collective) -> LayoutFit:
        """Exact layout if sampled, else the nearest one of the same tier (log distance in nodes and GPUs/node)."""
        fits = self._by_kind[self._kind(op_class) or ""]
        nodes, gpn = c.num_nodes, min(c.ranks_per_node, c.group_size)
        same_tier = [f for f in fits if (f.nodes == 1) == (nodes == 1)] or fits
        return min(same_tier, key=lambda f: (abs(math.log(f.nodes / nodes)) + abs(math.log(f.gpus_per_node / gpn)),
                                             -f.num_samples))

    def rate_fraction(self, op_class: str, op: Op, cluster: ClusterSpec) -> float:
        """Fitted speed / the cluster's alpha-beta speed, the smaller for the fit's own layout (alone, as sampled)
        and for `op`'s layout and sharing: a fit far below the cluster on the layout it measured measured another
        transport, whichever layout borrows it. Memoised per class, layout and cluster object: pricing, the warnings
        and the "cost models" names each ask it for every group of every predict (a third of `tune`'s time per
        candidate on a cluster with a comm model otherwise)."""
        c = op.collective
        assert c is not None
        key = (op_class, op.phase, c.group_size, c.ranks_per_node, c.groups_sharing_node, id(cluster))
        known = self._fractions.get(key)
        if known is not None and known[0] is cluster:
            return known[1]
        fit = self.layout_for(op_class, c)
        own = Op("fit", fit.collective, op.phase, {}, collective=Collective("fit", fit.group_size, fit.gpus_per_node))
        fraction = min(self._fraction(fit, fit.collective, own, cluster), self._fraction(fit, op_class, op, cluster))
        if len(self._fractions) > 4096:
            self._fractions.clear()
        self._fractions[key] = (cluster, fraction)
        return fraction

    def _fraction(self, fit: LayoutFit, op_class: str, op: Op, cluster: ClusterSpec) -> float:
        """The ratio at the fit's largest sampled message and in the bandwidth limit (time per extra byte), so it
        holds for every larger message too (a ratio of two affine functions is monotone between its ends)."""
        top = fit.bytes_range[1]
        probes = [replace(op, op_class=op_class, dims={"bytes": b}) for b in (top, 2.0 * top)]
        coll = op.collective
        assert coll is not None
        fitted = self._fit_s(fit, op_class, coll, np.array([top, 2.0 * top]))
        physical = np.array([collective_time_s(p, cluster) for p in probes])
        if fitted[0] <= 0 or fitted[1] <= fitted[0]:
            return float("inf")
        return float(min(physical[0] / fitted[0], (physical[1] - physical[0]) / (fitted[1] - fitted[0])))

    @staticmethod
    def _fit_s(fit: LayoutFit, op_class: str, coll: Collective, nbytes: np.ndarray) -> np.ndarray:
        """The fit alone for `coll`'s size and NIC sharing. The samples timed one group at a time; groups crossing
        the network together split the NICs (as predict/alpha_beta.py assumes). Inside a node each group has its
        own NVLink paths."""
        share = float(max(1, coll.groups_sharing_node)) if coll.num_nodes > 1 else 1.0
        return fit.predict_s(nbytes, coll.group_size, op_class, share)

    def _group_s(self, op_class: str, ops: Sequence[Op], cluster: ClusterSpec | None) -> np.ndarray:
        """Seconds of ops of one class and layout: the fit, bounded by the cluster's physical figures."""
        coll = ops[0].collective
        assert coll is not None
        if coll.group_size <= 1:
            return np.zeros(len(ops))
        nbytes = np.fromiter((float(op.dims["bytes"]) for op in ops), dtype=np.float64, count=len(ops))
        fit = self.layout_for(op_class, coll)
        fitted = self._fit_s(fit, op_class, coll, nbytes)
        if cluster is None:  # no physical figures to hold the fit against (a bare comm model in a unit test)
            return fitted
        if self.rate_fraction(op_class, ops[0], cluster) < MIN_RATE_FRACTION:
            return np.array([collective_time_s(op, cluster) for op in ops])
        below = np.flatnonzero(nbytes < fit.bytes_range[0])
        if below.size:  # the fit's alpha is not identifiable below its samples: the cluster's alpha-beta shape
            scale = min(self._edge_scale(fit, op_class, ops[0], cluster), MAX_BELOW_SAMPLE_SCALE)
            fitted[below] = [scale * collective_time_s(ops[i], cluster) for i in below]
        fastest = line_rate(cluster)  # line_rate_time_s, the cluster built once for the group
        return np.maximum(fitted, [collective_time_s(op, fastest) for op in ops])

    def _edge_scale(self, fit: LayoutFit, op_class: str, op: Op, cluster: ClusterSpec) -> float:
        """The fit over the cluster's alpha-beta at the fit's smallest sampled size, for `op`'s layout."""
        assert op.collective is not None
        edge = fit.bytes_range[0]
        return float(self._fit_s(fit, op_class, op.collective, np.array([edge]))[0]) / \
            collective_time_s(replace(op, dims={"bytes": edge}), cluster)

    def predict_s(self, ops: Sequence[Op], cluster: ClusterSpec | None) -> Sequence[float]:
        out = np.empty(len(ops))
        for (op_class, *_), idx in self._groups(ops).items():
            out[idx] = self._group_s(op_class, [ops[i] for i in idx], cluster)
        return out.tolist()

    def _groups(self, ops: Sequence[Op]) -> dict[tuple, list[int]]:
        groups: dict[tuple, list[int]] = {}
        for i, op in enumerate(ops):
            if op.collective is None or self._kind(op.op_class) is None:
                raise ProfileError(f"{self.name} cannot predict {op.name} ({op.op_class}); call supports() first")
            c = op.collective
            groups.setdefault((op.op_class, c.group_size, c.ranks_per_node, c.groups_sharing_node), []).append(i)
        return groups

    def priced_by(self, ops: Sequence[Op], cluster: ClusterSpec) -> dict[str, str]:
        """{collective class: the cost model that priced its ops}: this fit, the cluster's alpha-beta where rule (3)
        replaced the fit of a layout, or both ("A | B") when the class has layouts of each kind (predict's "cost
        models" line names what really priced each class, not the fit that was loaded)."""
        names: dict[str, set[str]] = {}
        for (op_class, n, _, _), idx in self._groups(ops).items():
            replaced = n > 1 and self.rate_fraction(op_class, ops[idx[0]], cluster) < MIN_RATE_FRACTION
            names.setdefault(op_class, set()).add(AlphaBetaPredictor.name if replaced else self.name)
        return {c: " | ".join(sorted(v)) for c, v in names.items()}

    def extrapolation_warnings(self, ops: Sequence[Op], cluster: ClusterSpec) -> tuple[str, ...]:
        """One line per collective class and layout priced outside what its fit saw: by the cluster's alpha-beta
        (the fit is far below the cluster's network), or beyond the fit's sampled message sizes."""
        out: list[str] = []
        for (op_class, n, _, _), idx in self._groups(ops).items():
            group = [ops[i] for i in idx]
            if n > 1:
                out.extend(self._warning(op_class, group, cluster))
        return tuple(dict.fromkeys(out))

    def _warning(self, op_class: str, ops: Sequence[Op], cluster: ClusterSpec) -> list[str]:
        coll = ops[0].collective
        assert coll is not None
        fit = self.layout_for(op_class, coll)
        where = (f"{op_class} over {coll.num_nodes}x{min(coll.ranks_per_node, coll.group_size)} (nodes x GPUs) "
                 f"with the fitted {fit.collective} layout {fit.nodes}x{fit.gpus_per_node} of {self.model.cluster}")
        fraction = self.rate_fraction(op_class, ops[0], cluster)
        if fraction < MIN_RATE_FRACTION:
            top = fit.bytes_range[1]
            busbw = ring_factor(fit.collective, fit.group_size) * top / float(
                fit.predict_s(np.array([top]), fit.group_size, fit.collective)[0])
            return [f"{where}: its samples reach {busbw / 1e9:.1f} GB/s of bus bandwidth, {fraction:.1%} of the "
                    f"speed {cluster.name}'s network figures give (below {MIN_RATE_FRACTION:.0%}: they measured "
                    f"another transport); priced by {cluster.name}'s alpha-beta model instead"]
        sizes = [float(op.dims["bytes"]) for op in ops]
        lo, hi = fit.bytes_range
        if min(sizes) >= lo and max(sizes) <= hi:
            return []
        span = f"{min(sizes):.3g}" if min(sizes) == max(sizes) else f"{min(sizes):.3g}-{max(sizes):.3g}"
        how = []
        if max(sizes) > hi:
            how.append("above them the learned residual is held at its edge value and time follows the fitted "
                       "alpha-beta")
        if min(sizes) < lo:
            scale = self._edge_scale(fit, op_class, ops[0], cluster)
            how.append(f"below them {cluster.name}'s alpha-beta, scaled to the fit at its smallest sample"
                       if scale <= MAX_BELOW_SAMPLE_SCALE else
                       f"below them {cluster.name}'s alpha-beta x {MAX_BELOW_SAMPLE_SCALE:g} (the fit's smallest "
                       f"sample is {scale:.0f}x the alpha-beta time there: a fixed cost the network does not explain)")
        return [f"{where}: messages of {span} bytes reach beyond the sampled {lo:.3g}-{hi:.3g}; {'; '.join(how)}; "
                f"never faster than the links at line rate plus latency"]
