"""`--flag="a value with blanks"` arrives as one argv word `--flag=a value with blanks`: kept whole, not split like
an array element joined into one word (`"--split '99,1,0'"`), so a ds_config path with a space is read. Found by
the issue-5 acceptance audit (a predict --batch line `--deepspeed_config="dir ü/ds конфиг.json"` read the config
'dir')."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.launch.argv_words import split_joined_words


@pytest.mark.parametrize(("words", "expected"), [
    (["--deepspeed_config=my dir/ds.json"], ["--deepspeed_config=my dir/ds.json"]),
    (["--data-path=1.0 /a 1.0 /b"], ["--data-path=1.0 /a 1.0 /b"]),
    (["--split '99,1,0'"], ["--split", "99,1,0"]),
    (["--lr=1e-4 --bf16"], ["--lr=1e-4", "--bf16"]),
    ([" \n--wait=60 --kill-on-bad-exit=1"], ["--wait=60", "--kill-on-bad-exit=1"]),
    (["  --x=1 2"], ["--x=1", "2"]),  # blanks before the flag: a variable's words, not a quoted value
    (["--num-layers=24 $EXTRA"], ["--num-layers=24", "$EXTRA"]),  # an unexpanded variable after the value
])
def test_quoted_values_stay_whole_joined_flags_split(words: list[str], expected: list[str]) -> None:
    assert split_joined_words(words) == expected


def test_a_ds_config_path_with_blanks_given_with_equals(tmp_path: Path, monkeypatch) -> None:
    from llmperf_hook import api

    folder = tmp_path / "dir ü"
    folder.mkdir()
    (folder / "ds конфиг.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 2,
                                                       "zero_optimization": {"stage": 3}}))
    monkeypatch.chdir(tmp_path)
    argv = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config=dir ü/ds конфиг.json"]
    overrides = api.JobOverrides(model="llama2-7b")
    _, config, _, _ = api.resolve_command(argv, {}, cluster="dgx-a100", overrides=overrides)
    assert config.optimizer.zero_stage == 3
