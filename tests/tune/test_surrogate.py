"""The surrogate's memory is the full memory model's (what makes the OOM prune predict's verdict), and the
step-time estimate orders layouts like the full model does."""

from __future__ import annotations

import numpy as np
import pytest

from llmperf_hook import api
from llmperf_hook.commands.tune import memory_only
from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.tune import surrogate
from llmperf_hook.tune.candidate import apply_candidate
from llmperf_hook.tune.candidates import candidates_from_list, generate_candidates
from llmperf_hook.tune.search_space import load_search_space

from .helpers import explain_valid, rule_rejected

GPT = ["torchrun", "--nnodes", "4", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "32",
       "--hidden-size", "4096", "--num-attention-heads", "32", "--seq-length", "2048",
       "--max-position-embeddings", "2048", "--tokenizer-type", "GPT2BPETokenizer", "--micro-batch-size", "1",
       "--global-batch-size", "256", "--tensor-model-parallel-size", "2", "--bf16"]
LLAMA = ["torchrun", "--nnodes", "2", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "32",
         "--hidden-size", "4096", "--ffn-hidden-size", "14336", "--num-attention-heads", "32", "--group-query-attention",
         "--num-query-groups", "8", "--swiglu", "--normalization", "RMSNorm", "--position-embedding-type", "rope",
         "--untie-embeddings-and-output-weights", "--disable-bias-linear", "--seq-length", "8192",
         "--max-position-embeddings", "8192", "--vocab-size", "128256", "--micro-batch-size", "1",
         "--global-batch-size", "128", "--bf16"]


def _sample(argv: list[str], cluster: str, n: int, seed: int):
    _, cfg = resolve_job(argv, {})
    spec = api.load_cluster(cluster)
    table = generate_candidates(cfg, load_search_space(None, "megatron"), spec.gpus_per_node)
    order = np.random.default_rng(seed).permutation(np.flatnonzero(~rule_rejected(cfg, table)))
    out = explain_valid(cfg, table, order, limit=n)
    return cfg, spec, out


@pytest.mark.parametrize("argv, cluster", [(GPT, "dgx-a100"), (LLAMA, "dgx-h100")])
def test_memory_estimate_is_the_memory_models(argv: list[str], cluster: str) -> None:
    cfg, spec, cands = _sample(argv, cluster, 80, seed=1)
    est = surrogate.estimate(cfg, spec, candidates_from_list(tuple(cands)).columns).peak_bytes
    full = np.array([memory_only(apply_candidate(cfg, c), spec).peak_bytes_per_gpu for c in cands], dtype=float)
    gap = abs(full - est)  # memory.stage_memory rounds each component down to a whole byte
    assert gap.max() <= 64, cands[int(gap.argmax())].describe()


def test_step_time_estimate_orders_like_the_full_model() -> None:
    cfg, spec, cands = _sample(GPT, "dgx-a100", 40, seed=2)
    est = surrogate.estimate_step_time(cfg, spec, candidates_from_list(tuple(cands)).columns)
    full = np.array([api.predict_config(apply_candidate(cfg, c), spec).step_time_s for c in cands])
    rank = lambda x: np.argsort(np.argsort(x))  # noqa: E731
    assert np.corrcoef(rank(est), rank(full))[0, 1] > 0.7
