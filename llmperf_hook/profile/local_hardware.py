"""Describe the local device for a user-fitted profile: name, fingerprint, measured peak and bandwidth, and the
hardware YAML (`$LLMPERF_HOME/hardware/NAME.yaml`, schema of hardware/load.py) that `--hardware NAME` loads.

Peak: the best of a few large square GEMMs in the profiled dtype, in each operand layout a training step's GEMMs
take (GEMM_LAYOUTS: where the CPU has no kernel for the dtype, ATen's fallback runs the layouts at speeds 12x apart),
each smaller where the layout is slow, so the measurement stays within a short --budget: peak_gemm_size;
bandwidth: a large tensor copy (read + write).
Both are measured with the threads the sampler uses (one per rank by default), so the roofline of a CPU profile
describes one rank of a CPU training job. torch is imported inside the functions only.
"""

from __future__ import annotations

import os
import platform
import re
import time
from pathlib import Path
from typing import Any, Callable

import yaml

from llmperf_hook.profile.features import DTYPE_BYTES, RooflineConstants
from llmperf_hook.profile.op_sampler import TORCH_DTYPES
from llmperf_hook.resources import llmperf_home


def _slug(text: str) -> str:
    text = re.sub(r"\((r|tm)\)|\bcpu\b|\bprocessor\b|@.*$", " ", text.lower())
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")[:48] or "device"


def cpu_model_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cpus(cgroup_root: Path = Path("/sys/fs/cgroup")) -> int:
    """CPUs this process may keep busy: its affinity mask (a cpuset: taskset, docker --cpuset-cpus), capped by its
    cgroup's CPU quota (docker --cpus, a Kubernetes limits.cpu), which the mask does not show: a 2-CPU quota on a
    64-CPU host time-slices a third thread like an oversubscribed machine. Quota over period, rounded up, as loky's
    cpu_count reads it (cgroup v2 cpu.max "QUOTA PERIOD" or "max ...", v1 cpu.cfs_quota_us -1 = none)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        if (cgroup_root / "cpu.max").is_file():
            quota, period = (cgroup_root / "cpu.max").read_text().split()[:2]
        else:
            quota = (cgroup_root / "cpu" / "cpu.cfs_quota_us").read_text().strip()
            period = (cgroup_root / "cpu" / "cpu.cfs_period_us").read_text().strip()
        if quota not in ("max", "-1") and int(period) > 0:
            cpus = min(cpus, max(1, -(-int(quota) // int(period))))
    except (OSError, ValueError):  # no cgroup CPU controller visible: the affinity mask alone
        pass
    return cpus


def default_profile_name(device: str, threads: int = 1) -> str:
    """`cpu-<model>-<N>t` for CPUs (a profile describes N threads per rank); for GPUs the shipped hardware preset
    whose name appears in the device name (so `--cluster` presets find the profile), else the device name."""
    if device == "cpu":
        return f"cpu-{_slug(cpu_model_name())}-{threads}t"
    import torch

    return preset_for_device(torch.cuda.get_device_name())


DEVICE_PRESETS = (
    (re.compile(r"^NVIDIA H100 80GB HBM3$"), "h100-sxm5-80gb"),  # what torch names the SXM5 part (our measurements)
    (re.compile(r"^NVIDIA H100 PCIe$"), "h100-pcie-80gb"),
    (re.compile(r"^NVIDIA H200$"), "h200-sxm-141gb"),  # the SXM part (our measurements); "H200 NVL" is another
    (re.compile(r"^NVIDIA A100 80GB PCIe$"), "a100-pcie-80gb"),
    (re.compile(r"^NVIDIA B200$"), "b200-180gb"),
    (re.compile(r"^NVIDIA GB200$"), "gb200-186gb"),
    (re.compile(r"^NVIDIA L40S$"), "l40s-48gb"),
    (re.compile(r"^AMD Instinct MI300X"), "mi300x-192gb"),
)
"""torch.cuda.get_device_name() of GPUs whose name does not contain their preset's (A100 SXM4 names do)."""


def preset_for_device(device_name: str) -> str:
    """The shipped hardware preset a GPU's profile is named after, else the slug of its device name."""
    slug = _slug(device_name).removeprefix("nvidia-")
    contained = next((p for p in shipped_hardware_names() if p in slug), None)
    if contained is not None:
        return contained
    return next((preset for pattern, preset in DEVICE_PRESETS if pattern.match(device_name.strip())), slug)


def shipped_hardware_names() -> list[str]:
    from llmperf_hook.resources import configs_dir

    return sorted((p.stem for p in (configs_dir() / "hardware").glob("*.yaml")), key=len, reverse=True)


