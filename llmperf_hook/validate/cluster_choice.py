"""A measured run's cluster columns -> the cluster description its prediction uses.

Precedence (highest first):
  1. the `cluster` column: a preset name or a cluster YAML path, used as given;
  2. a shipped cluster preset (configs/clusters/) with the row's GPU, GPUs per node and inter-node bandwidth
     per GPU (from `inter_node_bandwidth_GBps`, or read off `inter_node_network` text such as
     "InfiniBand HDR 200Gb/s x8 per node" or "800 Gbps per node"); a run that fits in one node ignores
     the network and takes the first preset with that GPU and node size;
  3. otherwise a derived cluster YAML (written into the run's work directory): the closest preset for that
     GPU (else for its generation, with the GPU swapped) with the row's GPUs per node and bandwidths put in,
     so its documented efficiencies carry over; the node-topology fits (intra-node latency and efficiency) only
     when the node size matches, else the loader's defaults for that GPU generation and node size.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import yaml

from llmperf_hook.errors import UsageError
from llmperf_hook.validate.measured_run import MeasuredRun

BANDWIDTH_MATCH_TOLERANCE = 0.02
"""Relative tolerance when comparing a row's network bandwidth with a preset's."""


@dataclass(frozen=True)
class ClusterChoice:
    cluster: str
    """Preset name or YAML path, passed to `api.predict_command(cluster=...)`."""
    notes: tuple[str, ...] = ()
    """How it was chosen, and what was assumed."""
    derived: str = ""
    """For a cluster derived from a preset (a YAML written into the work folder): what it is, in words, for a report
    that outlives the folder; "" for a preset or the user's own file."""


def hardware_name_for(gpu_type: str) -> tuple[str, str | None]:
    """-> (hardware preset name, assumption or None) from a GPU description such as "A100-SXM4-80GB"."""
    text = gpu_type.lower().replace(" ", "")
    for family, preset in (("gh200", "gh200-96gb"), ("gb200", "gb200-186gb"), ("b200", "b200-180gb"),
                           ("l40s", "l40s-48gb"), ("mi300x", "mi300x-192gb")):
        if family in text:
            return preset, None
    if "h200" in text:
        return "h200-sxm-141gb", (None if "nvl" not in text else f"{gpu_type!r} modelled as H200 SXM")
    if "h100" in text:
        return ("h100-pcie-80gb", None) if "pcie" in text else ("h100-sxm5-80gb", None)
    if "a100" in text:
        if "pcie" in text and "40" not in text:
            return "a100-pcie-80gb", None
        if "40" in text:
            return "a100-sxm4-40gb", (None if "pcie" not in text else f"{gpu_type!r} modelled as A100 SXM4 40 GB")
        if "80" in text:
            return "a100-sxm4-80gb", None
        return "a100-sxm4-80gb", f"GPU {gpu_type!r}: memory size not stated, A100-SXM4-80GB assumed (same peak FLOP/s)"
    raise UsageError(f"gpu_type {gpu_type!r} is not a GPU llmperf has a preset for (A100 40/80 GB SXM and PCIe, H100 SXM "
                     "and PCIe, H200, GH200, B200, GB200, L40S, MI300X); add a `cluster` column naming a cluster YAML "
                     "for it.")


def parse_inter_node_GBps_per_gpu(run: MeasuredRun) -> float | None:
    """Per-GPU one-direction inter-node bandwidth in GB/s (1e9 B/s), from the number column or the text."""
    if run.inter_node_bandwidth_GBps:
        return run.inter_node_bandwidth_GBps
    text = run.inter_node_network
    match = LINK_RATE.search(text)
    if not match or not run.gpus_per_node:
        return None
    prefix, unit = match.group(2).upper(), match.group(3)
    bytes_per_unit = 1.0 if unit in ("B/s", "Bps", "byte/s", "Byte/s") else 1 / 8  # B = byte, b = bit
    link_GBps = float(match.group(1)) * {"M": 1e-3, "G": 1.0, "T": 1e3}[prefix] * bytes_per_unit
    count = (re.match(r"\s*(?:x|×)\s*(\d+)", text[match.end():], re.I)
             or re.search(r"(\d+)\s*(?:x|×)\s*\S*\s*$", text[:match.start()], re.I))
    links = int(count.group(1)) if count else 1
    per_node = PER_NODE_TEXT.search(text) is not None or count is not None
    gbyte_s = link_GBps * links
    return gbyte_s / run.gpus_per_node if per_node else gbyte_s


PER_NODE_TEXT = re.compile(r"(?:\bper[\s-]+|/\s*)node\b", re.I)
"""'per node', 'per-node', '/node': the rate is the node's, shared by its GPUs ('3.2 Tb/s per-node' was read as
per GPU, 8x the bandwidth of an 8-GPU node)."""

LINK_RATE = re.compile(r"(\d+(?:\.\d+)?)\s*([MGTmgt])(bit/s|[Bb]yte/s|bps|Bps|b/s|B/s)")
"""A link rate in network text: "200Gb/s", "800 Gbps", "400 Gbit/s" (bits), "50 GB/s", "100 GBps" (bytes)."""


