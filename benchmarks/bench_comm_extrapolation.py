"""The shipped comm models (configs/profiles/comm/) at every collective, size and layout a job can ask for.

    python benchmarks/bench_comm_extrapolation.py [--unbounded] [--detail]

Per cluster (perlmutter, vista), collective and group layout that graph/ builds (inside a node, a full node,
2..64 nodes with 1..all GPUs of each node, the node's other groups sharing its NICs), messages of 1 KB .. 64 GB:
which fit prices it (or the cluster's alpha-beta, when the fit is far below the cluster's network: `fit/ab`, its
speed over the alpha-beta's, under comm_model.MIN_RATE_FRACTION), the fit's sampled sizes, times and bus
bandwidth (NCCL-tests convention, factor x bytes / time), and three sanity rules:

- `link`: bus bandwidth never above the links' line rate (time >= predict/alpha_beta.line_rate_time_s);
- `mono`: time non-decreasing in size (checked on a grid of 1/8 octave);
- `floor`: outside the sampled sizes (above and below), bus bandwidth never below comm_model.MIN_RATE_FRACTION of
  what the cluster's figures give at the same size (time <= alpha-beta time / MIN_RATE_FRACTION).

`--unbounded` prices with the fits alone (no cluster figures: the model before H108) to show what they did.
Exit status 1 when a rule fails.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmperf_hook.graph.op import Collective, Op  # noqa: E402
from llmperf_hook.hardware.load import load_cluster  # noqa: E402
from llmperf_hook.hardware.spec import ClusterSpec  # noqa: E402
from llmperf_hook.predict.alpha_beta import collective_time_s, line_rate_time_s  # noqa: E402
from llmperf_hook.predict.fitted import find_comm_model  # noqa: E402
from llmperf_hook.profile.comm_model import MIN_RATE_FRACTION, CommPredictor, ring_factor  # noqa: E402

CLUSTERS = ("perlmutter", "vista")
KINDS = ("allreduce", "allgather", "reducescatter", "alltoall", "p2p")
NODES = (1, 2, 4, 8, 16, 64)
GRID_LOG2_BYTES = np.arange(10.0, 36.0 + 1e-9, 0.125)
"""1 KB .. 64 GB in 1/8 octaves."""
SHOWN_LOG2_BYTES = (10, 20, 30, 34, 36)
"""Columns of the table: 1 KB, 1 MB, 1 GB, 16 GB, 64 GB."""


@dataclass(frozen=True)
class Row:
    cluster: str
    kind: str
    layout: str
    priced_by: str
    rate_fraction: float
    """Fitted speed / the cluster's alpha-beta speed (comm_model.CommPredictor.rate_fraction)."""
    sampled: str
    times_s: tuple[float, ...]
    busbw_top_bytes_per_s: float
    violations: tuple[str, ...]


