"""Read hardware and cluster YAML (configs/hardware/NAME.yaml, configs/clusters/NAME.yaml) into specs.

Lookup of a NAME_OR_PATH, first match wins: an existing file path; `$LLMPERF_HOME/hardware/NAME.yaml`
(`$LLMPERF_HOME/clusters/NAME.yaml`), where `llmperf profile` writes user hardware; the shipped `configs/`.

Hardware keys (HARDWARE_KEYS): name, peak_TFLOPs {dtype: TFLOP/s dense}, memory_bandwidth_GBps,
memory_capacity_GiB (or memory_capacity_GB, 1e9 bytes); optional gemm_efficiency, gemm_ramp_us,
attention_efficiency, memory_efficiency, kernel_launch_us, host_link_GBps (GPU <-> host link per direction, default
PCIe Gen4 x16: 31.5), compute_capability (CUDA sm major.minor, 0 = unknown), streaming_multiprocessors (SMs per
GPU of an NVSwitch part, a positive whole number; absent = not stated: no NCCL SM contention priced), device (gpu or
cpu; absent: gpu, or cpu for a file `llmperf profile --device cpu` described: hardware_device_of), description,
sources.

Cluster keys (CLUSTER_KEYS): name, gpu (a hardware NAME or path, or an inline hardware mapping),
gpus_per_node, intra_node_bandwidth_GBps, inter_node_bandwidth_GBps (per GPU, one direction, 1 GB = 1e9
bytes); optional intra_node_latency_us, inter_node_latency_us, intra_node_bus_efficiency,
inter_node_bus_efficiency (intra-node defaults per GPU generation and node size: INTRA_NODE_DEFAULTS),
nics_per_node, host_overhead_per_op_us (CPU time to issue one modelled op, default 65), gpus_per_host (GPUs of
one OS host where the intra-node tier spans hosts: a GB200 NVL72 rack has gpus_per_node 72, the NVLink domain,
and gpus_per_host 4, one compute tray; default gpus_per_node), nvme_read_GBps / nvme_write_GBps (the host's local
NVMe that DeepSpeed's ZeRO-Infinity swaps to, per host; default 10 / 5: ClusterSpec), host_memory_GiB (host RAM of
one host, for the host-memory verdict; default unknown), description, sources. Unknown keys are an error (a typo would otherwise silently fall back to a default).
"""

from __future__ import annotations

import math

