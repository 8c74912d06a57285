"""A tuned ds_config copy against DeepSpeed's batch triad (deepspeed/runtime/config.py _set_batch_related_parameters,
_batch_assertion) for every way of giving it: each subset of train_batch_size / train_micro_batch_size_per_gpu /
gradient_accumulation_steps, each given key a number or "auto". Plain deepspeed.initialize reads the copy as written;
the Hugging Face Trainer first fills "auto" from its (rewritten) arguments and refuses a stated value that differs
(transformers integrations/deepspeed.py trainer_config_process / fill_match). Either way DeepSpeed must run the
tuned micro-batch and accumulation at the global batch tune held."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from llmperf_hook.tune import ds_config_rewrite as dsr
from llmperf_hook.tune.candidate import candidate_of

from .helpers import gpt_config

DP, GLOBAL_BATCH, NEW_MICRO = 8, 64, 4
NEW_ACCUMULATION = GLOBAL_BATCH // (NEW_MICRO * DP)
USER = {"train_batch_size": GLOBAL_BATCH, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8}
CONFIGS = [{key: "auto" if auto else USER[key] for key, auto in zip(keys, autos)}
           for n in range(4) for keys in itertools.combinations(USER, n)
           for autos in itertools.product((False, True), repeat=n)]


def _trainer_filled(config: dict) -> dict:
    """trainer_config_process with --per_device_train_batch_size / --gradient_accumulation_steps as rewrite_hf_argv
    leaves them: "auto" filled, a differing stated value refused."""
    trainer = {"train_micro_batch_size_per_gpu": NEW_MICRO, "gradient_accumulation_steps": NEW_ACCUMULATION,
               "train_batch_size": DP * NEW_MICRO * NEW_ACCUMULATION}
    for key, value in trainer.items():
        assert config.get(key) in (None, "auto", value), f"the Trainer refuses {key}={config[key]} (its {value})"
    return {**config, **{key: value for key, value in trainer.items() if config.get(key) == "auto"}}


@pytest.mark.parametrize("trainer", [False, True], ids=["deepspeed.initialize", "hf-trainer"])
@pytest.mark.parametrize("user", CONFIGS, ids=[str(c) for c in CONFIGS])
def test_deepspeed_runs_the_tuned_batch(user: dict, trainer: bool, deepspeed_config) -> None:
    new = dataclasses.replace(candidate_of(gpt_config(world=DP, tp=1, pp=1, mbs=1, gbs=GLOBAL_BATCH, zero=1)),
                              micro_batch_size=NEW_MICRO)
    copy = dsr.tuned_ds_config({**user, "zero_optimization": {"stage": 1}}, new, NEW_ACCUMULATION, set_zero=False,
                               global_batch_size=GLOBAL_BATCH, auto_filled=trainer)
    received = _trainer_filled(copy) if trainer else copy

    class Mpu:
        def get_data_parallel_world_size(self) -> int:
            return DP

    ds = deepspeed_config.DeepSpeedConfig(received, mpu=Mpu())
    assert (ds.train_batch_size, ds.train_micro_batch_size_per_gpu, ds.gradient_accumulation_steps) == (
        GLOBAL_BATCH, NEW_MICRO, NEW_ACCUMULATION)
