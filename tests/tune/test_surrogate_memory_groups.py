"""tune/surrogate_memory computes each memory term once per distinct value of the knobs it reads and broadcasts it:
its grouping is np.unique(axis=0)'s (same first rows, same group numbers), and a table's peaks are, bit for bit,
those of each of its rows estimated alone (where nothing is shared), over a few hundred candidates of a dense GPT,
an MoE, a Megatron-DeepSpeed and an fp8 job, valid or not (a split only the graph refuses is NaN either way)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.tune import surrogate_memory
from llmperf_hook.tune.candidates import generate_candidates
from llmperf_hook.tune.search_space import load_search_space

from .helpers import a100_cluster, gpt_config, rule_rejected
from .test_moe_surrogate import MIXTRAL

ROWS = 100
"""Candidates a layout rule accepts, per job (and a fifth as many it rejects)."""


def _jobs() -> dict:
    mixtral = resolve_job(MIXTRAL, {})[1]
    return {"gpt-175b": gpt_config(), "gpt-1b-16gpu": gpt_config(layers=24, hidden=2048, heads=16, world=16, tp=1,
                                                                   pp=1, gbs=128),
            "mixtral": mixtral, "megatron-deepspeed": dataclasses.replace(gpt_config(), framework="megatron-deepspeed"),
            # fp8 weight copies per micro-batch in flight: the state groups read num_mb and rc too
            "fp8-no-transpose-cache": dataclasses.replace(gpt_config(), precision="fp8",
                                                          parameter_transpose_cache=False)}


@pytest.mark.parametrize("seed", range(5))
def test_groups_are_numpys_unique_rows(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    cols = {k: rng.choice([1, 2, 4, 8, 64, 1024], size=n) for k in "abc"} | {"d": rng.integers(0, 3, size=n)}
    keys = ("a", "b", "c", "d")
    first, inverse = surrogate_memory._groups(cols, keys)
    stacked = np.stack([cols[k] for k in keys], axis=1)
    _, ref_first, ref_inverse = np.unique(stacked, axis=0, return_index=True, return_inverse=True)
    assert first.tolist() == ref_first.tolist() and inverse.tolist() == ref_inverse.reshape(-1).tolist()


@pytest.mark.parametrize("job", ["gpt-175b", "gpt-1b-16gpu", "mixtral", "megatron-deepspeed", "fp8-no-transpose-cache"])
def test_a_tables_peaks_are_each_rows_alone(job: str) -> None:
    cfg, cluster = _jobs()[job], a100_cluster()
    table = generate_candidates(cfg, load_search_space(None, cfg.framework), cluster.gpus_per_node)
    rejected, rng = rule_rejected(cfg, table), np.random.default_rng(0)
    valid = rng.permutation(np.flatnonzero(~rejected))[:ROWS]
    rows = np.sort(np.r_[valid, rng.permutation(np.flatnonzero(rejected))[:ROWS // 5]])
    cols = {k: v[rows] for k, v in table.columns.items()}
    together = surrogate_memory.estimate_peak_bytes(cfg, cluster, cols)
    alone = [surrogate_memory.estimate_peak_bytes(cfg, cluster, {k: v[i:i + 1] for k, v in cols.items()})[0]
             for i in range(len(rows))]
    assert np.isfinite(together).sum() >= len(valid) // 2  # mostly known peaks, not NaN against NaN
    assert np.array_equal(together, np.array(alone), equal_nan=True)
