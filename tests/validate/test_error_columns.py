"""A row the framework rejects is reported in the CSV's words: the flags validate wrote from the row's cells are
named by their columns ("tp 3 (column `tp`)", "Change column `tp`."), not by launch flags the user never wrote.
Flags the row's own extra_args give keep their names. Found by the H99 audit."""

from __future__ import annotations

from pathlib import Path

from llmperf_hook.resources import configs_dir
from llmperf_hook.validate.runner import validate_runs
from llmperf_hook.validate.runs_csv import build_runs_or_failures, read_runs_csv

HEADER = "row_id,num_layers,hidden_size,num_attention_heads,seq_length,micro_batch_size,global_batch_size,tp,pp,num_gpus,cluster,iteration_time_s,extra_args"


def _errors(tmp_path: Path, *rows: str) -> dict[str, str]:
    path = tmp_path / "runs.csv"
    path.write_text("\n".join([HEADER, *rows]) + "\n", encoding="utf-8")
    report = validate_runs(build_runs_or_failures(read_runs_csv(path)), clusters_dir=configs_dir() / "clusters")
    return {r.row_id: r.error for r in report.rows}


def test_framework_errors_name_the_rows_columns(tmp_path: Path) -> None:
    errors = _errors(tmp_path, "heads,32,4096,32,2048,1,256,3,1,24,dgx-h100,3.0,",
                     "batch,32,4096,32,2048,4,250,2,1,16,dgx-h100,3.0,")
    assert "(column `tp`)" in errors["heads"] and "(column `num_attention_heads`)" in errors["heads"]
    assert "Change column `tp`." in errors["heads"] and "--tensor-model-parallel-size" not in errors["heads"]
    assert "(column `global_batch_size`)" in errors["batch"] and "(column `micro_batch_size`)" in errors["batch"]
    assert "argv" not in errors["batch"]


def test_a_flag_from_extra_args_keeps_its_name(tmp_path: Path) -> None:
    errors = _errors(tmp_path, "ep,32,4096,32,2048,1,256,2,1,16,dgx-h100,3.0,--num-experts 6 --expert-model-parallel-size 4")
    assert "--expert-model-parallel-size" in errors["ep"] or "--num-experts" in errors["ep"], errors["ep"]