from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import yaml

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader when available (10x faster), else the pure-Python safe loader: never yaml.Loader."""

from llmperf_hook.errors import UsageError
from llmperf_hook.hardware.spec import ClusterSpec, HardwareSpec, NetworkTier
from llmperf_hook.resources import configs_dir, llmperf_home

HARDWARE_REQUIRED = ("name", "peak_TFLOPs", "memory_bandwidth_GBps")
HARDWARE_OPTIONAL = (
    "memory_capacity_GiB", "memory_capacity_GB", "gemm_efficiency", "gemm_ramp_us", "attention_efficiency",
    "memory_efficiency", "kernel_launch_us", "host_link_GBps", "compute_capability", "streaming_multiprocessors",
    "device", "description", "sources",
)
HARDWARE_KEYS = HARDWARE_REQUIRED + HARDWARE_OPTIONAL
CLUSTER_REQUIRED = ("name", "gpu", "gpus_per_node", "intra_node_bandwidth_GBps", "inter_node_bandwidth_GBps")
CLUSTER_OPTIONAL = (
    "intra_node_latency_us", "intra_node_latency_per_step_us", "inter_node_latency_us", "intra_node_bus_efficiency",
    "inter_node_bus_efficiency", "nics_per_node", "host_overhead_per_op_us", "gpus_per_host", "nvme_read_GBps",
    "nvme_write_GBps", "host_memory_GiB", "description", "sources",
)
CLUSTER_KEYS = CLUSTER_REQUIRED + CLUSTER_OPTIONAL

# Defaults for optional cluster keys, for a GPU the table below does not know (and CPU testbeds): an NCCL ring
# reaches ~80 % of link bandwidth as bus bandwidth (A100 NVSwitch 228/300 GB/s at 1 GB; IB ~90-95 %).
DEFAULT_INTRA_LATENCY_US = 20.0
DEFAULT_INTER_LATENCY_US = 5.0
DEFAULT_INTRA_BUS_EFFICIENCY = 0.8
INTRA_NODE_DEFAULTS: tuple[tuple[str, int, float, float, float], ...] = (
    # (GPU name prefix, GPUs per node at least, intra-node latency us, latency per ring step us, bus efficiency):
    # the fits of the shipped presets, so a cluster YAML with only the standard keys gets the numbers of its GPU
    # generation. The prefixes name the SXM parts: a PCIe card of the same generation (a100-pcie-80gb,
    # h100-pcie-80gb) has no NVSwitch and no NVLink mesh, so it takes the generic defaults above.
    # A100 + NVSwitch (8 per node): vTrain NCCL LUT, 448 points 1 MB-1 GB on 2-8 GPUs: 44 us + 2.03 us per ring
    # step, efficiency 0.72, 4.5 % mean error (8.1 % on the 17 points under 300 us, 11.1 % with a flat 57 us)
    # (../shared/validation/calibration/nccl_allreduce_a100_intranode_vtrain_lut_subsampled.csv).
    ("a100-sxm", 8, 44.0, 2.03, 0.72),
    # A100 with 4 GPUs on direct NVLink (no NVSwitch, e.g. Perlmutter / HGX A100 4-GPU): a ring drives one peer
    # link of three, about 2/3 of the NVSwitch figure (configs/clusters/perlmutter.yaml).
    ("a100-sxm", 2, 20.0, 0.0, 0.5),
    # H100/H200 + NVSwitch gen 3 (NVLink SHARP): DGX H100 nccl-tests all-reduce 8 MB-1 GiB, 3.1 % mean error
    # (../shared/validation/calibration/nccl_allreduce_dgx_h100_8gpu_1node.csv); 8 GPUs only, so the latency
    # cannot be split into a base and a per-step part: flat.
    ("h100-sxm", 8, 54.0, 0.0, 0.99),
    ("h200-sxm", 8, 54.0, 0.0, 0.99),
)
"""First row whose prefix starts the GPU name and whose node has at least that many GPUs wins."""
DEFAULT_INTER_BUS_EFFICIENCY = 0.95  # NDR InfiniBand: 46-48 of 50 GB/s in the Vista NCCL samples
DEFAULT_HOST_OVERHEAD_US = 65.0  # eager PyTorch issue cost per modelled op: see predict/host_issue.py
"""See ClusterSpec.host_overhead_per_op_s."""


def find_config_file(kind: str, name_or_path: str) -> Path:
    """The YAML file for `name_or_path` of `kind` ("hardware" | "clusters"), by the lookup order above."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        _refuse_fitted_model(kind, name_or_path, path)
        return path
    for folder in (llmperf_home() / kind, configs_dir() / kind):
        for suffix in (".yaml", ".yml"):
            candidate = folder / f"{name_or_path}{suffix}"
            if candidate.is_file():
                return candidate
    shipped = sorted(p.stem for p in (configs_dir() / kind).glob("*.yaml"))
    what = kind[:-1] if kind == "clusters" else kind
    if path.is_dir():  # not a name: a folder `llmperf profile` printed?
        _refuse_fitted_model(kind, name_or_path, path)
    if path.suffix in (".yaml", ".yml") or len(path.parts) > 1:  # a path, not a name: say only what was looked for
        raise UsageError(f"{what} file {name_or_path} not found{' (it is a folder)' if path.is_dir() else ''}. Give the "
                         f"path of a YAML file (schema: llmperf_hook/hardware/load.py) or a preset name: "
                         f"{', '.join(shipped)}.")
    if kind == "hardware" and (llmperf_home() / "profiles" / name_or_path / "profile.json").is_file():
        # a profile folder shared without its hardware file (both are written by `llmperf profile`)
        raise UsageError(f"hardware '{name_or_path}' not found: {llmperf_home() / 'profiles' / name_or_path} holds its "
                         f"fitted operator profile, but not the hardware file {llmperf_home() / kind}/{name_or_path}.yaml "
                         f"(peak rates and memory) that `llmperf profile` writes with it. Copy that file along with the "
                         f"profile, or rerun `llmperf profile --name {name_or_path}` on that machine (stored samples are "
                         f"reused).")
    raise UsageError(
        f"{what} '{name_or_path}' not found: it is not a file, not "
        f"{llmperf_home() / kind}/{name_or_path}.yaml and not a shipped preset. Shipped: {', '.join(shipped)}. "
        f"Pass one of those names or the path of a YAML file (schema: llmperf_hook/hardware/load.py)."
    )


