"""`llmperf profile --comm` under torchrun: time collectives over message sizes and group layouts, fit the
cluster's comm model (comm_model.py) and store it as `$LLMPERF_HOME/profiles/comm/CLUSTER/comm_model.json`.

    torchrun --nnodes N --nproc-per-node G -m llmperf_hook profile --comm --cluster-name mycluster

Layouts: a pair inside a node, the full node, and (with several nodes) a pair across nodes and the whole job.
Collectives: all-reduce, all-gather, reduce-scatter, all-to-all and send/recv; the ones a backend lacks (gloo
has no reduce-scatter) are skipped with a note. Each size: warm-up, repetitions, the slowest rank's time
(what a training step waits for), trimmed mean. Backend: NCCL on CUDA, gloo on CPU. torch is imported inside.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from llmperf_hook.errors import UsageError
from llmperf_hook.profile.comm_fit import CommSamples, fit_comm_model
from llmperf_hook.profile.comm_model import write_comm_model
from llmperf_hook.profile.op_sampler import trimmed_mean
from llmperf_hook.resources import llmperf_home

COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall", "p2p")


@dataclass(frozen=True)
class CommRequest:
    cluster_name: str
    min_bytes: float = 2**12
    max_bytes: float = 2**26
    num_sizes: int = 8
    reps: int = 5
    collectives: tuple[str, ...] = COLLECTIVES


@dataclass(frozen=True)
class CommResult:
    path: str | None
    """Where rank 0 wrote the model (None on other ranks)."""
    num_samples: int
    layouts: tuple[str, ...]
    notes: tuple[str, ...]


def _layouts(world: int, local: int) -> list[tuple[str, list[int], int, int]]:
    """(label, ranks, nodes, gpus_per_node) of the layouts this job can measure."""
    nodes = world // local
    out = []
    if local >= 2:
        out.append(("pair in node", [0, 1], 1, 2))
    if local > 2:
        out.append(("full node", list(range(local)), 1, local))
    if nodes >= 2:
        out.append(("pair across nodes", [0, local], 2, 1))
        out.append(("whole job", list(range(world)), nodes, local))
    return out


def _op(dist, kind: str, group, ranks: list[int], nbytes: float, device: str):
    import torch

    n = len(ranks)
    elems = max(n, int(nbytes // 4) // n * n)  # fp32 elements, divisible by the group size
    buf = torch.ones(elems, device=device)
    me = dist.get_rank()
    if kind == "allreduce":
        return lambda: dist.all_reduce(buf, group=group)
    if kind == "allgather":  # nbytes = the gathered output
        parts = [torch.empty(elems // n, device=device) for _ in range(n)]
        return lambda: dist.all_gather(parts, buf[: elems // n], group=group)
    if kind == "reducescatter":  # nbytes = the full input
        out = torch.empty(elems // n, device=device)
        reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return lambda: reduce_scatter(out, buf, group=group)
    if kind == "alltoall":
        out = torch.empty_like(buf)
        return lambda: dist.all_to_all_single(out, buf, group=group)
    src, dst = ranks[0], ranks[-1]  # p2p: first to last rank of the layout, nbytes = one message

    def p2p() -> None:
        if me == src:
            dist.send(buf, dst, group=group)
        elif me == dst:
            dist.recv(buf, src, group=group)
    return p2p


def _time_op(dist, fn, group, device: str, reps: int) -> float:
    """Trimmed mean over reps of the slowest member's time."""
    import torch

    times = []
    for i in range(reps + 1):
        dist.barrier(group=group)
        t0 = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        elapsed = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=device)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=group)
        if i:  # the first repetition is the warm-up (connection setup)
            times.append(float(elapsed.item()))
    return trimmed_mean(times)


def _measure_layout(dist, kind: str, ranks: list[int], group, sizes: Sequence[float], device: str,
                    reps: int) -> list[float] | None:
    """Times per size, or None when the backend lacks the collective (decided collectively)."""
    import torch

    mine = dist.get_rank() in ranks
    out = []
    for nbytes in sizes:
        t = float("nan")
        if mine:
            try:
                t = _time_op(dist, _op(dist, kind, group, ranks, nbytes, device), group, device, reps)
            except (RuntimeError, NotImplementedError, ValueError):
                t = float("nan")
        out.append(t)
        if mine and not np.isfinite(t):
            break
    status = torch.tensor([0.0 if all(np.isfinite(out)) or not mine else 1.0], device=device)
    dist.all_reduce(status, op=dist.ReduceOp.MAX)
    return None if status.item() > 0 else out


def run_comm_profile(req: CommRequest) -> CommResult:
    import torch
    import torch.distributed as dist

    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise UsageError("`llmperf profile --comm` must run under torchrun (RANK / WORLD_SIZE are not set): "
                         "torchrun --nproc-per-node 2 -m llmperf_hook profile --comm --cluster-name NAME")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if device == "cuda" else "gloo")
    try:
        return _sample_and_fit(dist, req, device)
    finally:
        dist.destroy_process_group()


def _sample_and_fit(dist, req: CommRequest, device: str) -> CommResult:
    world, local = dist.get_world_size(), int(os.environ.get("LOCAL_WORLD_SIZE", dist.get_world_size()))
    if world < 2:
        raise UsageError("--comm needs at least 2 processes (torchrun --nproc-per-node 2 or more).")
    sizes = np.geomspace(req.min_bytes, req.max_bytes, req.num_sizes)
    samples, notes, labels = [], [], []
    for label, ranks, nodes, gpn in _layouts(world, local):
        group = dist.new_group(ranks)  # every rank calls new_group for every layout, as torch requires
        labels.append(f"{label} ({nodes}x{gpn})")
        for kind in req.collectives:
            times = _measure_layout(dist, kind, ranks, group, sizes, device, req.reps)
            if times is None:
                notes.append(f"{kind} on {label}: not supported by the {dist.get_backend()} backend, skipped")
                continue
            samples.append(CommSamples(kind, nodes, gpn, np.asarray(sizes, dtype=float), np.asarray(times)))
    return _write(dist, req, samples, notes, labels, device)


def _write(dist, req: CommRequest, samples: list[CommSamples], notes: list[str], labels: list[str],
           device: str) -> CommResult:
    n = sum(len(s.time_s) for s in samples)
    if dist.get_rank() != 0:
        return CommResult(None, n, tuple(labels), tuple(notes))
    from llmperf_hook.store import CommSampleRecord, open_store

    backend = str(dist.get_backend())
    with open_store() as store:
        store.record_comm_samples([CommSampleRecord(req.cluster_name, backend, s.collective, s.nodes, s.gpus_per_node,
                                                    float(b), float(t)) for s in samples
                                   for b, t in zip(s.nbytes, s.time_s)])
    prov = {"samples": f"llmperf profile --comm ({backend}, {device}, world {dist.get_world_size()})",
            "fitted_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "notes": "; ".join(notes)}
    model = fit_comm_model(req.cluster_name, samples, prov)
    path = write_comm_model(llmperf_home() / "profiles" / "comm" / req.cluster_name.lower(), model)
    return CommResult(str(path), n, tuple(labels), tuple(notes))

