"""ZeRO-Infinity's ds_config as DeepSpeed 0.19 checks it (frameworks/deepspeed_nvme.py, deepspeed_schema.py): the aio
section, the optimizer swapper's pipeline switches, the pinned swap buffers, nvme_path, and the parameter swap
buffer that must hold the largest partition."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmperf_hook.errors import ConfigError
from tests.frameworks.helpers import script

DS = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config"]
NVME = {"device": "nvme", "nvme_path": "/local_nvme"}


def _ds(tmp_path: Path, zero: dict[str, Any], **top: Any) -> str:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                                "zero_optimization": {"stage": 3, **zero}, **top}))
    return str(path)


def test_nvme_offload_is_priced_with_its_pinned_buffers_noted(tmp_path: Path) -> None:
    cfg = script([*DS, _ds(tmp_path, {"offload_optimizer": NVME, "offload_param": NVME})], model="llama2-7b")
    assert (cfg.optimizer.offload_optimizer, cfg.optimizer.offload_param) == ("nvme", "nvme")
    notes = [w for w in cfg.warnings if "pins" in w]
    assert len(notes) == 1 and "1.0 GB of host memory per rank" in notes[0]  # 5 x 1e8 x 2 B
    assert not any("aio" in w or "pipeline" in w for w in cfg.warnings)


def test_nvme_path_is_required_at_stage3(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="without nvme_path"):
        script([*DS, _ds(tmp_path, {"offload_param": {"device": "nvme"}})], model="llama2-7b")


def test_aio_section_values_are_checked_and_non_defaults_warned(tmp_path: Path) -> None:
    zero = {"offload_optimizer": NVME}
    cfg = script([*DS, _ds(tmp_path, zero, aio={"block_size": 262144, "queue_depth": 32})], model="llama2-7b")
    assert sum("aio block_size = 262144, queue_depth = 32" in w for w in cfg.warnings) == 1
    quiet = script([*DS, _ds(tmp_path, zero, aio={"block_size": 1048576, "overlap_events": True})], model="llama2-7b")
    assert not any("aio" in w for w in quiet.warnings)
    for bad in ({"block_size": "1M"}, {"queue_depth": 0}, {"single_submit": "no"}):
        with pytest.raises(ConfigError, match=f"aio.{next(iter(bad))}"):
            script([*DS, _ds(tmp_path, zero, aio=bad)], model="llama2-7b")


def test_pipelined_optimizer_swaps_are_warned(tmp_path: Path) -> None:
    zero = {"offload_optimizer": {**NVME, "pipeline_read": True, "pipeline_write": True}}
    cfg = script([*DS, _ds(tmp_path, zero)], model="llama2-7b")
    assert sum("pipeline_read and pipeline_write" in w for w in cfg.warnings) == 1


def test_parameter_swap_buffer_must_hold_the_largest_partition(tmp_path: Path) -> None:
    """Llama-2-7B's embedding is 32000 x 4096 = 131 M elements; over 8 ranks 16.4 M per partition."""
    small = {"offload_param": {**NVME, "buffer_size": 10_000_000}}
    with pytest.raises(ConfigError, match="More elements") as err:
        script([*DS, _ds(tmp_path, small)], model="llama2-7b")
    assert "16,384,000" in str(err.value)
    fits = script([*DS, _ds(tmp_path, {"offload_param": {**NVME, "buffer_size": 16_384_000}})], model="llama2-7b")
    assert fits.optimizer.nvme_param_buffer_elems == 16_384_000
    one_gpu = ["deepspeed", "--num_gpus", "1", "train.py", "--deepspeed_config"]
    with pytest.raises(ConfigError, match="buffer_size"):  # the default 1e8 < 131 M on one rank
        script([*one_gpu, _ds(tmp_path, {"offload_param": NVME})], model="llama2-7b")


def test_offload_param_max_in_cpu_is_read(tmp_path: Path) -> None:
    """offload_param.max_in_cpu (zero/offload_config.py, default 1e9): the partition elements DeepSpeed keeps in host
    memory under an NVMe parameter offload, which graph/zero_layer_ops prices no NVMe traffic for."""
    default = script([*DS, _ds(tmp_path, {"offload_param": NVME})], model="llama2-7b")
    assert default.optimizer.nvme_param_max_in_cpu_elems == 1_000_000_000
    given = script([*DS, _ds(tmp_path, {"offload_param": {**NVME, "max_in_cpu": 5e7}})], model="llama2-7b")
    assert given.optimizer.nvme_param_max_in_cpu_elems == 50_000_000