FITTED_FILES = {"hardware": ("profile.json", "a fitted operator profile", 2),
                 "clusters": ("comm_model.json", "a fitted communication model", 3)}
"""kind: (the fitted model's metadata file, what it is, folders from it up to $LLMPERF_HOME): `llmperf profile` writes
HOME/profiles/NAME/profile.json beside HOME/hardware/NAME.yaml, `profile --comm` HOME/profiles/comm/NAME/comm_model.json
beside HOME/clusters/NAME.yaml."""


def _refuse_fitted_model(kind: str, name_or_path: str, path: Path) -> None:
    """--hardware / --cluster given a fitted model's metadata file (JSON is YAML: it was refused for its 'unknown' or
    'missing keys') or its folder ('not found (it is a folder)'): name the mistake and both fixes."""
    meta, what, depth = FITTED_FILES[kind]
    folder = path.resolve() if path.is_dir() else path.resolve().parent
    if not (path.name == meta if path.is_file() else (path / meta).is_file()):
        return
    home = folder
    for _ in range(depth):  # Path("/").parent is "/": no IndexError for a copy near the root
        home = home.parent
    beside = home / kind / f"{folder.name}.yaml"
    option = kind.rstrip("s")
    raise UsageError(f"--{option} {name_or_path} is the {'folder' if path.is_dir() else meta} of {what}, not a {option} "
                     f"file. Pass its name, --{option} {folder.name} (found by name in $LLMPERF_HOME and the shipped "
                     f"presets), or the path of its {option} file"
                     + (f", {beside}." if beside.is_file() else f" ({kind}/{folder.name}.yaml in the $LLMPERF_HOME it "
                                                                f"was written in)."))


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """The file's mapping; parsed once per (path, modification time), so batch mode reads each preset once."""
    try:
        stamp = path.stat().st_mtime_ns
    except OSError as err:
        raise UsageError(f"cannot read {path}: {err}. Fix the file or point at another one.") from err
    return dict(_parse_yaml_file(str(path.resolve()), stamp))


@lru_cache(maxsize=64)
def _parse_yaml_file(path: str, mtime_ns: int) -> dict[str, Any]:
    try:
        raw = yaml.load(Path(path).read_text(), Loader=SAFE_LOADER)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise UsageError(f"cannot read {path}: {err}. Fix the file or point at another one.") from err
    if not isinstance(raw, dict):
        raise UsageError(f"{path} must hold a YAML mapping of keys to values, found {type(raw).__name__}.")
    return raw


def _check_keys(raw: Mapping[str, Any], required: tuple[str, ...], allowed: tuple[str, ...], where: str) -> None:
    """Missing required keys and misspelt accepted ones (a close match: the setting would silently fall back to its
    default) are errors; other extra keys (description, notes, site-specific fields) are the user's and ignored."""
    import difflib

    unknown = sorted(k for k in set(raw) - set(allowed) if difflib.get_close_matches(str(k), allowed, n=1, cutoff=0.8))
    missing = [k for k in required if k not in raw]
    if unknown or missing:
        parts = [f"unknown keys {unknown}" if unknown else "", f"missing keys {missing}" if missing else ""]
        raise UsageError(
            f"{where}: {' and '.join(p for p in parts if p)}. Accepted keys: {', '.join(allowed)} "
            f"(required: {', '.join(required)}). Fix the spelling or remove the key."
        )


