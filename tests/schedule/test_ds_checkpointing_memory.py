"""Megatron-DeepSpeed's --partition-activations / --checkpoint-in-cpu, recorded at any recompute granularity
(frameworks/ds_checkpointing.py), move memory only where llmperf prices a checkpoint they act on: full recompute's
layer checkpoints (deepspeed.checkpointing.checkpoint via transformer.py _checkpointed_forward)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmperf_hook.graph.build import build_graph
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.schedule.memory import estimate_memory
from tests.frameworks.test_ds_checkpointing import _mds


def test_the_flags_move_no_memory_where_no_layer_checkpoint_is_priced(tmp_path: Path) -> None:
    """Recorded at selective / none, they change neither the GPU peak nor the host memory there; under full recompute
    the checkpoints leave the GPU for the host (schedule/memory.checkpoints_off_gpu_bytes, host_memory.py)."""
    def memory(*flags: str) -> Any:
        cfg = _mds(tmp_path, *flags)
        spec = load_cluster("dgx-h100")
        return estimate_memory(cfg, build_graph(cfg, spec), spec)

    flags = ("--deepspeed-activation-checkpointing", "--partition-activations", "--checkpoint-in-cpu")
    for start in ([], ["--recompute-granularity", "selective"]):
        on, off = memory(*flags, *start), memory("--deepspeed-activation-checkpointing", *start)
        assert on.peak_bytes_per_gpu == off.peak_bytes_per_gpu
        assert "host_activation_checkpoints" not in on.host_components
    on, off = memory(*flags, "--checkpoint-activations"), memory("--deepspeed-activation-checkpointing",
                                                                  "--checkpoint-activations")
    assert on.peak_bytes_per_gpu < off.peak_bytes_per_gpu and on.host_components["host_activation_checkpoints"] > 0
