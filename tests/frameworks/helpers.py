"""Small builders for framework tests."""

from __future__ import annotations

import json
from pathlib import Path

from llmperf_hook.frameworks.resolve import JobOverrides, resolve_job
from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph import params as pc

BASE = ["--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32", "--seq-length", "2048",
        "--max-position-embeddings", "2048", "--tokenizer-type", "GPT2BPETokenizer", "--micro-batch-size", "1"]


def megatron(*args: str, gpus: int = 8, nodes: int = 1, base: list[str] | None = None) -> TrainingConfig:
    argv = ["torchrun", "--nnodes", str(nodes), "--nproc-per-node", str(gpus), "pretrain_gpt.py", *(BASE if base is None else base), *args]
    return resolve_job(argv, {})[1]


def script(argv: list[str], model: str | None = None, env: dict[str, str] | None = None) -> TrainingConfig:
    return resolve_job(argv, env or {}, JobOverrides(model=model))[1]


def hf_job(folder: Path, raw: dict, nproc: int = 1, block_size: int = 2048, *extra: str) -> TrainingConfig:
    """A Trainer job (run_clm.py) on the Hugging Face config `raw`, written as `folder`/config.json."""
    (folder / "config.json").write_text(json.dumps(raw))
    argv = ["torchrun", "--nproc-per-node", str(nproc), "run_clm.py", "--model_name_or_path", str(folder),
            "--block_size", str(block_size), *extra]
    return resolve_job(argv, {})[1]


def total_params(cfg: TrainingConfig) -> int:
    """Every parameter of the model: its layers (dense or MoE each), embedding and LM head."""
    layers = sum(pc.layer_params(cfg, pc.is_moe_layer(cfg, i)) for i in range(cfg.model.num_layers))
    return layers + pc.embedding_params(cfg) + pc.head_params(cfg)