def _number(raw: Mapping[str, Any], key: str, where: str, default: float | None = None) -> float:
    """A positive, finite number: YAML's .nan passes `<= 0` and gave 'MFU nan %'; .inf priced every op at 0 s."""
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise UsageError(f"{where}: {key} must be a positive number, found {value!r}. Fix the value.")
    return float(value)


def _fraction(raw: Mapping[str, Any], key: str, where: str, default: float) -> float:
    """An efficiency: the share of a peak (or a link's rate) that is reached, so in (0, 1]. Above 1 every op (or
    collective) ran faster than the hardware can, silently (1.5 was accepted)."""
    value = _number(raw, key, where, default)
    if value > 1:
        raise UsageError(f"{where}: {key} {value:g} is above 1: an efficiency is the share of the peak that is "
                         f"reached (e.g. 0.8). Fix the value, or raise the peak it applies to if it is understated.")
    return value


def parse_hardware(raw: Mapping[str, Any], where: str) -> HardwareSpec:
    _check_keys(raw, HARDWARE_REQUIRED, HARDWARE_KEYS, where)
    peaks = raw["peak_TFLOPs"]
    if not isinstance(peaks, dict) or not peaks:
        raise UsageError(f"{where}: peak_TFLOPs must map dtypes (fp32, tf32, fp16, bf16, fp8) to TFLOP/s.")
    if "memory_capacity_GiB" in raw:
        capacity = _number(raw, "memory_capacity_GiB", where) * 2**30
    else:
        capacity = _number(raw, "memory_capacity_GB", where) * 1e9
    return HardwareSpec(
        name=str(raw["name"]),
        peak_flop_per_s={str(k): _number(peaks, k, f"{where} peak_TFLOPs") * 1e12 for k in peaks},
        memory_bandwidth_bytes_per_s=_number(raw, "memory_bandwidth_GBps", where) * 1e9,
        memory_capacity_bytes=int(capacity),
        gemm_efficiency=_fraction(raw, "gemm_efficiency", where, 0.8),
        memory_efficiency=_fraction(raw, "memory_efficiency", where, 0.85),
        kernel_launch_s=_number(raw, "kernel_launch_us", where, 4.0) * 1e-6,
        gemm_ramp_s=_number(raw, "gemm_ramp_us", where, 15.0) * 1e-6,
        attention_efficiency=_fraction(raw, "attention_efficiency", where, 0.6),
        host_link_bytes_per_s=_number(raw, "host_link_GBps", where, 31.5) * 1e9,
        compute_capability=_number(raw, "compute_capability", where) if "compute_capability" in raw else 0.0,
        streaming_multiprocessors=_count(raw, "streaming_multiprocessors", where),
        device=hardware_device_of(raw, where),
    )


CPU_DESCRIPTION_MARK = "--device cpu"
"""In the description of every hardware file `llmperf profile --device cpu` (profile/local_hardware.py) and `llmperf
run`'s cpu-local (hardware/local_cpu.py) wrote before they wrote the device key."""


DEVICE_NAMES = {"gpu": "gpu", "cuda": "gpu", "cpu": "cpu"}
"""The YAML's device values: gpu or cpu, and cuda for a GPU as torch names the device type (torch.device("cuda"), which
ROCm builds use for AMD GPUs too) and `llmperf profile --device cuda|cpu` takes it. torch has no "gpu" device type; it
is llmperf's own word (HardwareSpec.device)."""


def hardware_device_of(raw: Mapping[str, Any], where: str) -> str:
    """The YAML's device ("gpu" | "cpu"; DEVICE_NAMES); absent: "cpu" for a file whose description carries
    CPU_DESCRIPTION_MARK, else "gpu" (every shipped preset)."""
    if "device" not in raw:
        return "cpu" if CPU_DESCRIPTION_MARK in str(raw.get("description", "")) else "gpu"
    value = str(raw["device"]).strip().lower()
    if value not in DEVICE_NAMES:
        raise UsageError(f"{where}: device must be gpu or cpu (cuda is read as gpu), found {raw['device']!r}. Fix "
                         "the value (cpu: each rank runs on the host's CPU and the ranks of a host share its RAM), or "
                         "remove it for a GPU.")
    return DEVICE_NAMES[value]


