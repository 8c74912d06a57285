"""`llmperf profile --comm` under torchrun: time collectives over message sizes and group layouts, fit the
cluster's comm model (comm_model.py) and store it as `$LLMPERF_HOME/profiles/comm/CLUSTER/comm_model.json`.

    torchrun --nnodes N --nproc-per-node G -m llmperf_hook profile --comm --cluster-name mycluster

Layouts: a pair inside a node, the full node, and (with several nodes) a pair across nodes and the whole job.
Collectives: all-reduce, all-gather, reduce-scatter, all-to-all and send/recv; the ones a backend lacks (gloo
has no reduce-scatter) are skipped with a note. Each size: warm-up, repetitions, the slowest rank's time
(what a training step waits for), trimmed mean; all of that in ROUNDS interleaved rounds (every layout,
collective and size once per round), and per size the quietest round's (interleaved_quietest): on a shared
machine other programs only ever add time, and one busy minute hits every size once instead of a whole
collective. Before session 9 one round: the CPU testbed's model (26 Nov 01:44) had its 2-rank ring all-gather
and reduce-scatter bandwidths (569 / 394 MB/s) below its all-reduce's (1.34 GB/s), where the all-reduce moves
twice their bytes. Every round's time goes to the store. Backend: NCCL on CUDA, gloo on CPU. torch is
imported inside.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import yaml

from llmperf_hook.errors import UsageError
from llmperf_hook.profile.comm_fit import CommSamples, fit_comm_model
from llmperf_hook.profile.comm_model import write_comm_model
from llmperf_hook.profile.machine_identity import machine_id
from llmperf_hook.profile.op_sampler import trimmed_mean
from llmperf_hook.resources import llmperf_home

COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall", "p2p")
ROUNDS = 3
"""Interleaved rounds of every layout, collective and size (module docstring)."""


@dataclass(frozen=True)
class CommRequest:
    cluster_name: str
    min_bytes: float = 2**12
    max_bytes: float = 2**26
    num_sizes: int = 8
    reps: int = 5
    collectives: tuple[str, ...] = COLLECTIVES
    rounds: int = ROUNDS
    """Interleaved rounds; per size the quietest round's time is fitted."""
    device: str | None = None
    """`--device`: "cuda" (NCCL) or "cpu" (gloo); None: cuda when torch sees a GPU, else cpu."""


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
        if (nodes, local) != (2, 1):  # else the same two ranks as the pair: timed twice, pooled as one layout
            out.append(("whole job", list(range(world)), nodes, local))
    return out


def same_machine_note(machines: Sequence[str], local: int) -> str | None:
    """A line when ranks torchrun counts as other nodes (`machines[r]`: rank r's machine_id) run on one machine (two
    torchruns with --nnodes 2 on one host): their 'across nodes' layouts time this machine's loopback, not a network,
    and the cluster file written from them says so nowhere else."""
    firsts = machines[::local] if local > 0 else []
    if len(firsts) < 2 or len(set(firsts)) == len(firsts):
        return None
    return (f"the {len(firsts)} nodes of this run (torchrun --nnodes) are {len(set(firsts))} machine(s): the layouts "
            f"'across nodes' timed this machine's loopback between processes, not a network link, so the comm model's "
            f"and the cluster file's inter-node figures are that loopback; run one torchrun per machine for them")


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
    world = os.environ["WORLD_SIZE"].strip()
    if not world.isdigit() or int(world) < 2:  # before the process group and the store: nothing to time
        raise UsageError(f"--comm needs at least 2 processes, but $WORLD_SIZE={world!r}: run it under torchrun "
                         f"--nproc-per-node 2 or more.")
    device = req.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: torch sees no CUDA device here. Use --device cpu (gloo) or run on GPU nodes.")
    local = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"]))
    from llmperf_hook.profile.local_hardware import memory_capacity_bytes

    check_message_sizes(req, 1 if device == "cuda" else local, memory_capacity_bytes(device))  # before any rank waits
    from llmperf_hook.refine.observation_store import check_writable_dir

    check_writable_dir(llmperf_home(), "the comm model and the store")  # not after minutes of measuring
    if os.environ["RANK"] == "0":  # the rank that stores the timings: a damaged store is refused now, not then
        from llmperf_hook.store import open_store

        with open_store() as store:
            store.check_integrity()
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if device == "cuda" else "gloo")
    try:
        return _sample_and_fit(dist, req, device)
    finally:
        dist.destroy_process_group()


