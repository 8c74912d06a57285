"""Whether Megatron's async tensor-parallel collectives overlap the GEMM launched after them, on this GPU.

Megatron launches sequence parallelism's backward re-gather / reduce-scatter and the async grad-input all-reduce
before the GEMM they should hide behind ('we rely on CUDA_DEVICE_MAX_CONNECTIONS=1 to ensure that the all-reduce is
scheduled before the weight gradient computation', core/tensor_parallel/layers.py). Before Blackwell that holds only
with one hardware work queue (CUDA_DEVICE_MAX_CONNECTIONS=1, TrainingConfig.tp_comm_ordered): under CUDA's default
8 queues a GEMM that reaches the SMs first fills them and the collective waits (graph/backward.sp_column_backward).
On Blackwell Megatron-LM no longer asks for it: validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS == "1" for TP or
CP > 1 only when get_device_arch_version() < 10 ('CUDA_DEVICE_MAX_CONNECTIONS requirement no longer exists since the
Blackwell architecture', 50d847514d 2025-02-12; its operator precedence fixed in 0db0e8328b 2025-05-22), and NVIDIA's
own performance recipes run sm100 with 32 queues for TP or CP (NeMo nemo/lightning/run/plugins.py PerfEnvPlugin:
'32' if gpu_sm100_or_newer, else '1'). So on a GPU of compute capability 10 or more the overlap is priced whatever
the setting, and only older GPUs get the serialized pricing and its warning.
"""

from __future__ import annotations

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.hardware.spec import HardwareSpec

ORDER_FREE_COMPUTE_CAPABILITY = 10.0
"""Compute capability from which Megatron-LM drops its CUDA_DEVICE_MAX_CONNECTIONS=1 requirement (Blackwell, sm100:
arguments.py get_device_arch_version() < 10). Presets without compute_capability (0) count as older GPUs."""


def tp_launch_ordered(cfg: TrainingConfig, gpu: HardwareSpec) -> bool:
    """The job's async TP collectives reach the SMs before the GEMM launched after them: kernels kept in launch order
    (CUDA_DEVICE_MAX_CONNECTIONS=1), or a Blackwell or newer GPU."""
    return cfg.tp_comm_ordered or gpu.compute_capability >= ORDER_FREE_COMPUTE_CAPABILITY


def launch_order_warnings(cfg: TrainingConfig, gpu: HardwareSpec) -> tuple[str, ...]:
    """One warning where CUDA_DEVICE_MAX_CONNECTIONS is not 1 under TP or CP > 1 on a GPU before Blackwell, saying what
    is priced differently and Megatron-LM's rule (FSDP jobs, which want more queues, are warned at resolve time:
    frameworks/assemble.device_connections)."""
    p = cfg.parallel
    if tp_launch_ordered(cfg, gpu) or cfg.optimizer.fsdp != "none" or (p.tp == 1 and p.cp == 1):
        return ()
    priced = ("sequence parallelism's backward re-gather and reduce-scatter are priced serialized with their GEMMs, "
              "not overlapped" if p.sequence_parallel and p.tp > 1 else
              "the async grad-input all-reduce is priced serialized with its weight-grad GEMM, not overlapped"
              if cfg.async_tp_allreduce and p.tp > 1 else "nothing is priced differently")
    capability = (f"compute capability {gpu.compute_capability:g}" if gpu.compute_capability > 0 else
                  "compute capability not stated by its preset, taken as before Blackwell")
    return (f"CUDA_DEVICE_MAX_CONNECTIONS={cfg.cuda_device_max_connections} (environment) lets the {gpu.name} "
            f"({capability}) run kernels out of launch order: {priced}. Today's Megatron-LM "
            "asserts CUDA_DEVICE_MAX_CONNECTIONS=1 for tensor or context parallelism on GPUs before Blackwell "
            "(megatron/training/arguments.py; releases before 2022-10-14 did not check it); set "
            "CUDA_DEVICE_MAX_CONNECTIONS=1 for the overlap",)
