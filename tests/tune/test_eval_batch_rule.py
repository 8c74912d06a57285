"""Megatron-LM's eval batch and --decrease-batch-size-if-needed in tune's command rules (tune/command_rules.py):
arguments.py (since #4014) asserts --eval-global-batch-size (default: the global batch) % (--eval-micro-batch-size
(default: the micro-batch) x DP) == 0; with the flag, ConstantNumMicroBatchesCalculator rounds the training batch down
and asserts at least one micro-batch."""

from __future__ import annotations

import dataclasses

import numpy as np

from llmperf_hook import api
from llmperf_hook.tune.candidates import candidates_from_list
from llmperf_hook.tune.candidate import candidate_of
from llmperf_hook.tune.command_rules import EVAL_BATCH_RULE, ROUNDED_TO_NOTHING_RULE, command_rule_masks

JOB = ["torchrun", "--nnodes", "2", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "8", "--hidden-size",
       "1024", "--num-attention-heads", "16", "--seq-length", "1024", "--max-position-embeddings", "1024",
       "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16"]


def rule_masks(argv: list[str], layouts: list[dict]) -> dict[str, np.ndarray]:
    """tune's command rules (command_rule_masks) of `argv` on dgx-h100, over its candidate with each of `layouts`."""
    job, cfg, _, _ = api.resolve_command(argv, {}, cluster="dgx-h100")
    base = candidate_of(cfg)
    cols = candidates_from_list(tuple(dataclasses.replace(base, **kw) for kw in layouts)).columns
    return command_rule_masks(cfg, job.script_args)(cols)


def _masks(extra: list[str], layouts: list[dict]) -> dict[str, np.ndarray]:
    return rule_masks(JOB + extra, layouts)


def test_an_eval_batch_micro_x_dp_does_not_divide_is_refused() -> None:
    # 16 GPUs: TP 1 -> DP 16 (24 % 16 != 0), TP 2 -> DP 8 (24 % 8 == 0); eval micro-batch 2 x DP 8 = 16 does not
    # the command itself at TP 2 (predict refuses TP 1's DP 16 by the same assertion: tests/frameworks/test_batch_flags)
    masks = _masks(["--eval-global-batch-size", "24", "--tensor-model-parallel-size", "2"],
                   [{"tp": 1}, {"tp": 2}, {"tp": 2, "micro_batch_size": 2}])
    assert masks[EVAL_BATCH_RULE].tolist() == [True, False, True]
    masks = _masks(["--eval-global-batch-size", "24", "--eval-micro-batch-size", "1",
                    "--tensor-model-parallel-size", "2"], [{"tp": 2, "micro_batch_size": 2}])
    assert masks[EVAL_BATCH_RULE].tolist() == [False]  # the eval micro-batch is its own


def test_without_eval_flags_or_the_decrease_flag_no_rule_is_added() -> None:
    assert _masks([], [{"tp": 1}]) == {}


def test_the_decrease_flag_needs_one_micro_batch_and_a_given_eval_batch_that_divides() -> None:
    # global batch 64: TP 1 mbs 8 -> 8 x 16 = 128 > 64 rounds to 0 micro-batches
    layouts = [{"tp": 1, "micro_batch_size": 8}, {"tp": 1, "micro_batch_size": 4}, {"tp": 1}]
    masks = _masks(["--decrease-batch-size-if-needed"], layouts)
    assert masks[ROUNDED_TO_NOTHING_RULE].tolist() == [True, False, False]
    # the flag alone brings no eval rule: core_v0.17 and earlier have none, predict warns of core_v0.18.0's
    # (megatron_validate_args._check_batch_flags); an --eval-global-batch-size (core_v0.18.0 on) must divide
    assert EVAL_BATCH_RULE not in masks
    masks = _masks(["--decrease-batch-size-if-needed", "--eval-global-batch-size", "64"], layouts)
    assert masks[EVAL_BATCH_RULE].tolist() == [True, False, False]  # 64 % (8 x 16)