def _sample_and_fit(dist, req: CommRequest, device: str) -> CommResult:
    world, local = dist.get_world_size(), int(os.environ.get("LOCAL_WORLD_SIZE", dist.get_world_size()))
    sizes = np.geomspace(req.min_bytes, req.max_bytes, req.num_sizes)
    layouts = _layouts(world, local)
    groups = [dist.new_group(ranks) for _, ranks, _, _ in layouts]  # every rank, every layout, as torch requires
    labels = [f"{label} ({nodes}x{gpn})" for label, _, nodes, gpn in layouts]
    rounds: dict[tuple[int, str], list[list[float]]] = {}
    notes: list[str] = []
    for _ in range(max(req.rounds, 1)):
        for li, (label, ranks, _, _) in enumerate(layouts):
            for kind in req.collectives:
                if (li, kind) in rounds and rounds[(li, kind)] is None:
                    continue
                times = _measure_layout(dist, kind, ranks, groups[li], sizes, device, req.reps)
                if times is None:
                    notes.append(f"{kind} on {label}: not supported by the {dist.get_backend()} backend, skipped")
                rounds[(li, kind)] = None if times is None else [*(rounds.get((li, kind)) or []), times]
    samples = [CommSamples(kind, layouts[li][2], layouts[li][3], np.asarray(sizes, dtype=float),
                           quietest_round(runs)) for (li, kind), runs in rounds.items() if runs]
    machines: list[Any] = [None] * world
    dist.all_gather_object(machines, (machine_id(), socket.gethostname()))
    note = same_machine_note([machine for machine, _ in machines], local)
    if note:
        notes.append(note)
    return _write(dist, req, samples, notes, labels, device, rounds={k: v for k, v in rounds.items() if v},
                  hosts=tuple(sorted({host for _, host in machines})),
                  machines=tuple(sorted({machine for machine, _ in machines})))


def quietest_round(runs: Sequence[Sequence[float]]) -> np.ndarray:
    """Per size, the least of the rounds' times (other programs only add time)."""
    return np.asarray(runs, dtype=float).min(axis=0)


