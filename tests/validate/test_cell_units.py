"""Units written in numeric cells: the column's own unit is read ("3.2 s", "50 GB/s"), any other unit is refused with
the value converted into the column's unit, never read as if it were the column's unit ("3000 ms" was 3000 seconds,
"400 Gb/s" was 400 GB/s per GPU, 8x the bandwidth). Found by the H99 audit of `llmperf validate` as a user meets it."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.validate.measured_run import number_token, parse_float, parse_int
from llmperf_hook.validate.runs_csv import build_runs_or_failures, read_runs_csv


@pytest.mark.parametrize(("column", "cell", "expected"), [
    ("iteration_time_s", "3.2 s", 3.2), ("iteration_time_s", "3.2s", 3.2), ("iteration_time_s", "3.2 sec", 3.2),
    ("iteration_time_s", "3.2 seconds (median of 50 steps)", 3.2), ("iteration_time_s", "3.2 (median)", 3.2),
    ("inter_node_bandwidth_GBps", "50 GB/s", 50.0), ("inter_node_bandwidth_GBps", "50GBps", 50.0),
    ("iteration_time_s", "1e1", 10.0), ("iteration_time_s", "3.2 s/iter", 3.2), ("iteration_time_s", "3.2 s/step", 3.2),
    ("iteration_time_s", "3.2 sec per iteration (avg)", 3.2), ("inter_node_bandwidth_GBps", "50 GB/s per GPU", 50.0),
])
def test_the_columns_own_unit_is_read(column: str, cell: str, expected: float) -> None:
    assert parse_float({column: cell}, column, "row r1") == expected


@pytest.mark.parametrize(("column", "cell", "says"), [
    ("iteration_time_s", "3000 ms", r"write 3\b"),
    ("iteration_time_s", "2 min", r"write 120\b"),
    ("iteration_time_s", "1500us", r"write 0\.0015\b"),
    ("inter_node_bandwidth_GBps", "400 Gb/s", r"write 50\b"),
    ("inter_node_bandwidth_GBps", "200Gbps", r"write 25\b"),
    ("iteration_time_s", "2400 ms/iter", r"write 2\.4\b"),
    ("iteration_time_s", "1 hour", r"write 3600\b"),
    ("inter_node_bandwidth_GBps", "46.5661 GiB/s", r"write 50\b"),
    ("inter_node_bandwidth_GBps", "400 GB/s per node", r"per node.*write 400 divided by the GPUs per node \(50 on"),
    ("inter_node_bandwidth_GBps", "3.2 Tb/s per node", r"per node.*write 400 divided by the GPUs per node"),
])
def test_another_unit_is_refused_with_the_converted_value(column: str, cell: str, says: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_float({column: cell}, column, "row r1")
    message = str(caught.value)
    assert "row r1" in message and f"`{column}`" in message and cell in message
    assert "seconds" in message or "GB/s" in message
    assert pytest.importorskip("re").search(says, message), message


@pytest.mark.parametrize(("column", "cell"), [("iteration_time_s", "3 hrz"), ("inter_node_bandwidth_GBps", "50 gb/s")])
def test_an_unknown_unit_is_refused_without_reading_the_number_as_the_columns_unit(column: str, cell: str) -> None:
    """'write the number alone' would turn '50 gb/s' (bits or bytes?) into 50 GB/s: the message asks to convert."""
    with pytest.raises(UsageError, match=r"not a unit llmperf knows.*write the value in (seconds|GB/s per GPU)"):
        parse_float({column: cell}, column, "row r1")


@pytest.mark.parametrize(("column", "cell"), [("iteration_time_s", "0.2 s per micro-batch"),
                                              ("inter_node_bandwidth_GBps", "25 GB/s/link")])
def test_a_value_per_something_else_is_refused(column: str, cell: str) -> None:
    """The old advice put 'per micro-batch' in a caveat, and the caveat read the micro-batch's time as the step's."""
    with pytest.raises(UsageError, match=r"the value is per (micro-batch|link); the column is in .* convert it"):
        parse_float({column: cell}, column, "row r1")


@pytest.mark.parametrize(("column", "cell"), [("num_gpus", "80GB"), ("gpus_per_node", "8 GPUs"),
                                              ("global_batch_size", "1024 sequences"), ("tp", "8x")])
def test_a_count_takes_no_unit(column: str, cell: str) -> None:
    with pytest.raises(UsageError, match=rf"row r1: column `{column}` = '{cell}'.*number alone"):
        parse_int({column: cell}, column, "row r1")


def test_caveats_after_a_number_still_read() -> None:
    assert number_token("50257 (vTrain default; not in csv)", "vocab_size", "row 1") == "50257"
    assert number_token("1,024 (approx.)", "num_gpus", "row 1") == "1024"
    assert number_token("8; per paper", "tp", "row 1") == "8"


def test_a_row_with_a_foreign_unit_fails_on_its_row_and_the_rest_is_scored(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    path.write_text("row_id,num_layers,hidden_size,seq_length,global_batch_size,tp,pp,num_gpus,cluster,"
                    "iteration_time_s\nfast,32,4096,2048,256,2,1,16,dgx-h100,3000 ms\nok,32,4096,2048,256,2,1,16,"
                    "dgx-h100,3.0 s\n")
    runs = build_runs_or_failures(read_runs_csv(path))
    assert runs[0].error.startswith("row fast: column `iteration_time_s` = '3000 ms'")  # type: ignore[union-attr]
    assert runs[1].iteration_time_s == 3.0  # type: ignore[union-attr]


@pytest.mark.parametrize(("name", "refused"), [("inter_node_bandwidth_Gbps", True), ("intra_node_bandwidth_Gbps", True),
                                               ("inter_node_bandwidth_gbps", False), ("INTER_NODE_BANDWIDTH_GBPS", False)])
def test_a_bandwidth_column_named_in_bits_is_refused(tmp_path: Path, name: str, refused: bool) -> None:
    """Column names are read in any letter case, but `_Gbps` says bits: its 200 was read as 200 GB/s per GPU (8x)."""
    path = tmp_path / "runs.csv"
    path.write_text("num_layers,hidden_size,seq_length,global_batch_size,tp,pp,num_gpus,gpu_type,gpus_per_node,"
                    f"{name},iteration_time_s\n32,4096,2048,256,2,1,16,A100-SXM4-80GB,8,200,3.0\n")
    if refused:
        with pytest.raises(UsageError, match=rf"column `{name}` is in Gb/s \(bits\).*Divide its cells by 8"):
            read_runs_csv(path)
    else:
        assert build_runs_or_failures(read_runs_csv(path))[0].inter_node_bandwidth_GBps == 200.0  # type: ignore[union-attr]


@pytest.mark.parametrize(("cell", "says"), [("2k", r"alone \(2000\)"), ("1.5M", r"alone \(1500000\)"),
                                            ("4 K (per paper)", r"alone \(4000\)"), ("32 GPUs", r"alone \(32\)")])
def test_a_count_with_a_multiplier_is_refused_with_its_full_value(cell: str, says: str) -> None:
    """'2k' global batch was refused with the advice 'write the number alone (2)': 1000x too small."""
    with pytest.raises(UsageError, match=says):
        parse_int({"global_batch_size": cell}, "global_batch_size", "row r1")