def fingerprint(device: str, threads: int) -> dict[str, str]:
    """What the samples' times depend on besides the shapes: the device, and the torch build that ran the kernels
    (its bundled oneDNN / MKL on CPU, cuBLAS / cuDNN / CUDA on GPU: another torch times the same op differently).
    Samples resume and fit only under an equal fingerprint; predict says when the installed torch differs
    (profile_io.measured_under_notes)."""
    import torch

    if device == "cpu":
        from llmperf_hook.profile.op_sampler import cpu_clock_kind

        return {"device": cpu_model_name(), "machine": platform.machine(), "threads": str(threads),
                "logical_cpus": str(os.cpu_count() or 0), "clock": cpu_clock_kind(threads), "torch": torch.__version__}
    props = torch.cuda.get_device_properties(0)
    return {"device": props.name, "num_sms": str(props.multi_processor_count), "cuda": str(torch.version.cuda),
            "memory_bytes": str(props.total_memory), "torch": torch.__version__}


def _best_time(fn, device: str, reps: int = 5) -> float:
    from llmperf_hook.profile.op_sampler import _Clock

    clock = _Clock(device)
    clock.time(fn)
    return min(clock.time(fn) for _ in range(reps))


PEAK_GEMM_TARGET_S = 0.1
"""Longest one peak GEMM may take on CPU. The largest square (1024) is what the peak is measured with when the dtype
has a fast kernel; a dtype the CPU emulates (fp16 on an x86 without AVX512-FP16 runs about 1 GFLOP/s, against 85
fp32 and 210 bf16 on one EPYC thread) would take 2 s per 1024 GEMM, 12 s for the 6 timed, before a --budget of
seconds starts, and again at every later refit of a profile holding that dtype's samples."""

GPU_PEAK_GEMM_N = 8192
"""A GPU's peak GEMM, every dtype (each has a tensor-core or FP32 kernel, none is emulated). Not sized from a 256
probe as on CPU: one 256 GEMM is launch-bound on a GPU (~5 us for 34 MFLOP, a few TFLOP/s), which would shrink the
peak GEMM to 4096 or less, under the size that reaches the peak."""


GEMM_LAYOUTS = ("nt", "nn", "tn")
"""The operand layouts of a training step's GEMMs, as torch runs nn.Linear: the forward X @ W^T (F.linear: "nt"), the
input gradient dY @ W ("nn") and the weight gradient dY^T @ X ("tn") (mm's backward, mm_mat1_backward and
mm_mat2_backward of PyTorch's tools/autograd/derivatives.yaml; op_sampler._gemm times the same three). The peak is the
best of them: no GEMM of a step runs faster than the fastest layout, while one layout alone can be far from it. On a
CPU without AVX-512 (AMD EPYC with AVX2 only, torch 2.13, one thread) torch gives bf16 matmuls to oneDNN only with
AVX512BW/VL/DQ (mkldnn_bf16_device_check, aten/src/ATen/native/mkldnn/Utils.h); its own fallback
(aten/src/ATen/native/cpu/BlasKernel.cpp) ran a 256 x 256 x 768 bf16 GEMM at 1.3 GFLOP/s "nn" (a @ b, the only layout
measured until session 21), 8.6 "nt" and 15 "tn". That "nn" peak floored every bf16 GEMM of the CPU testbed's steps
at 1.3 GFLOP/s and predicted them 76-121 % high (/work/notes/h174.md); with AVX-512 BF16 all three run in oneDNN at
about 210."""


def layout_product(layout: str, a: Any, b: Any) -> Any:
    """The GEMM of two tensors in `layout` (GEMM_LAYOUTS): "nt" a @ b^T through F.linear, "nn" a @ b, "tn" a^T @ b."""
    import torch

    if layout == "nt":
        return torch.nn.functional.linear(a, b)
    return a.t() @ b if layout == "tn" else a @ b


def _layout_gemm(layout: str, n: int, dtype: str, device: str) -> Callable[[], Any]:
    """A zero-argument callable running one n-square GEMM in `layout`."""
    import torch

    a, b = (torch.randn(n, n, dtype=getattr(torch, TORCH_DTYPES[dtype]), device=device) for _ in range(2))
    return lambda: layout_product(layout, a, b)