def _write(dist, req: CommRequest, samples: list[CommSamples], notes: list[str], labels: list[str],
           device: str, rounds: dict | None = None, hosts: Sequence[str] = (),
           machines: Sequence[str] = ()) -> CommResult:
    n = sum(len(s.time_s) for s in samples)
    if dist.get_rank() != 0:
        return CommResult(None, n, tuple(labels), tuple(notes))
    from llmperf_hook.store import open_store

    backend = str(dist.get_backend())
    with open_store() as store:
        store.record_comm_samples(_store_rows(req.cluster_name, backend, samples, rounds))
    prov = {"samples": f"llmperf profile --comm ({backend}, {device}, world {dist.get_world_size()}; per size the "
                       f"quietest of {max(req.rounds, 1)} interleaved round(s) of {req.reps} repetitions)",
            "rounds": str(max(req.rounds, 1)),
            "fitted_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "notes": "; ".join(notes)}
    model = fit_comm_model(req.cluster_name, samples, prov)
    path = write_comm_model(llmperf_home() / "profiles" / "comm" / req.cluster_name.lower(), model)
    notes += [_fit_line(fit) for fit in model.layouts]
    if model.provenance.get("rejected_layouts"):
        notes.append(f"not fitted: {model.provenance['rejected_layouts']}")
    cluster_yaml = _ensure_cluster_yaml(req.cluster_name, model, device, dist.get_world_size(), hosts, machines)
    if cluster_yaml is not None:
        notes.append(f"wrote {cluster_yaml}: `--cluster {req.cluster_name}` now names this machine (edit it for "
                     f"a larger cluster of the same nodes)")
    return CommResult(str(path), n, tuple(labels), tuple(notes))


NOISY_FIT_MAPE = 0.25
"""A layout fitted further than this from its own (quietest) timings is said to be uncertain: alpha-beta plus the
residual curve is meant to fit undisturbed collectives within 5 % (issue 4's target on the public NCCL layouts,
benchmarks/bench_comm_accuracy.py), so five times that is timings scattered by other work on the cores or links
(170 % for a gloo all-reduce 1x2 at load 8 on 2 cores, 28 Nov 2026)."""


def _fit_line(fit) -> str:
    """One layout's fitted alpha-beta, as the user checks it: latency, bus bandwidth, the error over its timings."""
    lo, hi = fit.bytes_range
    line = (f"{fit.collective} {fit.nodes}x{fit.gpus_per_node}: latency {fit.alpha_s * 1e6:.0f} us, bus bandwidth "
            f"{fit.busbw_bytes_per_s / 1e9:.3g} GB/s, within {fit.fit_mape:.0%} of its {fit.num_samples} timings "
            f"({lo:.0f}-{hi:.0f} bytes)")
    if fit.fit_mape > NOISY_FIT_MAPE:
        line += ("; timings this scattered (other work on the cores or links?) leave it uncertain: rerun on a quiet "
                 "machine, the same command replaces it")
    return line


def _store_rows(cluster: str, backend: str, samples: list[CommSamples], rounds: dict | None) -> list:
    """One store row per size and round (the fitted quietest ones alone when no rounds are given)."""
    from llmperf_hook.store import CommSampleRecord

    per_sample = [[s.time_s] for s in samples] if rounds is None else list(rounds.values())
    return [CommSampleRecord(cluster, backend, s.collective, s.nodes, s.gpus_per_node, float(b), float(t))
            for s, runs in zip(samples, per_sample) for times in runs for b, t in zip(s.nbytes, times)]


def check_message_sizes(req: CommRequest, local_ranks: int, memory_bytes: int) -> None:
    """Sizes the sampler can allocate: finite, min < max, and the largest collective's buffers (input, output and
    a gathered copy, about 3x the message on every rank of this node) in half the device memory.
    Sizes spanning less than a doubling are refused. latency + size / bandwidth tells the two apart only by how the
    time grows with the size, and where one term dominates how well depends on max / min alone (the time grows by
    (max - min) / bandwidth over a flat latency, or the latency is read off a time in proportion to the size), so the
    rule is a ratio. Over closer sizes the split was timing noise: a gloo pair measured at 375 us and 1.5 GB/s over
    4 KiB-1 MiB fitted 0 us and 0.011-0.012 GB/s over 4096-4096 and 4096-4100 bytes. 2 is a floor, not a noise
    threshold (the noise is unknown before the timings): a latency-bound doubling can still be off (4-8 KiB: 320 us,
    2.0 GB/s), which is why the default span, 4 KiB-64 MiB, reaches sizes where bandwidth dominates."""
    if not (np.isfinite(req.min_bytes) and np.isfinite(req.max_bytes) and 0 < req.min_bytes <= req.max_bytes):
        raise UsageError(f"--min-bytes {req.min_bytes:g} / --max-bytes {req.max_bytes:g}: message sizes must be "
                         f"finite, positive, and min <= max (defaults 4096 and 67108864 bytes).")
    if req.max_bytes < 2 * req.min_bytes:
        raise UsageError(f"--min-bytes {req.min_bytes:g} / --max-bytes {req.max_bytes:g} span less than a doubling: the "
                         f"comm model (latency + size / bandwidth, fitted per layout) separates latency from bandwidth "
                         f"only by how the time grows with the message size, which the ratio of the two sizes bounds: "
                         f"across sizes this close, timing noise decides the split. Give a --max-bytes of at least "
                         f"2 x --min-bytes, better one where bandwidth dominates (defaults 4096 and 67108864 bytes).")
    need = 3.0 * req.max_bytes * local_ranks
    if need > memory_bytes / 2:
        raise UsageError(f"--max-bytes {req.max_bytes:g}: {local_ranks} ranks on this node would allocate about "
                         f"{need / 2**30:.1f} GiB of buffers, more than half of the {memory_bytes / 2**30:.1f} GiB "
                         f"here. Give a --max-bytes of at most {memory_bytes / 6 / local_ranks:.3g}.")


def _ensure_cluster_yaml(name: str, model: Any, device: str, world: int, hosts: Sequence[str] = (),
                         machines: Sequence[str] = ()) -> Path | None:
    """$LLMPERF_HOME/clusters/NAME.yaml describing the measured machine, when NAME is no cluster yet (so the
    `--cluster NAME` that uses the comm model also resolves); an existing cluster file is never touched. It records
    what it measured on (`measured_on`: the device as profile fingerprints name it, the ranks' hosts and their
    machines' boot ids, machine_identity.py: a container restarted under a new host name is still here), so that
    predict assumes it for a profile of that device whatever its --name, on those hosts first (api.assumed_cluster:
    two machines of one CPU model sharing an $LLMPERF_HOME have one profile name but not one network)."""
    from llmperf_hook.hardware.load import find_config_file
    from llmperf_hook.profile import local_hardware as lh

    try:
        find_config_file("clusters", name)
        return None
    except UsageError:
        pass
    gpu = _local_hardware_name(device)
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    fits = {(f.collective, f.nodes): f for f in model.layouts}
    intra = fits.get(("allreduce", 1)) or next((f for f in model.layouts if f.nodes == 1), None)
    inter = fits.get(("allreduce", 2)) or next((f for f in model.layouts if f.nodes > 1), intra)
    doc = {"name": name, "gpu": gpu, "gpus_per_node": local,
           "intra_node_bandwidth_GBps": round((intra.busbw_bytes_per_s if intra else 1e9) / 1e9, 3),
           "inter_node_bandwidth_GBps": round((inter.busbw_bytes_per_s if inter else 1e9) / 1e9, 3),
           "intra_node_latency_us": round((intra.alpha_s if intra else 1e-5) * 1e6, 2),
           "inter_node_latency_us": round((inter.alpha_s if inter else 1e-5) * 1e6, 2),
           "description": f"{lh.fingerprint(device, 1)['device']} x{local} per node, measured by `llmperf profile "
                          f"--comm` ({world} ranks); collectives use the fitted comm model of the same name",
           "sources": f"all-reduce alpha-beta fits, {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}",
           "measured_on": {"device": lh.fingerprint(device, 1)["device"],
                           "hosts": list(hosts) or [socket.gethostname()],
                           "machines": list(machines) or [machine_id()]}}
    path = llmperf_home() / "clusters" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _local_hardware_name(device: str) -> str:
    """The hardware this device is: the newest fitted profile of it in $LLMPERF_HOME (`llmperf profile --name
    my-cpu` on this machine: the file named the default name, which that profile never looked up), else the
    default profile name, whose hardware file is written from measurements when none of that name exists yet."""
    from llmperf_hook.hardware.load import find_config_file
    from llmperf_hook.profile import local_hardware as lh

    profiled = _newest_profile_of(lh.fingerprint(device, 1)["device"])
    if profiled is not None:
        return profiled
    name = lh.default_profile_name(device, 1)
    try:
        find_config_file("hardware", name)
    except UsageError:
        # every dtype, fp16 on CPU too: a dtype missing from the YAML would be priced at the highest peak listed
        peaks = {dt: lh.measure_peak_flop_per_s(dt, device) for dt in ("fp32", "bf16", "fp16")}
        lh.write_hardware_yaml(name, device, peaks, lh.measure_roofline("fp32", device, 1), 1)
    return name



def _newest_profile_of(device_name: str) -> str | None:
    """The most recently fitted profile in $LLMPERF_HOME/profiles whose fingerprint device is `device_name`."""
    found = []
    for meta in (llmperf_home() / "profiles").glob("*/profile.json"):
        try:
            device = (json.loads(meta.read_text()).get("hardware") or {}).get("device")
            if device == device_name:
                found.append((meta.stat().st_mtime, meta.parent.name))
        except (OSError, ValueError, AttributeError):
            continue
    return max(found)[1] if found else None
