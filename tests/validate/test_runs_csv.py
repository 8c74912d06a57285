"""Reading validation CSVs: required columns, consistency checks, fill-in rules, and dev.csv itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.validate.runs_csv import build_measured_run, build_measured_runs, read_runs_csv
from .validate_helpers import BASE_ROW, DEV_CSV, write_csv


def test_missing_columns_are_named(tmp_path: Path) -> None:
    row = {k: v for k, v in BASE_ROW.items() if k not in ("tp", "iteration_time_s", "gpu_type")}
    path = write_csv(tmp_path / "runs.csv", [row])
    with pytest.raises(UsageError) as info:
        read_runs_csv(path)
    message = str(info.value)
    assert "tp" in message and "iteration_time_s" in message and "gpu_type + gpus_per_node" in message


def test_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        read_runs_csv(tmp_path / "nope.csv")


def test_a_cluster_column_is_enough(tmp_path: Path) -> None:
    row = {k: v for k, v in BASE_ROW.items() if k not in ("gpu_type", "gpus_per_node")}
    row["cluster"] = "dgx-a100"
    runs = build_measured_runs(read_runs_csv(write_csv(tmp_path / "runs.csv", [row])))
    assert runs[0].cluster == "dgx-a100"


def test_excel_byte_order_mark_is_not_part_of_the_first_column(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "runs.csv", [BASE_ROW])
    path = Path(path)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())  # Excel's "CSV UTF-8" starts with a BOM
    rows = read_runs_csv(path)
    assert list(rows[0])[0] == next(iter(BASE_ROW))


def test_row_values() -> None:
    run = build_measured_run(BASE_ROW, 1)
    assert (run.tp, run.pp, run.dp, run.num_gpus, run.micro_batch_size) == (8, 1, 2, 16, 4)
    assert (run.recompute, run.precision, run.framework) == ("full", "fp16", "megatron")
    assert run.iteration_time_s == 2.0 and run.assumptions == ()


def test_inconsistent_layout_is_rejected() -> None:
    with pytest.raises(UsageError, match=r"tp\*pp\*cp\*dp = 8\*1\*1\*4 = 32 but num_gpus is 16"):
        build_measured_run({**BASE_ROW, "dp": "4"}, 1)


def test_blank_dp_is_derived() -> None:
    assert build_measured_run({**BASE_ROW, "dp": ""}, 1).dp == 2


def test_blank_cells_are_filled_and_recorded() -> None:
    run = build_measured_run({**BASE_ROW, "num_attention_heads": "", "micro_batch_size": "", "row_id": ""}, 5)
    assert run.row_id == "5"
    assert run.num_attention_heads == 6144 // 128 and run.micro_batch_size == 1
    assert any("num_attention_heads blank" in a for a in run.assumptions)
    assert any("micro_batch_size blank" in a for a in run.assumptions)


def test_blank_required_value_is_an_error() -> None:
    with pytest.raises(UsageError, match="row 1: column `seq_length` is blank"):
        build_measured_run({**BASE_ROW, "seq_length": ""}, 1)


def test_bad_measurement_is_an_error() -> None:
    with pytest.raises(UsageError, match="iteration_time_s"):
        build_measured_run({**BASE_ROW, "iteration_time_s": "0"}, 1)


@pytest.mark.skipif(not DEV_CSV.exists(), reason="../shared/validation/dev.csv not present")
def test_every_dev_row_parses() -> None:
    runs = build_measured_runs(read_runs_csv(DEV_CSV))
    assert len(runs) == 835
    by_source = {r.source_id for r in runs}
    assert by_source == {"S01", "S02", "S03", "S04", "S23", "S24"}
    for run in runs:
        assert run.tp * run.pp * run.cp * run.dp == run.num_gpus
    vtrain = [r for r in runs if r.source_id in ("S23", "S24")]
    assert all(r.vocab_size == 50257 and r.recompute == "full" and r.precision == "fp16" for r in vtrain)
    assert all(r.framework == "megatron-deepspeed" for r in vtrain)
    h100 = [r for r in runs if r.source_id == "S04"]
    assert all(r.precision == "bf16" and r.distributed_optimizer and "--overlap-grad-reduce" in r.extra_args
               for r in h100)


def test_cluster_yaml_beside_the_csv_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my-cluster.yaml").write_text("name: mine\n")
    row = {k: v for k, v in BASE_ROW.items() if k not in ("gpu_type", "gpus_per_node")}
    path = write_csv(tmp_path / "runs.csv", [{**row, "cluster": "my-cluster.yaml"}])
    monkeypatch.chdir("/")
    runs = build_measured_runs(read_runs_csv(path), base_dir=tmp_path)
    assert runs[0].cluster == str(tmp_path / "my-cluster.yaml")
    assert build_measured_runs(read_runs_csv(path))[0].cluster == "my-cluster.yaml"


def test_cluster_yaml_beside_the_csv_wins_over_one_in_the_working_directory(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "my-cluster.yaml").write_text("name: beside\n")
    (tmp_path / "my-cluster.yaml").write_text("name: cwd\n")
    row = {k: v for k, v in BASE_ROW.items() if k not in ("gpu_type", "gpus_per_node")}
    path = write_csv(tmp_path / "data" / "runs.csv", [{**row, "cluster": "my-cluster.yaml"}])
    monkeypatch.chdir(tmp_path)
    runs = build_measured_runs(read_runs_csv(path), base_dir=path.parent)
    assert runs[0].cluster == str(tmp_path / "data" / "my-cluster.yaml")