def _count(raw: Mapping[str, Any], key: str, where: str) -> int:
    """A positive whole number, or 0 where the key is absent."""
    if key not in raw:
        return 0
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UsageError(f"{where}: {key} must be a positive whole number, found {value!r}. "
                         "Fix the value or remove the key.")
    return value


def load_hardware(name_or_path: str) -> HardwareSpec:
    """HardwareSpec from a path or a name (lookup order in the module docstring)."""
    path = find_config_file("hardware", name_or_path)
    spec = parse_hardware(read_yaml_mapping(path), str(path))
    _check_named_as_its_profile(spec, path)
    return spec


def _check_named_as_its_profile(spec: HardwareSpec, path: Path) -> None:
    """$LLMPERF_HOME/hardware/NAME.yaml beside profiles/NAME (both written by `llmperf profile`) must say name: NAME:
    the fitted profile is looked up by the name inside the file, so one edited or copied in under another name priced
    every op by the roofline (or by that other name's profile), said only as 'no fitted operator profile for OTHER'."""
    home = llmperf_home()
    stem = path.stem.lower()
    if path.parent != home / "hardware" or spec.name.strip().lower() == stem \
            or not (home / "profiles" / stem / "profile.json").is_file():
        return
    raise UsageError(f"hardware file {path} says name: {spec.name}, but it sits beside the fitted profile "
                     f"{home / 'profiles' / stem} that `llmperf profile --name {stem}` wrote with it, and profiles are "
                     f"looked up by the name inside the file: the job would be priced without that profile. Set "
                     f"name: {stem} in it, or put back the file `llmperf profile` wrote.")


def _tier(raw: Mapping[str, Any], prefix: str, where: str, latency_us: float, efficiency: float) -> NetworkTier:
    return NetworkTier(
        bandwidth_bytes_per_s=_number(raw, f"{prefix}_bandwidth_GBps", where) * 1e9,
        latency_s=_number(raw, f"{prefix}_latency_us", where, latency_us) * 1e-6,
        bus_efficiency=_fraction(raw, f"{prefix}_bus_efficiency", where, efficiency),
    )


def _intra_tier(raw: Mapping[str, Any], where: str, gpu_name: str, gpus_per_node: int) -> NetworkTier:
    latency_us, step_default_us, efficiency = _intra_node_row(gpu_name, gpus_per_node)
    tier = _tier(raw, "intra_node", where, latency_us, efficiency)
    # A YAML that states its own latency but no per-step part means a flat latency: the generation's per-step
    # default only completes the generation's own base latency.
    default_step = 0.0 if "intra_node_latency_us" in raw else step_default_us
    step_us = raw.get("intra_node_latency_per_step_us", default_step)
    if isinstance(step_us, bool) or not isinstance(step_us, (int, float)) or step_us < 0:
        raise UsageError(f"{where}: intra_node_latency_per_step_us must be a number >= 0, found {step_us!r}. "
                         "Fix the value (0 = a flat latency per collective).")
    return replace(tier, latency_per_step_s=float(step_us) * 1e-6)


