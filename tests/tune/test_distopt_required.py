"""Flags of the command that Megatron refuses without --use-distributed-optimizer, which --apply keeps: a candidate
that drops the distributed optimizer is rejected by a named rule (tune listed 'drop --use-distributed-optimizer' rows
whose commands explain refuses, exit 2). --fp8-param-gather: validate_args asserts it needs the distributed optimizer
(or an FSDP); --use-precision-aware-optimizer (which --optimizer-cpu-offload needs) too (OptimizerConfig /
get_megatron_optimizer)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.tune.candidates import generate_candidates, rule_masks
from llmperf_hook.tune.search_space import load_search_space

from .helpers import run_cli, tune_apply_json

GPT = ["torchrun", "--nnodes", "2", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "24", "--hidden-size",
       "2048", "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
       "--vocab-size", "50257", "--micro-batch-size", "1", "--global-batch-size", "256",
       "--tensor-model-parallel-size", "2", "--bf16", "--use-distributed-optimizer"]
CASES = [  # (the flag the rule names, the command's extra words)
    ("--fp8-param-gather", ["--fp8-format", "hybrid", "--fp8-param-gather"]),
    ("--use-precision-aware-optimizer", ["--use-precision-aware-optimizer"]),
    ("--use-precision-aware-optimizer", ["--use-precision-aware-optimizer", "--optimizer-cpu-offload"]),
]


@pytest.mark.parametrize("flag, extra", CASES)
def test_dropping_the_distributed_optimizer_is_a_named_rule(flag: str, extra: list[str]) -> None:
    cfg = resolve_job([*GPT, *extra], {})[1]
    table = generate_candidates(cfg, load_search_space(None, "megatron"), 8)
    off = table.columns["distopt"] == 0
    assert off.any() and np.array_equal(rule_masks(cfg, table.columns)[f"{flag} needs the distributed optimizer"], off)


def test_no_rule_without_the_flags() -> None:
    cfg = resolve_job(GPT, {})[1]
    table = generate_candidates(cfg, load_search_space(None, "megatron"), 8)
    assert not [rule for rule in rule_masks(cfg, table.columns) if "needs the distributed optimizer" in rule]


@pytest.mark.parametrize("flag, extra", CASES)
def test_every_listed_command_is_accepted_by_explain(flag: str, extra: list[str], tmp_path: Path, capsys) -> None:
    """Narrowed to TP 2 / PP 1 / no recompute with the distributed optimizer on and off, tune listed the 'off' rows."""
    space = {"distributed_optimizer": [False, True], "tensor_parallel": [2], "pipeline_parallel": [1],
             "context_parallel": [1], "recompute": ["none"], "micro_batch_size": [1, 2]}
    code, out, err = tune_apply_json(tmp_path, capsys, space, [*GPT, *extra])
    assert code == 0, err
    data = json.loads(out)
    assert data["search"]["invalid_by_rule"].get(f"{flag} needs the distributed optimizer", 0) > 0
    assert all(row["distributed_optimizer"] for row in data["top"]), [row["layout"] for row in data["top"]]
    assert data["knobs"]["rules"]["distributed_optimizer"] == f"off is refused: {flag} (kept by --apply) needs the " \
                                                              "distributed optimizer"
    code, _, err = run_cli(["explain", "--", *data["applied"]["argv"]], capsys)
    assert code == 0, err
