"""A plain torch / Hugging Face Trainer script without DeepSpeed runs torch DistributedDataParallel, whose Reducer
all-reduces 25 MiB gradient buckets while backward runs (bucket_cap_mb=25): the sync overlaps backward."""

from __future__ import annotations

import json
from pathlib import Path

from llmperf_hook.frameworks.assemble import DDP_BUCKET_ELEMS
from llmperf_hook.frameworks.resolve import resolve_job

GPT2 = {"model_type": "gpt2", "n_layer": 4, "n_embd": 1024, "n_head": 16, "n_positions": 1024, "vocab_size": 50257}


def test_ddp_overlaps_its_bucketed_all_reduce(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(GPT2))
    cfg = resolve_job(["torchrun", "--nproc-per-node", "8", "run_clm.py", "--model_name_or_path", str(tmp_path)], {})[1]
    assert cfg.framework == "torch" and cfg.optimizer.zero_stage == 0
    assert cfg.optimizer.overlap_grad_reduce and cfg.optimizer.grad_bucket_size_elems == DDP_BUCKET_ELEMS == 6_553_600
