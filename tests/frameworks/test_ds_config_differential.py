"""Differential audit of the ds_configs users write: llmperf's accept / refuse (exit 2) against DeepSpeed's own
DeepSpeedConfig (deepspeed 0.19.8 in the venv: runtime/config.py, its pydantic section models, the batch triad), built
as deepspeed.initialize builds it for a plain `deepspeed train.py --deepspeed_config ds.json` job on 8 GPUs: the
data-parallel world faked through an mpu (what the engine passes), no process group. Rows DeepSpeedConfig passes
but DeepSpeed's engine refuses later in deepspeed.initialize, and the two llmperf reads otherwise on purpose, carry
their reason (`DIFFERENT`); the test checks that the answers do differ there (so no row is mislabelled)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmperf_hook.errors import ConfigError
from tests.frameworks.helpers import script

DP = 8
DS = ["deepspeed", "--num_gpus", str(DP), "train.py", "--deepspeed_config"]
B = {"train_micro_batch_size_per_gpu": 2}

CORPUS: list[tuple[str, dict[str, Any]]] = [
    ("micro only", {**B}),
    ("train only", {"train_batch_size": 64}),
    ("triad consistent", {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4}),
    ("triad inconsistent", {"train_batch_size": 60, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4}),
    ("train not a multiple of dp", {"train_batch_size": 100}),
    ("no batch keys", {"zero_optimization": {"stage": 2}}),
    ("accumulation alone", {"gradient_accumulation_steps": 4}),
    ("micro 0", {"train_micro_batch_size_per_gpu": 0}),
    ("micro negative", {"train_micro_batch_size_per_gpu": -2}),
    ("accumulation 0", {"train_batch_size": 64, "gradient_accumulation_steps": 0}),
    ("micro as a string number", {"train_micro_batch_size_per_gpu": "2"}),
    ("micro as a word", {"train_micro_batch_size_per_gpu": "two"}),
    ("fp16 and bf16", {**B, "fp16": {"enabled": True}, "bf16": {"enabled": True}}),
    ("bf16", {**B, "bf16": {"enabled": True}}),
    ("fp16 with loss scale", {**B, "fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}}),
    ("zero stage 4", {**B, "zero_optimization": {"stage": 4}}),
    ("zero stage -1", {**B, "zero_optimization": {"stage": -1}}),
    ("zero stage as a string", {**B, "zero_optimization": {"stage": "2"}}),
    ("zero 2 with cpu optimizer offload", {**B, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}),
    ("zero 3 with nvme param offload", {**B, "zero_optimization": {
        "stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/nvme"}}}),
    ("offload to gpu", {**B, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "gpu"}}}),
    ("unknown zero key", {**B, "zero_optimization": {"stage": 2, "stage3_prefetch_bucket": 5e7}}),
    ("bucket as scientific float", {**B, "zero_optimization": {"stage": 2, "reduce_bucket_size": 5e8}}),
    ("negative bucket", {**B, "zero_optimization": {"stage": 2, "reduce_bucket_size": -1}}),
    ("overlap_comm as a string", {**B, "zero_optimization": {"stage": 2, "overlap_comm": "yes"}}),
    ("gradient clipping", {**B, "gradient_clipping": 1.0}),
    ("allreduce sum at zero 3", {**B, "gradient_allreduce_op": "sum", "zero_optimization": {"stage": 3}}),
    ("allreduce sum at zero 2", {**B, "gradient_allreduce_op": "SUM", "zero_optimization": {"stage": 2}}),
    ("allreduce avg", {**B, "gradient_allreduce_op": "avg"}),
    ("zero 3 with pipeline stages", {**B, "zero_optimization": {"stage": 3}, "pipeline": {"stages": 2}}),
    ("offload without zero", {**B, "zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}}),
    ("param offload at zero 2", {**B, "zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}),
    ("pipeline stages at zero 1", {**B, "pipeline": {"stages": 2}, "zero_optimization": {"stage": 1}}),
    ("pipeline stages at zero 2", {**B, "pipeline": {"stages": 2}, "zero_optimization": {"stage": 2}}),
    ("partial offload at zero 2", {**B, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu",
                                                                                              "ratio": 0.5}}}),
    ("pin_memory as text", {**B, "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu",
                                                                                   "pin_memory": "true"}}}),
    ("bucket as text", {**B, "zero_optimization": {"stage": 1, "reduce_bucket_size": "5e8"}}),
    ("negative max live parameters", {**B, "zero_optimization": {"stage": 3, "stage3_max_live_parameters": -1}}),
    ("gradient clipping as text", {**B, "gradient_clipping": "1.0"}),
    ("wall clock breakdown as text", {**B, "wall_clock_breakdown": "yes"}),
    ("wall clock breakdown", {**B, "wall_clock_breakdown": True}),
    ("micro as a fraction", {"train_micro_batch_size_per_gpu": 2.5}),
    ("micro 2.0", {"train_micro_batch_size_per_gpu": 2.0}),
    ("train as text", {"train_batch_size": "64"}),
    ("accumulation auto", {**B, "gradient_accumulation_steps": "auto"}),
    ("dynamic loss scale window 0", {**B, "fp16": {"enabled": True, "loss_scale_window": 0}}),
    ("static loss scale window 0", {**B, "fp16": {"enabled": True, "loss_scale": 128, "loss_scale_window": 0}}),
    ("dynamic loss scale floor 0", {**B, "fp16": {"enabled": True, "min_loss_scale": 0}}),
    ("ulysses 3 of 8", {**B, "sequence_parallel_size": 3}),
    ("ulysses 2 of 8", {**B, "sequence_parallel_size": 2}),
    ("hpz 3 of 8", {**B, "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 3}}),
    ("communication dtype fp8", {**B, "communication_data_type": "fp8"}),
    ("communication dtype BF16", {**B, "communication_data_type": "BF16"}),
    ("bf16 master weights at zero 0", {**B, "bf16": {"enabled": True, "bf16_master_weights_and_grads": True}}),
    ("fp16 master weights at zero 2", {**B, "fp16": {"enabled": True, "fp16_master_weights_and_grads": True},
                                       "zero_optimization": {"stage": 2}}),
    ("optimizer section", {**B, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}),
    ("activation checkpointing section", {**B, "activation_checkpointing": {"partition_activations": True}}),
    ("unknown activation checkpointing key", {**B, "activation_checkpointing": {"partition_activation": True}}),
    ("hpz at zero 3", {**B, "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 8}}),
]
"""(name, ds_config) as users write them (DeepSpeed's docs/_pages/config-json.md keys, HF / DeepSpeedExamples
configs), with the edge values: 0, negatives, strings for numbers, exclusive precisions, bad stages and devices."""

_ENGINE = "DeepSpeedConfig passes it; deepspeed.initialize stops later: "
DIFFERENT: dict[str, str] = {
    "zero 3 with pipeline stages": _ENGINE + "PipelineEngine asserts 'ZeRO-2 and ZeRO-3 are incompatible with "
                                   "pipeline parallelism' (runtime/pipe/engine.py:77)",
    "pipeline stages at zero 2": _ENGINE + "the same PipelineEngine assert",
    "gradient clipping as text": _ENGINE + "the engine compares gradient_clipping() > 0.0 at the first step (TypeError)",
    "ulysses 3 of 8": _ENGINE + "the sequence-parallel groups split the world of 8 and the model's 32 heads "
                      "(DeepSpeed-Ulysses asserts both)",
    "hpz 3 of 8": _ENGINE + "utils/groups.py _create_zero_param_parallel_group asserts the world divides by it",
    "micro as a fraction": "DeepSpeedConfig only checks that train = micro x accumulation x DP (2.5 x 1 x 8 = 20.0); "
                           "llmperf refuses a batch that is no whole number of samples (what DeepSpeed's DataLoader "
                           "and the pipeline engine's buffers are built from)",
    "accumulation auto": "DeepSpeedConfig fails on the string (TypeError); llmperf prices \"auto\" as filled in, with "
                         "a warning, as the Hugging Face Trainer, Accelerate or the user's script may fill it first",
}
"""Rows whose answer is not DeepSpeedConfig's, each with the reason and the rule that applies instead."""


