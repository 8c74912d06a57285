"""Robustness campaign 2: `predict --trace FILE` never destroys a file it did not write (a mistyped `--trace
ds_config.json` replaced the user's config with a trace); it replaces its own traces and empty files."""

from __future__ import annotations

import json

import pytest

from llmperf_hook.cli import main

SMALL = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "4", "--hidden-size", "1024",
         "--num-attention-heads", "16", "--seq-length", "1024", "--max-position-embeddings", "1024",
         "--micro-batch-size", "1", "--global-batch-size", "8", "--vocab-size", "32000"]


def _predict(capsys, trace) -> tuple[int, str]:
    with pytest.raises(SystemExit) as ex:
        main(["predict", "--cluster", "dgx-a100", "--trace", str(trace), "--", *SMALL])
    return int(ex.value.code or 0), capsys.readouterr().err


def test_user_file_is_not_overwritten(tmp_path, capsys):
    mine = tmp_path / "ds_config.json"
    mine.write_text('{"train_batch_size": 8}')
    code, err = _predict(capsys, mine)
    assert code == 2 and "not a trace llmperf wrote" in err and str(mine) in err
    assert mine.read_text() == '{"train_batch_size": 8}'


def test_own_trace_and_empty_file_are_replaced(tmp_path, capsys):
    trace = tmp_path / "step.json"
    assert _predict(capsys, trace)[0] == 0
    doc = json.loads(trace.read_text())
    assert doc["otherData"]["generator"] == "llmperf" and doc["traceEvents"]
    assert _predict(capsys, trace)[0] == 0  # a second run replaces its own trace
    empty = tmp_path / "empty.json"
    empty.write_text("")
    assert _predict(capsys, empty)[0] == 0 and json.loads(empty.read_text())["traceEvents"]
