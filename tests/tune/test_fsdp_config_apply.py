"""tune/fsdp_config_apply.py: the copy of --fsdp_config with FSDP's activation checkpointing off never takes the
place of a file the user has: a file already named fsdp.llmperf-tuned.json with other content is left as it is and
the copy goes to the next free name; the same copy written by an earlier run is reused, not written again."""

from __future__ import annotations

import json
from pathlib import Path

from llmperf_hook.tune.fsdp_config_apply import checkpointing_off, switchable_fsdp_config

TEXT = '{"fsdp_activation_checkpointing": true, "transformer_layer_cls_to_wrap": "LlamaDecoderLayer"}'


def _args(value: str) -> list[str]:
    return ["--fsdp", "full_shard auto_wrap", "--fsdp_config", value, "--bf16"]


def test_a_users_file_of_that_name_is_never_written(tmp_path: Path) -> None:
    (tmp_path / "fsdp.json").write_text(TEXT)
    mine = tmp_path / "fsdp.llmperf-tuned.json"
    mine.write_text('{"mine": 1}')
    ref = switchable_fsdp_config(_args("fsdp.json"), tmp_path)
    assert ref is not None
    notes: list[str] = []
    args, files = checkpointing_off(_args("fsdp.json"), ref, tmp_path, notes)
    assert args[args.index("--fsdp_config") + 1] == "fsdp.llmperf-tuned-2.json"
    assert list(files) == [str(tmp_path / "fsdp.llmperf-tuned-2.json")] and mine.read_text() == '{"mine": 1}'
    assert json.loads(files[str(tmp_path / "fsdp.llmperf-tuned-2.json")])["fsdp_activation_checkpointing"] is False
    (tmp_path / "fsdp.llmperf-tuned-2.json").write_text(files[str(tmp_path / "fsdp.llmperf-tuned-2.json")])
    again, nothing = checkpointing_off(_args("fsdp.json"), ref, tmp_path, notes)  # a second --apply
    assert again == args and nothing == {} and "reused" in notes[-1]


def test_without_fsdp_or_with_checkpointing_off_nothing_is_switched(tmp_path: Path) -> None:
    (tmp_path / "fsdp.json").write_text(TEXT)
    assert switchable_fsdp_config(["--fsdp_config", "fsdp.json"], tmp_path) is None  # the Trainer never reads it
    (tmp_path / "off.json").write_text('{"activation_checkpointing": false}')
    assert switchable_fsdp_config(_args("off.json"), tmp_path) is None
