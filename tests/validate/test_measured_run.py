"""Cell parsing of validation CSVs: the value before the transcriber's caveat, documented fill-ins."""

from __future__ import annotations

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.validate.measured_run import (
    leading_token,
    parse_extra_args,
    parse_framework,
    parse_precision,
    parse_recompute,
    parse_switch,
    parse_zero,
)


@pytest.mark.parametrize("cell, token", [
    ("50257 (vTrain default; not in csv)", "50257"),
    ("full (use_checkpoint=true in all vTrain validation configs)", "full"),
    ("likely (tp-comm-overlap requires SP)", "likely"),
    ("  8 ", "8"),
    ("", ""),
])
def test_leading_token(cell: str, token: str) -> None:
    assert leading_token(cell) == token


@pytest.mark.parametrize("cell, expected", [
    ("mixed precision (fp16 per paper; not re-verified in stored sources)", "fp16"),
    ("fp16 (per Calculon validation config 'float16')", "fp16"),
    ("bf16 (MFU vs 989 TFLOP/s dense BF16)", "bf16"),
    ("not stated (Megatron-DeepSpeed; likely fp16)", "fp16"),
    ("float16", "fp16"),
    ("fp8 hybrid", "fp8"),
])
def test_precision_reads_the_first_dtype(cell: str, expected: str) -> None:
    assert parse_precision(cell) == (expected, None)


def test_precision_without_dtype_is_an_assumption() -> None:
    precision, note = parse_precision("mixed")
    assert precision == "bf16" and note and "bf16 assumed" in note


@pytest.mark.parametrize("cell, expected", [
    ("ZeRO-3 (DeepSpeed)", (3, False)),
    ("zero1", (1, False)),
    ("ZeRO stage 2", (2, False)),
    ("distributed optimizer (overlap-param-gather implies it)", (0, True)),
    ("", (0, False)),
    ("none", (0, False)),
])
def test_zero(cell: str, expected: tuple[int, bool]) -> None:
    assert parse_zero(cell) == expected


def test_recompute_values_and_error() -> None:
    assert parse_recompute("full (use_checkpoint=true)", "row 1") == "full"
    assert parse_recompute("selective", "row 1") == "selective"
    assert parse_recompute("", "row 1") == "none"
    with pytest.raises(UsageError, match="row 7.*recompute.*'sometimes'"):
        parse_recompute("sometimes", "row 7")


@pytest.mark.parametrize("cell, family", [
    ("Megatron-DeepSpeed (microsoft)", "megatron-deepspeed"),
    ("DeepSpeed ZeRO-3", "deepspeed"),
    ("Megatron-Core r0.8.0", "megatron-core"),
    ("Megatron-LM (2021)", "megatron"),
    ("", "megatron"),
])
def test_framework_family(cell: str, family: str) -> None:
    assert parse_framework(cell) == family


def test_yes_values() -> None:
    def switch(cell: str) -> bool:
        return parse_switch({"sequence_parallel": cell}, "sequence_parallel", "row 1")

    assert switch("likely (tp-comm-overlap requires SP)") and switch("yes") and switch("TRUE")
    assert not switch("no") and not switch("") and not switch("off (per paper)")


def test_extra_args_from_column_or_notes() -> None:
    notes = "aggregate 19.6 PFLOP/s; flags: --overlap-grad-reduce --tp-comm-overlap; throughput is end-to-end"
    assert parse_extra_args({"notes": notes}) == ("--overlap-grad-reduce", "--tp-comm-overlap")
    assert parse_extra_args({"extra_args": "--foo 3", "notes": notes}) == ("--foo", "3")
    assert parse_extra_args({"notes": "nothing here"}) == ()