class _Mpu:
    """What the engine passes DeepSpeedConfig: the data-parallel world (engine.py _configure_with_arguments)."""

    def get_data_parallel_world_size(self) -> int:
        return DP


def _deepspeed_refuses(module: Any, config: dict[str, Any]) -> str | None:
    try:
        module.DeepSpeedConfig(json.loads(json.dumps(config)), mpu=_Mpu())
    except Exception as err:  # noqa: BLE001 - any refusal is the oracle's answer
        return f"{type(err).__name__}: {err}"
    return None


def _llmperf_refuses(tmp_path: Path, config: dict[str, Any]) -> str | None:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(config))
    try:
        script([*DS, str(path)], model="llama2-7b")
    except ConfigError as err:
        return str(err)
    return None


def test_the_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 20 and len({name for name, _ in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize(("name", "config"), CORPUS, ids=[name for name, _ in CORPUS])
def test_llmperf_agrees_with_deepspeed(name: str, config: dict[str, Any], tmp_path: Path, deepspeed_config) -> None:
    real = _deepspeed_refuses(deepspeed_config, config)
    ours = _llmperf_refuses(tmp_path, config)
    if name in DIFFERENT:
        assert (ours is None) != (real is None), f"{name} agrees now: DeepSpeed: {real}; llmperf: {ours}"
        return
    assert (ours is None) == (real is None), f"DeepSpeed: {real}\nllmperf: {ours}"
