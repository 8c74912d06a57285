"""Units written after the number of a numeric validation-CSV cell.

A column's unit is in its name (`iteration_time_s` in seconds per iteration, `*_bandwidth_GBps` in GB/s = 1e9
bytes/s per GPU, one direction); every other numeric column is a count. A cell may repeat its column's own unit,
with what the column is per ("3.2 s", "3.2 s/iter", "50 GB/s per GPU"), and may carry a caveat after the number in
parentheses or after ';' or ',' ("50257 (vTrain default)"). Any other word after the number is refused, with the
value converted where the unit is known: read as the column's unit, "3000 ms" was 3000 seconds, "400 Gb/s" 400 GB/s
per GPU (8x the bandwidth) and "46.6 GiB/s" 7 % too little, silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from llmperf_hook.errors import UsageError

SECONDS_PER_UNIT: dict[str, float] = {
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "ms": 1e-3, "msec": 1e-3, "millisecond": 1e-3, "milliseconds": 1e-3,
    "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "usec": 1e-6, "microsecond": 1e-6, "microseconds": 1e-6,
    "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hr": 3600.0, "hrs": 3600.0, "hour": 3600.0, "hours": 3600.0,
}
"""Time units, lower case, in seconds (µ is the micro sign U+00B5, μ the Greek mu U+03BC: both are typed)."""

GBPS_PER_UNIT: dict[str, float] = {
    "GB/s": 1.0, "GBps": 1.0, "GByte/s": 1.0, "MB/s": 1e-3, "MBps": 1e-3, "TB/s": 1e3, "TBps": 1e3,
    "GiB/s": 2**30 / 1e9, "MiB/s": 2**20 / 1e9, "TiB/s": 2**40 / 1e9,
    "Gb/s": 1 / 8, "Gbps": 1 / 8, "Gbit/s": 1 / 8, "Mb/s": 1e-3 / 8, "Mbps": 1e-3 / 8, "Tb/s": 1e3 / 8,
    "Tbps": 1e3 / 8,
}
"""Bandwidth units, case as written (B = byte, b = bit: 8 bits per byte; Gi = 2**30, G = 1e9), in GB/s."""


@dataclass(frozen=True)
class ColumnUnit:
    """The unit a numeric column is in, and how a cell may write it."""

    words: str
    """The column's unit in words, for messages."""
    factors: Mapping[str, float]
    """Unit names a cell may write -> the factor that converts them to the column's unit (1.0: the column's own)."""
    case_sensitive: bool
    """Bandwidth: "Gb/s" (bits) is not "GB/s" (bytes)."""
    per: re.Pattern[str]
    """What the column is per, which may follow its unit ("/iter", "per GPU")."""
    hint: str = ""
    """Added when a cell's unit is not known: how to convert it."""


PER_ITERATION = re.compile(r"\s*(?:/\s*|per\s+)(?:iter(?:ation)?s?|it|steps?)\b", re.I)
PER_GPU = re.compile(r"\s*(?:/\s*|per\s+)gpus?\b", re.I)
PER_NODE = re.compile(r"\s*(?:/\s*|per\s+)(?:node|host|server)s?\b", re.I)
PER_WHAT = re.compile(r"(?:/\s*|per\s+)([\w-]+)", re.I)
"""What else a value may be per ("per micro-batch", "/link"): not the column's, so refused."""

BANDWIDTH = ColumnUnit("GB/s per GPU", GBPS_PER_UNIT, True, PER_GPU,
                       " (B = bytes, b = bits: 1 GB/s = 8 Gb/s; 1 GiB/s = 1.074 GB/s)")
COLUMN_UNITS: dict[str, ColumnUnit] = {
    "iteration_time_s": ColumnUnit("seconds per iteration (optimizer step)", SECONDS_PER_UNIT, False, PER_ITERATION),
    "inter_node_bandwidth_GBps": BANDWIDTH,
    "intra_node_bandwidth_GBps": BANDWIDTH,
}
"""The numeric columns that are not counts, by name."""

NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
"""A decimal number with an optional exponent, as float() reads it (no separators: `number_token` strips them)."""

UNIT_WORD = re.compile(r"\s*([A-Za-zµμ]+(?:/s(?![A-Za-z]))?)")
"""A unit after the number: "s", "ms", "GB/s" ("s/step" is seconds per step, not a rate)."""
CAVEAT_START = ("(", ";", ",")


COUNT_MULTIPLIERS = {"k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9}
"""Suffixes that multiply a count ("2k" global batch, "1.5M" tokens): the number alone would be 1000x too small."""


def _count_in_full(number: str, text: str) -> str:
    """The count a cell means: `number` times its multiplier suffix ("2k" -> 2000), else the number as written."""
    factor = COUNT_MULTIPLIERS.get(re.split(r"[\s(;,]", text, maxsplit=1)[0])
    return number if factor is None else f"{float(number) * factor:.15g}"


def check_unit(number: str, rest: str, cell: str, column: str, where: str) -> None:
    """Refuse a word after the number unless it is the column's own unit (optionally followed by what the column
    is per and a caveat)."""
    text = rest.strip()
    if not text or text.startswith(CAVEAT_START):
        return
    column_unit = COLUMN_UNITS.get(column)
    if column_unit is None:
        raise UsageError(f"{where}: column `{column}` = {cell!r} is a count: write the number alone "
                         f"({_count_in_full(number, text)}); a caveat may follow in parentheses, e.g. '8 (per paper)'.")
    word = UNIT_WORD.match(rest)
    unit = word.group(1) if word else ""
    factor = column_unit.factors.get(unit if column_unit.case_sensitive else unit.lower())
    if factor is None:
        raise UsageError(f"{where}: column `{column}` = {cell!r}: {text!r} after the number is not a unit llmperf "
                         f"knows. The column is in {column_unit.words}: write the value in {column_unit.words}, with no "
                         f"unit{column_unit.hint}; a caveat may follow in parentheses.")
    after_unit = rest[word.end():] if word else ""
    converted = f"{float(number) * factor:.6g}"
    if column_unit is BANDWIDTH and PER_NODE.match(after_unit):  # a node's links shared by its GPUs
        raise UsageError(f"{where}: column `{column}` = {cell!r} is per node; the column is in {column_unit.words}: "
                         f"write {converted} divided by the GPUs per node ({float(converted) / 8:.6g} on 8-GPU nodes).")
    per = column_unit.per.match(after_unit)
    after = (after_unit[per.end():] if per else after_unit).strip()
    other_per = None if per else PER_WHAT.match(after)
    if other_per:  # '0.2 s per micro-batch' with the old advice '0.2 (per micro-batch)' read as a step's time
        raise UsageError(f"{where}: column `{column}` = {cell!r}: the value is per {other_per.group(1)}; the column is "
                         f"in {column_unit.words}: convert it and write the number with no unit.")
    if factor != 1.0:
        raise UsageError(f"{where}: column `{column}` = {cell!r} is in {unit}; the column is in {column_unit.words}: "
                         f"write {converted}.")
    if after and not after.startswith(CAVEAT_START):
        raise UsageError(f"{where}: column `{column}` = {cell!r}: {after!r} follows the unit; a caveat goes in "
                         f"parentheses, e.g. '{number} ({after})'.")
