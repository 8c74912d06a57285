"""Values as DeepSpeed's pydantic config models read them: booleans, integers and floats in pydantic 2's lax mode.

DeepSpeed builds its config sections as pydantic models (deepspeed/runtime/config_utils.py DeepSpeedConfigModel),
so a ds_config value is accepted exactly when pydantic's lax mode converts it: "true" is a bool, "100_000" an int,
" 1e3 " a float, while "5e8" is no int and 1.5 no int. "auto" values are dropped before validation (DeepSpeedConfigModel
non-strict), so callers skip them (AUTO).
"""

from __future__ import annotations

import re
from typing import Any

from llmperf_hook.errors import ConfigError

AUTO = "auto"
"""The value DeepSpeedConfigModel drops before validation (the field keeps its default; a Trainer fills it)."""

# Strings pydantic's lax mode reads as booleans (DeepSpeed's config sections are pydantic models).
_BOOL_TEXT = {"true": True, "t": True, "yes": True, "y": True, "on": True, "1": True,
              "false": False, "f": False, "no": False, "n": False, "off": False, "0": False}


def ds_bool(value: Any, key: str, origin: str) -> bool:
    """A boolean as DeepSpeed's pydantic config models accept it: true/false, 0/1, or their usual spellings in any
    case (" true" with a space is refused, as pydantic 2 refuses it)."""
    if isinstance(value, bool) or (isinstance(value, (int, float)) and value in (0, 1)):
        return bool(value)
    if isinstance(value, str) and value.lower() in _BOOL_TEXT:
        return _BOOL_TEXT[value.lower()]
    raise ConfigError(f"{origin} key {key} must be true or false, got {value!r} (DeepSpeed's config validation rejects it).")


_INT_TEXT = re.compile(r"[+-]?(?:0[0_]*(?<=0)|0[0_]*[1-9][0-9]*(?:_[0-9]+)*|[1-9][0-9]*(?:_[0-9]+)*)(?:\.0+)?", re.ASCII)
"""pydantic-core's str -> int (lax): ASCII digits only ("٣" and "１２" are refused), single underscores between
digits, and a ".0" tail with at least one zero ("100000." and ".0" are refused). Leading zeros are stripped first,
underscores among them included ("0__0" and "00__5" are read, "1__000" and "0_1__0" are not). Not modelled: the
sign pydantic-core also accepts right after leading zeros ("0-5" reads as -5), which nobody writes."""
_RUST_SPACE = "".join(chr(c) for c in (*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028,
                                       0x2029, 0x202F, 0x205F, 0x3000))
"""The blanks pydantic-core trims around a number (Rust's str::trim, Unicode White_Space). Python's str.strip also
trims U+001C..U+001F, which pydantic keeps and refuses."""
_I64_BOUND = 2.0 ** 63
"""pydantic-core converts a float to an int through i64: -2**63 and 2**63 and beyond are refused (1e20 too)."""


def pydantic_int(value: Any) -> int | None:
    """An integer exactly as pydantic 2's lax mode reads it (DeepSpeed 0.19.8's config models, pydantic 2.14 /
    pydantic-core 2.50): an int or bool; a finite float without a fraction inside the i64 range; a string of ASCII
    digits with an optional sign, single underscores between digits, a ".0..." tail and surrounding Unicode blanks
    ("100000", " 7 ", "100_000", "100000.0"). None for anything pydantic refuses ("1e5", 1.5, "auto", "1__000",
    "100000.", non-ASCII digits, 1e20). tests/frameworks/test_pydantic_int.py checks it against pydantic itself."""
    if isinstance(value, (bool, int)):
        return int(value)
    if isinstance(value, float):
        return int(value) if value.is_integer() and -_I64_BOUND < value < _I64_BOUND else None
    if isinstance(value, str) and _INT_TEXT.fullmatch(text := value.strip(_RUST_SPACE)):
        return int(text.split(".")[0].replace("_", ""))
    return None


def pydantic_float(value: Any) -> float | None:
    """A float as DeepSpeed's config models read one: a number or numeric text ("128", " 1e3 "), finite; not a
    bool, None or "dynamic" (checked against DeepSpeedFP16Config itself)."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value.strip(_RUST_SPACE) if isinstance(value, str) else value)
    except (TypeError, ValueError):
        return None
    return number if abs(number) != float("inf") and number == number else None