def layouts(cluster: ClusterSpec) -> list[Collective]:
    """(nodes, GPUs per node, groups sharing the node's NICs): graph/ places r ranks of a group per node and the
    node's other G / r groups of the same kind cross the network beside it."""
    g = cluster.gpus_per_node
    per_node = sorted({r for r in (1, 2, 4, 8) if r <= g} | {g})
    out = [Collective("x", r, r) for r in per_node if r >= 2]
    out += [Collective("x", nodes * r, r, g // r) for nodes in NODES if nodes > 1 for r in per_node]
    return out


def _ops(kind: str, coll: Collective, log2_bytes: np.ndarray) -> list[Op]:
    return [Op(f"{kind}{b}", kind, "step", {"bytes": float(2.0 ** b)}, collective=coll) for b in log2_bytes]


def check(comm: CommPredictor, cluster: ClusterSpec, kind: str, coll: Collective, bounded: bool) -> Row:
    ops = _ops(kind, coll, GRID_LOG2_BYTES)
    t = np.asarray(comm.predict_s(ops, cluster if bounded else None))
    line = np.asarray([line_rate_time_s(op, cluster) for op in ops])
    ab = np.asarray([collective_time_s(op, cluster) for op in ops])
    fit = comm.layout_for(kind, coll)
    sizes = 2.0 ** GRID_LOG2_BYTES
    outside = (sizes > fit.bytes_range[1]) | (sizes < fit.bytes_range[0])
    bad = []
    if np.any(t < line * (1 - 1e-9)):
        bad.append(f"link: {np.mean(t < line):.0%} of sizes beat line rate (up to {np.max(line / t):.1f}x)")
    if np.any(np.diff(t) < 0):
        bad.append(f"mono: falls {int(np.sum(np.diff(t) < 0))} times (worst {np.min(np.diff(t) / t[1:]):.1%})")
    if np.any(t[outside] > ab[outside] / MIN_RATE_FRACTION * 1.01):
        bad.append(f"floor: up to {np.max(t[outside] / ab[outside]):.0f}x the cluster's alpha-beta beyond the samples")
    fraction = comm.rate_fraction(kind, ops[0], cluster)
    priced = "alpha-beta" if bounded and fraction < MIN_RATE_FRACTION else f"fit {fit.nodes}x{fit.gpus_per_node}"
    shown = [int(np.flatnonzero(GRID_LOG2_BYTES == b)[0]) for b in SHOWN_LOG2_BYTES]
    top = ring_factor(kind, coll.group_size) * 2.0 ** GRID_LOG2_BYTES[-1] / t[-1]
    return Row(cluster.name, kind, f"{coll.num_nodes}x{coll.ranks_per_node}/{coll.groups_sharing_node}", priced,
               fraction,
               f"{fit.bytes_range[0]:.1e}-{fit.bytes_range[1]:.1e}", tuple(float(t[i]) for i in shown), float(top),
               tuple(bad))


def _seconds(t: float) -> str:
    return f"{t * 1e6:.0f}us" if t < 1e-3 else f"{t * 1e3:.1f}ms" if t < 1 else f"{t:.2f}s"


def render(rows: list[Row], detail: bool) -> None:
    head = "  ".join(f"{'2^' + str(b) + 'B':>8s}" for b in SHOWN_LOG2_BYTES)
    print(f"{'cluster':10s} {'collective':13s} {'layout':>9s} {'priced by':>11s} {'fit/ab':>6s} "
          f"{'sampled bytes':>15s}  {head}  {'busbw@64GB':>10s}  sanity")
    for r in rows:
        if not detail and r.layout.split("/")[0] not in ("1x2", "1x4", "2x1", "2x2", "2x4", "8x4", "64x1", "64x4"):
            continue
        times = "  ".join(f"{_seconds(t):>8s}" for t in r.times_s)
        print(f"{r.cluster:10s} {r.kind:13s} {r.layout:>9s} {r.priced_by:>11s} {r.rate_fraction:6.3f} "
              f"{r.sampled:>15s}  {times}  {r.busbw_top_bytes_per_s / 1e9:7.1f}GB/s  {'; '.join(r.violations) or 'ok'}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--unbounded", action="store_true", help="the fits alone, without the cluster's figures")
    ap.add_argument("--detail", action="store_true", help="every layout (default: a representative subset)")
    args = ap.parse_args(argv)
    rows = []
    for name in CLUSTERS:
        cluster, comm = load_cluster(name), find_comm_model(name)
        assert isinstance(comm, CommPredictor), name
        rows += [check(comm, cluster, kind, coll, not args.unbounded) for kind in KINDS for coll in layouts(cluster)]
    render(rows, args.detail)
    failed = [r for r in rows if r.violations]
    print(f"\nlayout: nodes x GPUs per node / groups sharing the node's NICs; floor fraction {MIN_RATE_FRACTION:.0%}")
    print(f"{len(rows)} (cluster, collective, layout) cases over 1 KB..64 GB: {len(failed)} break a sanity rule "
          f"({sum(any(v.startswith('link') for v in r.violations) for r in rows)} link, "
          f"{sum(any(v.startswith('mono') for v in r.violations) for r in rows)} mono, "
          f"{sum(any(v.startswith('floor') for v in r.violations) for r in rows)} floor)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
