"""Small builders for framework tests."""

from __future__ import annotations

from llmperf_hook.frameworks.resolve import JobOverrides, resolve_job
from llmperf_hook.frameworks.training_config import TrainingConfig

BASE = ["--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32", "--seq-length", "2048",
        "--max-position-embeddings", "2048", "--tokenizer-type", "GPT2BPETokenizer", "--micro-batch-size", "1"]


def megatron(*args: str, gpus: int = 8, nodes: int = 1, base: list[str] | None = None) -> TrainingConfig:
    argv = ["torchrun", "--nnodes", str(nodes), "--nproc-per-node", str(gpus), "pretrain_gpt.py", *(BASE if base is None else base), *args]
    return resolve_job(argv, {})[1]


def script(argv: list[str], model: str | None = None, env: dict[str, str] | None = None) -> TrainingConfig:
    return resolve_job(argv, env or {}, JobOverrides(model=model))[1]
