"""deepspeed.checkpointing for Megatron-DeepSpeed: the ds_config's activation_checkpointing section never has an
effect (the flags override it, and only under --deepspeed-activation-checkpointing), the flags only with a checkpointed
layer; one warning each for what has no effect or is not priced (frameworks/ds_checkpointing.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from llmperf_hook.frameworks.deepspeed_config import parse_ds_config
from llmperf_hook.frameworks.explain_data import explain_json
from llmperf_hook.frameworks.training_config import TrainingConfig
from tests.frameworks.helpers import script

MEGATRON = ["--num-layers", "24", "--hidden-size", "2048", "--num-attention-heads", "16", "--seq-length", "2048",
            "--max-position-embeddings", "2048", "--vocab-size", "50257", "--micro-batch-size", "2",
            "--global-batch-size", "64", "--bf16", "--no-pipeline-parallel"]
SECTION = {"partition_activations": True, "cpu_checkpointing": True, "synchronize_checkpoint_boundary": True,
           "profile": True, "contiguous_memory_optimization": False, "number_checkpoints": None}


def _mds(tmp_path: Path, *flags: str, section: dict[str, Any] | None = None) -> TrainingConfig:
    raw: dict[str, Any] = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True}, "zero_optimization": {"stage": 1}}
    if section is not None:
        raw["activation_checkpointing"] = section
    (tmp_path / "ds.json").write_text(json.dumps(raw))
    return script(["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *MEGATRON, "--deepspeed", "--deepspeed_config",
                   str(tmp_path / "ds.json"), *flags])


def _about(cfg: TrainingConfig, *words: str) -> list[str]:
    return [w for w in cfg.warnings if any(word in w for word in words)]


def test_the_section_has_no_effect_and_says_so_once(tmp_path: Path) -> None:
    cfg = _mds(tmp_path, "--deepspeed-activation-checkpointing", "--checkpoint-activations", section=SECTION)
    assert not cfg.recompute.partition_activations and not cfg.recompute.checkpoint_in_cpu  # the flags (absent) win
    assert _about(cfg, "activation_checkpointing") == [
        f"{tmp_path / 'ds.json'} activation_checkpointing.partition_activations, cpu_checkpointing, "
        "synchronize_checkpoint_boundary, profile: no effect. Megatron-DeepSpeed configures deepspeed.checkpointing from "
        "its own flags (--partition-activations, --contigious-checkpointing, --checkpoint-in-cpu, "
        "--synchronize-each-layer, --profile-backward), which override every key of the section, and only under "
        "--deepspeed-activation-checkpointing (initialize.py setup_deepspeed_random_and_activation_checkpointing); set "
        "them with those flags"]


def test_a_section_at_deepspeeds_defaults_is_silent(tmp_path: Path) -> None:
    cfg = _mds(tmp_path, "--deepspeed-activation-checkpointing", "--checkpoint-activations",
               section={"partition_activations": False, "profile": 0, "number_checkpoints": None})
    assert _about(cfg, "activation_checkpointing", "checkpoint") == []


def test_unpriced_flags_warn_once_each_when_they_act(tmp_path: Path) -> None:
    cfg = _mds(tmp_path, "--deepspeed-activation-checkpointing", "--checkpoint-activations", "--synchronize-each-layer",
               "--profile-backward", "--contigious-checkpointing", "--partition-activations")
    assert cfg.recompute.partition_activations  # priced
    assert [w.split(":")[0] for w in _about(cfg, "--synchronize-each-layer", "--profile-backward",
                                             "--contigious-checkpointing", "--partition-activations")] == [
        "--contigious-checkpointing", "--synchronize-each-layer", "--profile-backward"]


def test_flags_without_the_switch_or_a_checkpointed_layer_have_no_effect(tmp_path: Path) -> None:
    off = _mds(tmp_path, "--checkpoint-activations", "--synchronize-each-layer", "--partition-activations")
    assert not off.recompute.partition_activations
    assert _about(off, "--synchronize-each-layer") == [
        "--partition-activations, --synchronize-each-layer: no effect without --deepspeed and "
        "--deepspeed-activation-checkpointing (Megatron-DeepSpeed passes them to deepspeed.checkpointing.configure only "
        "under both)"]
    idle = _mds(tmp_path, "--deepspeed-activation-checkpointing", "--profile-backward")
    assert _about(idle, "--profile-backward") == ["--profile-backward: no effect, no layer is checkpointed (give "
                                                  "--checkpoint-activations or --recompute-granularity)"]


def test_recompute_granularity_full_runs_deepspeed_checkpointing(tmp_path: Path) -> None:
    # transformer.py: --recompute-granularity full goes through _checkpointed_forward, which takes DeepSpeed's
    # checkpoint under --deepspeed-activation-checkpointing: --partition-activations applies as with --checkpoint-activations
    cfg = _mds(tmp_path, "--deepspeed-activation-checkpointing", "--recompute-granularity", "full",
               "--recompute-method", "uniform", "--recompute-num-layers", "1", "--partition-activations")
    assert cfg.recompute.granularity == "full" and cfg.recompute.partition_activations
    assert _about(cfg, "--partition-activations") == []


def test_the_flags_are_recorded_at_every_granularity_and_explain_says_what_they_act_on(tmp_path: Path) -> None:
    """configure() gets them whatever the recompute (initialize.py:266): recorded, so a tuned command moved to full
    recompute is priced with them; selective's CoreAttention checkpoint goes through deepspeed.checkpointing.checkpoint
    too (random.py:326), priced as Megatron's own; with no recompute nothing is checkpointed."""
    flags = ("--deepspeed-activation-checkpointing", "--partition-activations", "--checkpoint-in-cpu")
    selective = _mds(tmp_path, *flags, "--recompute-granularity", "selective")
    idle = _mds(tmp_path, *flags)
    for cfg in (selective, idle):
        assert cfg.recompute.partition_activations and cfg.recompute.checkpoint_in_cpu
        data = explain_json(cfg)
        assert data["partition_activations"] is True and data["checkpoint_in_cpu"] is True
        assert data["sources"]["partition_activations"].startswith("argv")
    assert _about(selective, "--partition-activations") == [
        "--partition-activations: acts on selective recompute's attention checkpoint (its Q, K, V inputs), which is "
        "priced as Megatron's own (kept whole on the GPU); the flag is priced only for full recompute's layer "
        "checkpoints"]
    assert _about(idle, "--partition-activations") == [
        "--partition-activations, --checkpoint-in-cpu: no effect, no layer is checkpointed (give "
        "--checkpoint-activations or --recompute-granularity)"]


def test_plain_deepspeed_keeps_the_section_warnings_read_raw() -> None:
    # get_scalar_param reads the section raw: the string "false" is true in `if SYNCHRONIZE:`
    ds = parse_ds_config({"train_batch_size": 8, "activation_checkpointing": {
        "synchronize_checkpoint_boundary": "false", "profile": False, "partition_activations": 1}}, "ds.json")
    assert ds.checkpointing_keys == ("partition_activations", "synchronize_checkpoint_boundary")
    assert not any("activation_checkpointing" in w for w in ds.warnings)
    assert [w.split(":")[0] for w in ds.checkpointing_warnings[1:]] == [
        "ds.json activation_checkpointing.partition_activations = 1",
        "ds.json activation_checkpointing.synchronize_checkpoint_boundary = 'false'"]