def read_cluster_presets(clusters_dir: Path) -> dict[str, dict[str, object]]:
    """Shipped cluster YAMLs by name (the standard keys only are relied on)."""
    presets: dict[str, dict[str, object]] = {}
    for path in sorted(clusters_dir.glob("*.yaml")):
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if isinstance(raw, dict) and "gpu" in raw:
            presets[str(raw.get("name") or path.stem)] = raw
    return presets


def choose_cluster(run: MeasuredRun, presets: Mapping[str, Mapping[str, object]], work_dir: Path) -> ClusterChoice:
    if run.cluster:
        return ClusterChoice(run.cluster, ("cluster column",))
    if not run.gpu_type:
        raise UsageError(f"row {run.row_id}: no cluster: its `cluster` cell is blank and it gives no `gpu_type` (with "
                         "`gpus_per_node`). Name a cluster preset or YAML file in the `cluster` cell, or describe the "
                         "GPUs in `gpu_type` and `gpus_per_node`.")
    hardware, assumption = hardware_name_for(run.gpu_type)
    notes = [assumption] if assumption else []
    per_node = run.gpus_per_node or run.num_gpus
    same_node = {n: p for n, p in presets.items() if p.get("gpu") == hardware and p.get("gpus_per_node") == per_node}
    inter = parse_inter_node_GBps_per_gpu(run)
    single_node = run.num_gpus <= per_node
    for name, preset in same_node.items():
        if single_node or (inter is not None and _close(preset.get("inter_node_bandwidth_GBps"), inter)):
            return ClusterChoice(name, tuple(notes + [f"preset {name}"]))
    if inter is None and not single_node:
        raise UsageError(f"row {run.row_id}: {run.num_gpus} GPUs span nodes but the inter-node network "
                         f"{run.inter_node_network!r} gives no bandwidth; add `inter_node_bandwidth_GBps` "
                         "(per GPU, one direction) or a `cluster` column.")
    return _derived_cluster(run, hardware, inter, presets, work_dir, notes)


def _close(value: object, target: float) -> bool:
    return isinstance(value, (int, float)) and abs(float(value) - target) <= BANDWIDTH_MATCH_TOLERANCE * target


NODE_TOPOLOGY_KEYS = ("intra_node_latency_us", "intra_node_latency_per_step_us", "intra_node_bus_efficiency",
                      "nics_per_node")
"""Preset values fitted to one node design (GPUs per node, NVSwitch or not): dropped when the row's node differs,
so the loader's defaults for that GPU generation and node size apply (hardware/load.py INTRA_NODE_DEFAULTS)."""


def _base_preset(run: MeasuredRun, hardware: str,
                 presets: Mapping[str, Mapping[str, object]]) -> tuple[str, Mapping[str, object]]:
    """The preset to derive from: one with the row's GPU, else one of the same GPU generation (A100 40 GB rows
    take an A100 80 GB cluster with the GPU swapped: same SMs and NVLink, the hardware file has its HBM)."""
    family = hardware.split("-")[0]
    for candidates in ([(n, p) for n, p in presets.items() if p.get("gpu") == hardware],
                       [(n, p) for n, p in presets.items() if str(p.get("gpu", "")).split("-")[0] == family]):
        same_node = [(n, p) for n, p in candidates if p.get("gpus_per_node") == run.gpus_per_node]
        if same_node or candidates:
            return (same_node or candidates)[0]
    raise UsageError(f"row {run.row_id}: no shipped cluster preset uses a {family.upper()} GPU ({hardware}); "
                     "add a `cluster` column naming a cluster YAML.")


def _derived_cluster(run: MeasuredRun, hardware: str, inter_GBps: float | None,
                     presets: Mapping[str, Mapping[str, object]], work_dir: Path, notes: list[str]) -> ClusterChoice:
    base_name, base = _base_preset(run, hardware, presets)
    per_node = run.gpus_per_node or run.num_gpus
    inter = inter_GBps if inter_GBps is not None else base.get("inter_node_bandwidth_GBps")
    name = f"{base_name}-{hardware}-{per_node}gpn-{inter:g}GBps"
    derived = dict(base, name=name, gpu=hardware, gpus_per_node=per_node, inter_node_bandwidth_GBps=inter)
    if base.get("gpus_per_node") != per_node:
        for key in NODE_TOPOLOGY_KEYS:
            derived.pop(key, None)
    if run.intra_node_bandwidth_GBps:
        derived["intra_node_bandwidth_GBps"] = run.intra_node_bandwidth_GBps
    path = work_dir / f"cluster-{name}.yaml"
    if not path.exists():
        work_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(derived, sort_keys=False), encoding="utf-8")
    what = f"derived from preset {base_name}: {hardware}, {per_node} GPUs per node, {inter:g} GB/s per GPU"
    intra = derived.get("intra_node_bandwidth_GBps")
    intra_text = f", {intra:g} GB/s per GPU intra-node" if isinstance(intra, (int, float)) else ""
    return ClusterChoice(str(path), tuple(notes + [what]), derived=f"{name} ({what} inter-node{intra_text})")
