"""The Trainer's --fsdp_config `activation_checkpointing` read as transformers reads it: str_to_bool(str(v).lower())
(accelerate utils/environment.py), so `1`, "yes" and "on" turn it on and a word str_to_bool refuses stops the job."""

from __future__ import annotations

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.fsdp_sharding import fsdp_checkpointing_on


@pytest.mark.parametrize("value, on", [(True, True), ("true", True), (1, True), ("yes", True), ("On", True),
                                       ("t", True), (False, False), (0, False), ("off", False), ("N", False)])
def test_truth_words(value: object, on: bool) -> None:
    assert fsdp_checkpointing_on({"activation_checkpointing": value}, "--fsdp_config f.json") is on


def test_absent_is_off() -> None:
    assert fsdp_checkpointing_on({"sharding_strategy": "FULL_SHARD"}, "--fsdp_config f.json") is False


@pytest.mark.parametrize("value", ["maybe", None, 2])
def test_a_word_the_trainer_refuses(value: object) -> None:
    with pytest.raises(ConfigError, match="Trainer reads it as a truth value"):
        fsdp_checkpointing_on({"activation_checkpointing": value}, "--fsdp_config f.json")
