"""tune's table keeps its columns when a row does not fit: the '(no fit)' verdict sat inside the free-GiB column and
pushed that row's layout and changes right of everyone else's (the user's own row, the one read first)."""

from __future__ import annotations

import json
from pathlib import Path

from .helpers import run_cli


def test_a_row_that_does_not_fit_keeps_the_columns(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
                                                  "bf16": {"enabled": True}, "zero_optimization": {"stage": 0}}))
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--model", "llama2-7b", "--top", "3", "--",
                              "deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config", "ds.json"], capsys)
    assert code == 0, err
    lines = out.splitlines()
    header = next(ln for ln in lines if ln.lstrip().startswith("#"))
    rows = [ln for ln in lines if ln[:5] == "you  " or ln[:3].strip().isdigit() and ln[3:5] == "  "]
    you = rows[0]
    assert you.endswith("(your command)  (no fit)"), you  # Llama-2 7B at ZeRO-0 on 80 GB: 146 GiB
    column = header.index("layout")
    assert all(row[column:].startswith("tp") for row in rows), rows
