"""tune's memory verdict under --defer-embedding-wgrad-compute is predict's: the surrogate adds the last stage's
deferred output-layer wgrad buffers (activations.deferred_embedding_wgrad_bytes) per candidate's micro-batch count."""

from __future__ import annotations

import pytest

from .test_surrogate_memory import _check_job

JOB = ["torchrun", "--nnodes", "2", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "16", "--hidden-size",
       "2048", "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
       "--vocab-size", "50257", "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16",
       "--pipeline-model-parallel-size", "2", "--defer-embedding-wgrad-compute"]


@pytest.mark.parametrize("limit", [[], ["--wgrad-deferral-limit", "2"]])
@pytest.mark.parametrize("seed", [1, 2])
def test_deferred_wgrad_memory_is_the_memory_models(limit: list[str], seed: int) -> None:
    _check_job([*JOB, *limit], None, seed)
