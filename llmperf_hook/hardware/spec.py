"""Hardware (one GPU) and cluster (nodes and network) descriptions, loaded from configs/ YAML.

Units: SI inside (bytes/s, FLOP/s, s); YAML keys carry human units (`_GBps` = 1e9 bytes/s per GPU one
direction, `_TFLOPs` = 1e12 FLOP/s, `_us` = microseconds), converted once in the loader (hardware/load.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping


@dataclass(frozen=True)
class HardwareSpec:
    name: str
    peak_flop_per_s: Mapping[str, float]
    """Dense peak by dtype: "fp32", "tf32", "fp16", "bf16", "fp8"."""
    memory_bandwidth_bytes_per_s: float
    memory_capacity_bytes: int
    gemm_efficiency: float = 0.8
    """Best achievable fraction of peak on large GEMMs (calibration/ figures; documented per preset)."""
    memory_efficiency: float = 0.85
    """Achievable fraction of HBM bandwidth for streaming kernels."""
    kernel_launch_s: float = 4e-6
    """Fixed per-kernel cost floor."""
    extra: Mapping[str, float] = field(default_factory=dict)
    """Further documented parameters (see the YAML's comments)."""
    gemm_ramp_s: float = 15e-6
    """Fixed cost per GEMM for filling the first wave of tiles: t = flops / (peak * gemm_efficiency) + ramp."""
    attention_efficiency: float = 0.6
    """Fraction of dense peak reached by the fused (flash) attention kernels, forward and backward."""
    compute_capability: float = 0.0
    """CUDA compute capability (9.0 Hopper, 10.0 Blackwell B200/GB200); 0 = not an NVIDIA GPU or unknown. Decides
    what Transformer Engine's fp8 GEMMs can read (schedule/memory.py non_tn_fp8_gemms)."""
    host_link_bytes_per_s: float = 31.5e9
    """GPU <-> host link, per direction, as specified (the YAML's host_link_GBps, cited per preset): PCIe Gen4 x16
    31.5 GB/s (16 GT/s x 16 lanes x 128/130 / 8), Gen5 x16 63 GB/s, NVLink-C2C 450 GB/s (Grace Hopper / Grace
    Blackwell). Offload copies reach predict/roofline.py HOST_LINK_EFFICIENCY of it. Default: PCIe Gen4 x16."""
    streaming_multiprocessors: int = 0
    """SMs of the GPU (the YAML's streaming_multiprocessors, from the vendor's whitepaper), stated for the parts that
    sit on an NVSwitch fabric: an in-node NCCL ring there holds 24 of them (graph/backward.nccl_sm_share), which a
    GEMM running beside a collective loses. 0 = not stated (PCIe boards, AMD parts, CPUs): no contention priced."""
    device: str = "gpu"
    """"gpu", or "cpu" where each rank runs on the host's CPU (DeepSpeed's CPU accelerator, gloo): a rank's memory is
    then its process's resident memory and the ranks of a host share its RAM (schedule/memory_cpu.py). The YAML's
    device key (cuda, torch's name, is read as gpu: hardware/load.py DEVICE_NAMES); absent, a file `llmperf profile --device cpu` (or `llmperf run`'s cpu-local) wrote is a CPU by its
    description, as refine/refine_run.hardware_device reads it (hardware/load.py hardware_device_of)."""

    def peak_for(self, dtype: str) -> float:
        """Dense peak for `dtype`; fp8 falls back to bf16 and bf16 to fp16 where a GPU lacks them."""
        for key in (dtype, "bf16" if dtype == "fp8" else dtype, "fp16"):
            if key in self.peak_flop_per_s:
                return self.peak_flop_per_s[key]
        return max(self.peak_flop_per_s.values())


@dataclass(frozen=True)
class NetworkTier:
    bandwidth_bytes_per_s: float
    """Per GPU, one direction."""
    latency_s: float
    bus_efficiency: float = 0.8
    """Fraction of `bandwidth_bytes_per_s` a large NCCL collective reaches as bus bandwidth (nccl-tests busbw)."""
    latency_per_step_s: float = 0.0
    """Intra-node tier only: latency added per ring step of a collective (2(n-1) for all-reduce, n-1 for
    all-gather / reduce-scatter, 1 for send/recv) on top of `latency_s`, as NCCL's tuning model charges
    baseLat + nsteps x hwLat (src/graph/tuning.cc). 0 = a flat latency per collective."""


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    gpu: HardwareSpec
    gpus_per_node: int
    intra_node: NetworkTier
    inter_node: NetworkTier
    nics_per_node: int = 0
    """0 = unknown (inter-node bandwidth is then taken as already per GPU)."""
    extra: Mapping[str, float] = field(default_factory=dict)
    host_overhead_per_op_s: float = 20e-6
    """Host (CPU) time to issue one modelled op from the framework's Python: PyTorch eager dispatch with autograd
    bookkeeping is ~10 us per PyTorch op on server CPUs and a modelled op is ~2 of them. A pass can run no faster
    than its ops can be issued: small models and high TP are host-bound."""
    nvme_read_bytes_per_s: float = 10e9
    nvme_write_bytes_per_s: float = 5e9
    """Local NVMe of one host (the drives a ZeRO-Infinity nvme_path is on), read / write, shared by the host's ranks:
    the YAML's nvme_read_GBps / nvme_write_GBps. Default: four PCIe Gen4 SSDs in RAID-0, as DeepSpeed measured them
    with ds_io for 1 GB transfers, 10 GB/s reads and 5 GB/s writes (DeepSpeed blogs/deepnvme/06-2025 and 08-2024;
    a DGX A100 carries four Gen4 U.2 data drives)."""
    host_memory_bytes: int = 0
    """Host (CPU) RAM of one OS host, the YAML's host_memory_GiB (from the system's datasheet); 0 = not stated, no
    host-memory verdict (schedule/host_memory.py)."""
    gpus_per_host: int = 0
    """GPUs of one OS host (the launcher's node: torchrun --nproc-per-node, a hostfile's slots) where the intra-node
    tier spans several hosts: a GB200 NVL72 rack is one NVLink domain of 72 GPUs (`gpus_per_node`, what the
    collective model calls a node) over 18 compute trays of 4 (NVIDIA GB200 NVL72 datasheet, 2024). 0 = the
    host is the whole domain (`gpus_per_node`), as on every DGX/HGX node."""

    @property
    def host_gpus(self) -> int:
        """GPUs of one OS host: what `--nproc-per-node gpu` counts."""
        return self.gpus_per_host or self.gpus_per_node

    def ranks_per_fabric(self, procs_per_host: int) -> int:
        """Ranks that share the intra-node tier when each host starts `procs_per_host` processes (0 = one per GPU),
        at most the domain's GPUs. torchrun numbers ranks host by host (node_rank x nproc_per_node + local_rank),
        so the hosts of one NVLink domain hold consecutive ranks when the job's hosts are listed domain by domain
        (Slurm's block topology does this). One host per domain (gpus_per_host 0): min(gpus_per_node, procs)."""
        hosts_per_domain = max(1, self.gpus_per_node // self.host_gpus)
        return max(1, min(self.gpus_per_node, (procs_per_host or self.host_gpus) * hosts_per_domain))