def parse_cluster(raw: Mapping[str, Any], where: str, hardware: HardwareSpec | None = None) -> ClusterSpec:
    _check_keys(raw, CLUSTER_REQUIRED, CLUSTER_KEYS, where)
    gpus_per_node = raw["gpus_per_node"]
    if isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int) or gpus_per_node < 1:
        raise UsageError(f"{where}: gpus_per_node must be a positive integer, found {gpus_per_node!r}.")
    gpu = hardware or _cluster_gpu(raw["gpu"], where)
    gpus_per_host = _gpus_per_host(raw, gpus_per_node, where)
    return ClusterSpec(
        name=str(raw["name"]),
        gpu=gpu,
        gpus_per_node=gpus_per_node,
        intra_node=_intra_tier(raw, where, gpu.name, gpus_per_node),
        inter_node=_tier(raw, "inter_node", where, DEFAULT_INTER_LATENCY_US, DEFAULT_INTER_BUS_EFFICIENCY),
        nics_per_node=_nics_per_node(raw, where),
        host_overhead_per_op_s=_number(raw, "host_overhead_per_op_us", where, DEFAULT_HOST_OVERHEAD_US) * 1e-6,
        gpus_per_host=gpus_per_host,
        nvme_read_bytes_per_s=_number(raw, "nvme_read_GBps", where, ClusterSpec.nvme_read_bytes_per_s / 1e9) * 1e9,
        nvme_write_bytes_per_s=_number(raw, "nvme_write_GBps", where, ClusterSpec.nvme_write_bytes_per_s / 1e9) * 1e9,
        host_memory_bytes=int(_number(raw, "host_memory_GiB", where) * 2**30) if "host_memory_GiB" in raw else 0,
    )


def _nics_per_node(raw: Mapping[str, Any], where: str) -> int:
    """0 when absent (NCCL's channels then follow gpus_per_node: graph/step_ops.py); else a positive integer (it was
    int(value): .nan an internal ValueError, -4 a negative channel count, 2.5 cut to 2)."""
    if "nics_per_node" not in raw:
        return 0
    value = raw["nics_per_node"]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{where}: nics_per_node must be a positive integer (the node's compute NICs), found "
                         f"{value!r}. Fix the value, or remove it to let the channel count follow gpus_per_node.")
    return value


def _gpus_per_host(raw: Mapping[str, Any], gpus_per_node: int, where: str) -> int:
    """0 when absent (the host is the NVLink domain); else a positive divisor of gpus_per_node: the domain is
    whole hosts (GB200 NVL72: 18 trays x 4 GPUs = 72)."""
    if "gpus_per_host" not in raw:
        return 0
    value = raw["gpus_per_host"]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or gpus_per_node % value:
        raise UsageError(f"{where}: gpus_per_host must be a positive integer dividing gpus_per_node {gpus_per_node} "
                         f"(the NVLink domain is made of whole hosts), found {value!r}. Fix the value, or remove it "
                         "when one host is the whole domain.")
    return 0 if value == gpus_per_node else value


def intra_node_defaults(gpu_name: str, gpus_per_node: int) -> tuple[float, float]:
    """(latency us, bus efficiency) of the intra-node tier when the cluster YAML leaves them out."""
    latency_us, _, efficiency = _intra_node_row(gpu_name, gpus_per_node)
    return latency_us, efficiency


def _intra_node_row(gpu_name: str, gpus_per_node: int) -> tuple[float, float, float]:
    """(latency us, latency per ring step us, bus efficiency): the first INTRA_NODE_DEFAULTS row that matches."""
    name = gpu_name.lower()
    for prefix, min_per_node, latency_us, step_us, efficiency in INTRA_NODE_DEFAULTS:
        if name.startswith(prefix) and gpus_per_node >= min_per_node:
            return latency_us, step_us, efficiency
    return DEFAULT_INTRA_LATENCY_US, 0.0, DEFAULT_INTRA_BUS_EFFICIENCY


def _cluster_gpu(value: Any, where: str) -> HardwareSpec:
    if isinstance(value, dict):
        return parse_hardware(value, f"{where} gpu")
    if isinstance(value, str) and value:
        return load_hardware(value)
    raise UsageError(f"{where}: gpu must be a hardware name (e.g. a100-sxm4-80gb) or a mapping, found {value!r}.")


def load_cluster(name_or_path: str, hardware: str | HardwareSpec | None = None) -> ClusterSpec:
    """ClusterSpec from a path or a name; `hardware` (a name, path or spec) replaces the cluster's GPU."""
    path = find_config_file("clusters", name_or_path)
    gpu = load_hardware(hardware) if isinstance(hardware, str) else hardware
    return parse_cluster(read_yaml_mapping(path), str(path), gpu)
