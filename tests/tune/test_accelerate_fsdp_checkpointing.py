"""accelerate's FSDP plugin activation checkpointing as a tuned knob (tune/accelerate_fsdp_apply.py): searched on and
off like the Trainer's --fsdp_config key; --apply turns it off on accelerate's command line or in a copy of its config
file (never the user's file), and predict prices the applied command as tune listed it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.acceptance.cli import run_cli

TRAINER = ["train.py", "--model_name_or_path", "meta-llama/Llama-2-7b-hf", "--per_device_train_batch_size", "2",
           "--gradient_accumulation_steps", "4", "--bf16", "--output_dir", "out"]
"""A Llama-2-7B fine-tune with the Hugging Face Trainer (no ds_config)."""


@pytest.fixture
def home(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / ".llmperf"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no default accelerate config of the machine's
    (tmp_path / "train.py").write_text("from transformers import Trainer, TrainingArguments\n")
    return tmp_path


def _tune(capsys, command: list[str]) -> dict:
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--model", "llama2-7b", "--top", "3",
                              "--apply", "--dry-run", "--", *command], capsys)
    assert code == 0, err
    return json.loads(out)


def _predicted(capsys, argv: list[str]) -> dict:
    code, out, err = run_cli(["predict", "--format", "json", "--cluster", "dgx-h100", "--model", "llama2-7b", "--",
                              *argv], capsys)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("key", ["fsdp_activation_checkpointing", "activation_checkpointing"])
def test_the_config_files_checkpointing_is_switched_in_a_copy(home: Path, capsys, key: str) -> None:
    text = ("compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nmixed_precision: bf16\nnum_processes: 8\n"
            f"fsdp_config:\n  {key}: true\n  fsdp_sharding_strategy: FULL_SHARD\n")
    (home / "acc.yaml").write_text(text)
    data = _tune(capsys, ["accelerate", "launch", "--config_file", "acc.yaml", *TRAINER])
    assert set(data["knobs"]["searched"]["recompute"]) == {"none", "full"}, data["knobs"]  # was kept at full
    best, applied = data["top"][0], data["applied"]["argv"]
    assert (best["recompute"], data["baseline"]["recompute"]) == ("none", "full")
    assert applied[applied.index("--config_file") + 1] == "acc.llmperf-tuned.yaml", applied
    assert not any("checkpointing" in w for w in applied), applied  # no Trainer switch, no launcher flag
    assert (home / "acc.yaml").read_text() == text
    assert yaml.safe_load((home / "acc.llmperf-tuned.yaml").read_text())["fsdp_config"][key] is False
    priced = _predicted(capsys, applied)
    assert priced["config"]["recompute"] == "none"
    assert priced["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-5)
    again = _tune(capsys, ["accelerate", "launch", "--config_file", "acc.yaml", *TRAINER])  # the copy is reused
    assert again["applied"]["argv"] == applied and not again["applied"]["new_files"]


def test_the_command_lines_checkpointing_is_switched_in_place(home: Path, capsys) -> None:
    command = ["accelerate", "launch", "--use_fsdp", "--num_processes", "8", "--mixed_precision", "bf16",
               "--fsdp_activation_checkpointing", "true", *TRAINER]
    data = _tune(capsys, command)
    applied = data["applied"]["argv"]
    assert data["top"][0]["recompute"] == "none" and not data["applied"]["new_files"]
    assert applied[applied.index("--fsdp_activation_checkpointing") + 1] == "false", applied
    assert _predicted(capsys, applied)["config"]["recompute"] == "none"


def test_a_json_config_gets_a_copy_accelerate_reads(home: Path, capsys) -> None:
    """accelerate reads a --config_file ending in .json with json.load, any other with yaml (commands/config/
    config_args.py load_config_from_file): the copy is YAML under a .yaml name (was: YAML text in
    acc.llmperf-tuned.json, and tune's own diff of it an internal JSONDecodeError), diffed against the user's file."""
    config = {"compute_environment": "LOCAL_MACHINE", "distributed_type": "FSDP", "mixed_precision": "bf16",
              "num_processes": 8, "fsdp_config": {"fsdp_activation_checkpointing": True}}
    (home / "acc.json").write_text(json.dumps(config))
    (home / "acc.yaml").write_text("distributed_type: NO\n")  # another file of that stem: neither read nor written
    data = _tune(capsys, ["accelerate", "launch", "--config_file", "acc.json", *TRAINER])
    applied = data["applied"]["argv"]
    assert applied[applied.index("--config_file") + 1] == "acc.llmperf-tuned.yaml", applied
    copy = yaml.safe_load((home / "acc.llmperf-tuned.yaml").read_text())
    assert copy == {**config, "fsdp_config": {"fsdp_activation_checkpointing": False}}
    assert json.loads((home / "acc.json").read_text()) == config
    assert [(c["key"], c["old"], c["new"]) for c in data["top"][0]["changes"] if c["where"] != "argv"] == [
        ("fsdp_config.fsdp_activation_checkpointing", "true", "false")]
    assert _predicted(capsys, applied)["config"]["recompute"] == "none"


def test_a_search_files_recompute_is_read_as_the_plugins_switch(home: Path, capsys) -> None:
    """recompute of a --search file is searched for a plugin job (none / full: the plugin's switch), so it is not
    warned as ignored (it was: 'recompute is not searched for a torch command'), and the Megatron-only modes are."""
    (home / "s.yaml").write_text("recompute: [none, selective, full]\nmicro_batch_size: [2]\n")
    command = ["accelerate", "launch", "--use_fsdp", "--num_processes", "8", "--mixed_precision", "bf16",
               "--fsdp_activation_checkpointing", "true", *TRAINER]
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--model", "llama2-7b",
                              "--search", "s.yaml", "--", *command], capsys)
    assert code == 0, err
    assert set(json.loads(out)["knobs"]["searched"]["recompute"]) == {"none", "full"}
    assert "recompute is not searched" not in err, err
    assert "recompute selective is Megatron's; accelerate's FSDP activation checkpointing" in err, err


def test_a_plugin_launch_line_inside_a_batch_script_is_kept(home: Path, capsys) -> None:
    """`bash train.sh` whose launch line is the accelerate launch: --apply rewrites only the script's own words, so
    the plugin's checkpointing is kept, with a warning (was: exit 2 'no accelerate launch ... the plugin took it from
    the environment', with or without --apply)."""
    (home / "acc.yaml").write_text("distributed_type: FSDP\nmixed_precision: bf16\nnum_processes: 8\n"
                                   "fsdp_config:\n  fsdp_activation_checkpointing: true\n")
    (home / "train.sh").write_text("#!/bin/bash\naccelerate launch --config_file acc.yaml " + " ".join(TRAINER) + "\n")
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--model", "llama2-7b", "--top",
                              "3", "--", "bash", "train.sh"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["knobs"]["searched"].get("recompute") is None and {r["recompute"] for r in data["top"]} == {"full"}
    assert "accelerate's FSDP activation checkpointing is not searched" in err, err
