"""What a measured run's framework did at the time it was measured, when that differs from today's defaults.

Measured runs come from papers and READMEs of several years; the framework changed under them. What differs is
written into the run's launch command the way a user states it for their own job, so the predictor models it
and the rule is visible in the plan's notes.

DeepSpeed ZeRO-3 changed twice (frameworks/deepspeed_release.py): up to v0.5.4 every parameter fetch synchronised
the device and gathered tensor by tensor with per-rank copies (so nothing overlapped), and up to v0.5.10 every
gradient was reduce-scattered as its own list collective. A ZeRO-3 run of those releases gets
`LLMPERF_DEEPSPEED_VERSION=<release>` before its launch command: the release named in its framework cell
("DeepSpeed 0.4.2"), else the newest release published before the month of its source (an arXiv identifier
arXiv:YYMM.NNNNN or an ISO date in `source` / `source_location`).
"""

from __future__ import annotations

import re

from llmperf_hook.frameworks.deepspeed_release import Version, parse_version, release_before, release_zero3_fields


def deepspeed_version(framework_cell: str) -> Version | None:
    """(major, minor, patch) from a framework cell such as "DeepSpeed v0.4.2"; None when no version is given."""
    match = re.search(r"deepspeed\D{0,12}?v?(\d+\.\d+(?:\.\d+)?)", framework_cell.lower())
    return parse_version(match.group(1)) if match else None


def published_month(*texts: str) -> tuple[int, int] | None:
    """(year, month) of the earliest arXiv identifier or ISO date found in `texts`; None when there is none."""
    found: list[tuple[int, int]] = []
    for text in texts:
        for yy, mm in re.findall(r"arxiv[:\s./abs]*(\d{2})(\d{2})\.\d{4,5}", text.lower()):
            found.append((2000 + int(yy), int(mm)))
        for yyyy, mm in re.findall(r"\b(20\d{2})-(\d{2})-\d{2}\b", text):
            found.append((int(yyyy), int(mm)))
    valid = [ym for ym in found if 1 <= ym[1] <= 12]
    return min(valid) if valid else None


def legacy_zero3_release(zero_stage: int, framework_cell: str, source: str, source_location: str) -> Version | None:
    """The DeepSpeed release of a ZeRO-3 run when its ZeRO-3 differs from today's (before v0.6.0), else None."""
    if zero_stage != 3 or "deepspeed" not in framework_cell.lower():
        return None
    version = deepspeed_version(framework_cell)
    if version is None:
        month = published_month(source, source_location)
        version = release_before(*month) if month is not None else None
    return version if release_zero3_fields(zero_stage, version) else None
