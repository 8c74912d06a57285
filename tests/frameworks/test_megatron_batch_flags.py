"""Megatron-LM's batch flags as predict reads them (frameworks/megatron_rampup.decreased_batch,
megatron_validate_args._check_batch_flags), checked against Megatron-LM HEAD d98e8a6 (core_v0.18.0 on; core_v0.16.1
has no eval batch and no schedule): --decrease-batch-size-if-needed runs the step at the global batch rounded down to
a multiple of micro x DP (ConstantNumMicroBatchesCalculator), while validate_args asserts the eval batch
(--eval-global-batch-size, default the global batch, or MBS x DP beside a --step-batch-size-schedule) divides by
--eval-micro-batch-size x DP; the schedule refuses the decrease flag."""

from __future__ import annotations

import pytest

from llmperf_hook.api import predict_command
from llmperf_hook.errors import ConfigError

JOB = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "4", "--hidden-size", "1024",
       "--num-attention-heads", "16", "--seq-length", "1024", "--max-position-embeddings", "1024",
       "--micro-batch-size", "2", "--vocab-size", "32000", "--bf16", "--tensor-model-parallel-size", "2"]  # DP 4


def _predict(*extra: str):
    return predict_command([*JOB, *extra], {}, cluster="dgx-h100")


def test_the_decrease_flag_with_an_eval_batch_that_divides_prices_the_rounded_batch() -> None:
    pred = _predict("--global-batch-size", "60", "--decrease-batch-size-if-needed", "--eval-global-batch-size", "64")
    batch = pred.config.batch
    assert (batch.global_batch_size, batch.num_microbatches) == (56, 7)  # 60 // 8 x 8; was refused (exit 2)
    assert "rounded down" in pred.config.sources["global_batch_size"].detail
    assert [w for w in pred.warnings if "runs every step at 56" in w]
    same = _predict("--global-batch-size", "56")
    assert pred.estimate.step_time_s == pytest.approx(same.estimate.step_time_s)


def test_the_decrease_flag_alone_is_priced_rounded_and_warned_of_newer_releases() -> None:
    """core_v0.16.1 / core_v0.17 (no eval batch: arguments.py has no eval_global_batch_size) run 60 at 56; core_v0.18.0
    on assert the eval batch, which defaults to the unrounded 60, divides by micro x DP: a warning, not exit 2 (the
    module's release policy: a rule only newer releases enforce on an older flag warns). Was exit 2."""
    pred = _predict("--global-batch-size", "60", "--decrease-batch-size-if-needed")
    assert pred.config.batch.global_batch_size == 56
    warned = [w for w in pred.warnings if "'eval_global_batch_size (60) must be divisible" in w]
    assert len(warned) == 1 and "core_v0.18.0" in warned[0] and "--eval-global-batch-size" in warned[0], pred.warnings
    assert not [w for w in _predict("--global-batch-size", "64", "--decrease-batch-size-if-needed").warnings
                if "eval_global_batch_size" in w]


@pytest.mark.parametrize(("extra", "says"), [
    (("--global-batch-size", "4", "--decrease-batch-size-if-needed", "--eval-global-batch-size", "64"),
     "at least 1"),
    (("--global-batch-size", "64", "--eval-micro-batch-size", "3"), "eval micro batch size 3"),  # was accepted
    (("--global-batch-size", "64", "--eval-global-batch-size", "20"), "eval global batch size 20"),
    # beside a schedule the eval batch defaults to MBS x DP = 8, not the final batch 64
    (("--step-batch-size-schedule", "0:16 1B:64", "--eval-micro-batch-size", "4"), "the default MBS x DP = 2 x 4"),
    (("--step-batch-size-schedule", "0:16 1B:64", "--decrease-batch-size-if-needed"), "do not support"),
])
def test_commands_megatron_refuses(extra: tuple[str, ...], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        _predict(*extra)


def test_commands_megatron_accepts() -> None:
    assert _predict("--step-batch-size-schedule", "0:16 1B:64", "--eval-micro-batch-size", "1").config.batch \
        .global_batch_size == 64
    assert _predict("--global-batch-size", "64", "--decrease-batch-size-if-needed").config.batch.num_microbatches == 8


def test_weight_shards_are_warned_with_the_data_parallel_size_megatron_runs() -> None:
    """--tensor-parallel-num-weight-shards 4 at TP 2 (GTP 2): Megatron's DP is 8 / (2 x 2) = 2, not 4 (was silent)."""
    warned = [w for w in _predict("--tensor-parallel-num-weight-shards", "4").warnings if "weight-shards" in w]
    assert len(warned) == 1 and "= 2" in warned[0] and "priced as DP 4" in warned[0]
    assert not [w for w in _predict("--tensor-parallel-num-weight-shards", "2").warnings if "weight-shards" in w]


@pytest.mark.parametrize(("shards", "says"), [
    ("1", "must be >= tensor_model_parallel_size"),  # resolve_tensor_parallel_weight_shards' ValueErrors
    ("5", "must be divisible by tensor_model_parallel_size"),
    ("16", "is not divisible by total_model_size"),  # GTP 8: world 8 % (TP 2 x 8) (validate_args)
])
def test_weight_shards_megatron_refuses(shards: str, says: str) -> None:
    """core_v0.19.0 model_parallel_config.resolve_tensor_parallel_weight_shards and validate_args' world-size assert
    (the flag's own release's rules: exit 2; were a warning with a floored DP, or nothing below TP)."""
    with pytest.raises(ConfigError, match=says):
        _predict("--tensor-parallel-num-weight-shards", shards)
