"""Which attention kernels a Megatron job runs: megatron-core's local spec is unfused whatever --attention-backend
says, Megatron-DeepSpeed is unfused without a --use-flash-attn* flag, Transformer Engine layers keep 'auto'."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.frameworks.resolve import resolve_job

SHAPE = ("--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 "
         "--vocab-size 32000 --micro-batch-size 1 --global-batch-size 8 --bf16").split()
MEGATRON = ("torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", *SHAPE)
MEGATRON_DS = ("deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *SHAPE, "--deepspeed", "--deepspeed_config", "DS")


@pytest.mark.parametrize("argv, expected", [
    ((*MEGATRON,), "auto"),
    ((*MEGATRON, "--attention-backend", "flash"), "flash"),
    ((*MEGATRON, "--transformer-impl", "local"), "unfused"),
    ((*MEGATRON, "--transformer-impl", "local", "--attention-backend", "flash"), "unfused"),
    ((*MEGATRON_DS,), "unfused"),
    ((*MEGATRON_DS, "--use-flash-attn-v2"), "flash"),
    # a user's own script that takes Megatron-style flags (examples/cpu-testbed/train_gpt.py: torch SDPA)
    (tuple("train_gpt.py" if a == "pretrain_gpt.py" else a for a in MEGATRON_DS), "auto"),
])
def test_attention_backend_follows_the_layer_spec(argv: tuple[str, ...], expected: str, tmp_path: Path) -> None:
    ds_config = tmp_path / "ds.json"
    ds_config.write_text(json.dumps({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1}))
    _, cfg = resolve_job([str(ds_config) if a == "DS" else a for a in argv], {})
    assert cfg.framework == ("megatron-deepspeed" if "DS" in argv else "megatron")  # either script
    assert cfg.attention_backend == expected
    assert cfg.sources["attention_backend"].detail
