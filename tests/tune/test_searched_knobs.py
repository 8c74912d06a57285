"""tune says which knobs it searched (with the values tried) and which it kept as the command has them: plain
DeepSpeed searches micro-batch and ZeRO stage only (TP / PP / CP live in the model code), Megatron-LM every layout
knob but the ZeRO stage, Megatron-DeepSpeed keeps CP, virtual stages and the distributed optimizer."""

from __future__ import annotations

import json
from pathlib import Path

from .helpers import run_cli
from .test_search_narrowing import MEGATRON


def _knobs(args: list[str], capsys) -> tuple[dict, str]:
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--format", "json", *args], capsys)
    assert code == 0, err
    return json.loads(out)["knobs"], err


def test_megatron_searches_every_layout_knob_and_keeps_zero(capsys) -> None:
    knobs, _ = _knobs(["--", *MEGATRON], capsys)
    searched, kept = knobs["searched"], knobs["kept"]
    assert {"micro_batch_size", "tp", "pp", "vpp", "cp", "sequence_parallel", "recompute",
            "distributed_optimizer"} <= set(searched), searched
    assert kept == {"zero_stage": 0}
    assert set(searched["recompute"]) == {"none", "selective", "full", "block"}
    assert 16 in searched["pp"] and searched["tp"] == [1, 2, 4, 8]


def test_plain_deepspeed_searches_micro_batch_and_zero_only(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
                                                  "zero_optimization": {"stage": 1}, "bf16": {"enabled": True}}))
    knobs, _ = _knobs(["--model", "llama2-7b", "--", "deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config",
                       "ds.json"], capsys)
    assert set(knobs["searched"]) == {"micro_batch_size", "zero_stage"}
    assert knobs["searched"]["zero_stage"] == [0, 1, 2, 3]
    assert {"tp": 1, "pp": 1, "cp": 1, "recompute": "none"}.items() <= knobs["kept"].items()


def test_the_table_names_searched_and_kept_knobs(capsys) -> None:
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--", *MEGATRON], capsys)
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("searched:"))
    assert "TP 1, 2, 4, 8" in line and "kept as your command: ZeRO 0" in line
