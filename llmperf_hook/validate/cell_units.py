"""Units written after the number of a numeric validation-CSV cell.

A column's unit is in its name (`iteration_time_s` in seconds, `*_bandwidth_GBps` in GB/s = 1e9 bytes/s per GPU,
one direction); every other numeric column is a count. A cell may repeat its column's own unit ("3.2 s", "50 GB/s")
and may carry a caveat after the number in parentheses or after ';' or ',' ("50257 (vTrain default)"). Any other
word after the number is refused, with the value converted where the unit is known: read as the column's unit,
"3000 ms" was 3000 seconds and "400 Gb/s" 400 GB/s per GPU (8x the bandwidth), silently.
"""

from __future__ import annotations

import re

from llmperf_hook.errors import UsageError

SECONDS_PER_UNIT: dict[str, float] = {
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "ms": 1e-3, "msec": 1e-3, "millisecond": 1e-3, "milliseconds": 1e-3,
    "us": 1e-6, "µs": 1e-6, "usec": 1e-6, "microseconds": 1e-6,
    "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0, "h": 3600.0, "hr": 3600.0, "hours": 3600.0,
}
"""Time units, lower case, in seconds."""

GBPS_PER_UNIT: dict[str, float] = {
    "GB/s": 1.0, "GBps": 1.0, "GByte/s": 1.0, "MB/s": 1e-3, "MBps": 1e-3, "TB/s": 1e3, "TBps": 1e3,
    "Gb/s": 1 / 8, "Gbps": 1 / 8, "Gbit/s": 1 / 8, "Mb/s": 1e-3 / 8, "Mbps": 1e-3 / 8, "Tb/s": 1e3 / 8,
    "Tbps": 1e3 / 8,
}
"""Bandwidth units, case as written (B = byte, b = bit: 8 bits per byte), in GB/s."""

COLUMN_UNITS: dict[str, tuple[str, dict[str, float], bool]] = {
    "iteration_time_s": ("seconds", SECONDS_PER_UNIT, False),
    "inter_node_bandwidth_GBps": ("GB/s per GPU", GBPS_PER_UNIT, True),
    "intra_node_bandwidth_GBps": ("GB/s per GPU", GBPS_PER_UNIT, True),
}
"""column -> (its unit in words, units a cell may name with their factor to it, unit names case-sensitive)."""

NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
"""A decimal number with an optional exponent, as float() reads it (no separators: `number_token` strips them)."""

UNIT_WORD = re.compile(r"\s*([A-Za-zµ]+(?:/s)?)")
CAVEAT_START = ("(", ";", ",")


def check_unit(number: str, rest: str, cell: str, column: str, where: str) -> None:
    """Refuse a word after the number unless it is the column's own unit (optionally followed by a caveat)."""
    text = rest.strip()
    if not text or text.startswith(CAVEAT_START):
        return
    word = UNIT_WORD.match(rest)
    unit = word.group(1) if word else ""
    after = rest[word.end():].strip() if word else text
    known = COLUMN_UNITS.get(column)
    if known is None:
        raise UsageError(f"{where}: column `{column}` = {cell!r} is a count: write the number alone ({number}); a "
                         "caveat may follow in parentheses, e.g. '8 (per paper)'.")
    words, factors, case_sensitive = known
    factor = factors.get(unit if case_sensitive else unit.lower())
    if factor == 1.0 and (not after or after.startswith(CAVEAT_START)):
        return
    if factor == 1.0:
        raise UsageError(f"{where}: column `{column}` = {cell!r}: {after!r} follows the unit; a caveat goes in "
                         f"parentheses, e.g. '{number} ({after})'.")
    if factor is None:
        raise UsageError(f"{where}: column `{column}` = {cell!r}: {text!r} after the number is not a unit of "
                         f"{words}. The column is in {words}: write the number alone, e.g. {number}.")
    converted = f"{float(number) * factor:.6g}"
    raise UsageError(f"{where}: column `{column}` = {cell!r} is in {unit}; the column is in {words}: "
                     f"write {converted}.")