def peak_gemm_size(dtype: str, device: str, layout: str = "nn") -> int:
    """The square GEMM's n: on CPU the largest of 256 .. 1024, halving from the top, whose time at the speed of one
    256 GEMM in `layout` is under PEAK_GEMM_TARGET_S (a GEMM's time grows as n^3 at a given FLOP rate); GPU_PEAK_GEMM_N
    on GPU."""
    if device != "cpu":
        return GPU_PEAK_GEMM_N
    flop_per_s = 2.0 * 256 ** 3 / _best_time(_layout_gemm(layout, 256, dtype, device), device, reps=1)
    n = 1024
    while n > 256 and 2.0 * n ** 3 / flop_per_s > PEAK_GEMM_TARGET_S:
        n //= 2
    return n


def measure_peak_flop_per_s(dtype: str, device: str) -> float:
    """The best FLOP rate of an n-square GEMM in any of GEMM_LAYOUTS, each at its own peak_gemm_size."""
    best = 0.0
    for layout in GEMM_LAYOUTS:
        n = peak_gemm_size(dtype, device, layout)
        best = max(best, 2.0 * n ** 3 / _best_time(_layout_gemm(layout, n, dtype, device), device))
    return best


def measure_bandwidth_bytes_per_s(device: str) -> float:
    import torch

    elems = (16 << 20) if device == "cpu" else (256 << 20)  # 64 MiB / 1 GiB of fp32: far beyond the caches
    src, dst = torch.randn(elems, device=device), torch.empty(elems, device=device)
    return 2.0 * elems * 4 / _best_time(lambda: dst.copy_(src), device)


def num_units(device: str, threads: int) -> int:
    if device == "cpu":
        return threads
    import torch

    return int(torch.cuda.get_device_properties(0).multi_processor_count)


def measure_roofline(dtype: str, device: str, threads: int) -> RooflineConstants:
    return RooflineConstants(measure_peak_flop_per_s(dtype, device), measure_bandwidth_bytes_per_s(device),
                             num_units(device, threads), DTYPE_BYTES[dtype])


def memory_capacity_bytes(device: str) -> int:
    if device == "cpu":
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    import torch

    return int(torch.cuda.get_device_properties(0).total_memory)


WRITER_MARK = "measured by `llmperf profile"
"""In the description of every hardware file this module writes: a file without it is the user's own."""


def check_hardware_yaml_is_ours(name: str) -> None:
    """$LLMPERF_HOME/hardware/NAME.yaml is rewritten by every fit of profile NAME; one the user wrote (or edited
    into another description) is refused before sampling, never replaced."""
    path = llmperf_home() / "hardware" / f"{name}.yaml"
    if not path.exists():
        return
    try:
        ours = WRITER_MARK in str(yaml.safe_load(path.read_text()).get("description", ""))
    except (OSError, ValueError, AttributeError, yaml.YAMLError):
        ours = False
    if not ours:
        from llmperf_hook.errors import UsageError

        raise UsageError(f"{path} exists and was not written by `llmperf profile` (its description lacks "
                         f"{WRITER_MARK!r}): profiling under the name {name!r} would replace it with this machine's "
                         f"measured peaks. Give the profile another --name, or move that file away.")


def write_hardware_yaml(name: str, device: str, peaks_flop_per_s: dict[str, float], rc: RooflineConstants,
                        threads: int) -> Path:
    """$LLMPERF_HOME/hardware/NAME.yaml in the schema of hardware/load.py (only its keys)."""
    path = llmperf_home() / "hardware" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "name": name,
        "peak_TFLOPs": {k: round(v / 1e12, 6) for k, v in sorted(peaks_flop_per_s.items())},
        "memory_bandwidth_GBps": round(rc.memory_bandwidth_bytes_per_s / 1e9, 3),
        "memory_capacity_GiB": round(memory_capacity_bytes(device) / 2**30, 2),
        # Measured peaks are what the device reaches, so the roofline's efficiencies are 1.
        "gemm_efficiency": 1.0, "memory_efficiency": 1.0,
        "device": "cpu" if device == "cpu" else "gpu",  # a CPU rank's memory is its process's (schedule/memory_cpu.py)
        "description": f"{fingerprint(device, threads)['device']} measured by `llmperf profile --device {device}` "
                       f"with {threads} thread(s) per rank" if device == "cpu" else
                       f"{fingerprint(device, threads)['device']} measured by `llmperf profile --device {device}`",
        "sources": f"measured {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}: best of 5 square GEMMs per "
                   f"dtype and a large tensor copy",
    }
    fresh = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # renamed over it: a concurrent reader never sees half
    try:
        fresh.write_text(yaml.safe_dump(doc, sort_keys=False))
        os.replace(fresh, path)
    finally:
        fresh.unlink(missing_ok=True)
    return path
