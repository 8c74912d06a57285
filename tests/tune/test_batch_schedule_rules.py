"""tune's command rules for Megatron-LM's --step-batch-size-schedule and --decrease-batch-size-if-needed
(tune/command_rules.py), Megatron-LM HEAD d98e8a6: beside a schedule the eval batch defaults to MBS x DP
(validate_args sets args.global_batch_size before the calculator), train() asserts every step's batch of the schedule
divides by micro x DP (update(consistency_check=True)), and under the decrease flag a candidate must round the
command's global batch to the batch priced."""

from __future__ import annotations

import numpy as np

from llmperf_hook.tune.command_rules import EVAL_BATCH_RULE, ROUNDED_ELSEWHERE_RULE, SCHEDULE_RULE
from tests.tune.test_eval_batch_rule import rule_masks

JOB = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "4", "--hidden-size", "1024",
       "--num-attention-heads", "16", "--seq-length", "1024", "--max-position-embeddings", "1024",
       "--micro-batch-size", "2", "--vocab-size", "32000", "--bf16", "--tensor-model-parallel-size", "2"]  # DP 4


def _masks(extra: list[str], layouts: list[dict]) -> dict[str, np.ndarray]:
    return rule_masks(JOB + extra, layouts)


def test_beside_a_schedule_the_eval_batch_is_micro_x_dp() -> None:
    # eval micro 2: MBS x DP % (2 x DP) needs an even micro-batch; the final batch 64 % (2 x DP) would pass them all
    masks = _masks(["--step-batch-size-schedule", "0:16 1B:64", "--eval-micro-batch-size", "2"],
                   [{"micro_batch_size": 1}, {"micro_batch_size": 4}, {"micro_batch_size": 1, "tp": 1}])
    assert masks[EVAL_BATCH_RULE].tolist() == [True, False, True]


def test_a_schedule_batch_the_command_splits_must_split_at_each_candidate() -> None:
    # the command's micro x DP = 8 splits 16; 4 x 8 (TP 1) = 32 does not, 4 x 4 = 16 does
    masks = _masks(["--step-batch-size-schedule", "0:16 1B:64"],
                   [{"micro_batch_size": 4, "tp": 1}, {"micro_batch_size": 4}, {"micro_batch_size": 1, "tp": 1}])
    assert masks[SCHEDULE_RULE].tolist() == [True, False, False]


def test_a_schedule_batch_the_command_never_splits_is_one_it_resumes_past() -> None:
    assert SCHEDULE_RULE not in _masks(["--step-batch-size-schedule", "0:12 1B:64"], [{"micro_batch_size": 4}])


def test_the_decrease_flag_keeps_the_batch_priced() -> None:
    # 60 at micro x DP 8 runs 56; at 4 (micro 1, DP 4) it would run 60, at 8 (micro 1, DP 8) 56, at 16 48
    masks = _masks(["--global-batch-size", "60", "--decrease-batch-size-if-needed", "--eval-global-batch-size", "64"],
                   [{"micro_batch_size": 1}, {"micro_batch_size": 1, "tp": 1}, {"micro_batch_size": 2, "tp": 1},
                    {}])
    assert masks[ROUNDED_ELSEWHERE_RULE].tolist() == [True, False, True, False]


def test_the_decrease_flag_alone_adds_no_eval_rule() -> None:
    # predict prices 60 at micro x DP 8 as 56 (a warning: only core_v0.18.0 on assert the unrounded eval batch); an
    # eval rule on 60 beside the rule keeping 56 would leave no candidate but those that run 60, none of which is priced
    masks = _masks(["--global-batch-size", "60", "--decrease-batch-size-if-needed"],
                   [{"micro_batch_size": 1}, {"micro_batch_size": 1, "tp": 1}, {}])
    assert EVAL_BATCH_RULE not in masks
    assert masks[ROUNDED_ELSEWHERE_RULE].tolist() == [True, False, False]
