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

Megatron-LM's tensor-parallel overlap changed once: its async collectives (sequence parallelism's backward
re-gather and reduce-scatter, the async TP all-reduce) overlap the GEMM launched after them only when the kernels
reach the GPU in launch order. Since bdd9731 (2022-10-14, "Remove noop used to try to force scheduling and check
for environment variable instead") Megatron-LM requires CUDA_DEVICE_MAX_CONNECTIONS=1 for it; before, a 3 us no-op
only tried to delay the GEMM, under CUDA's default of 8 work queues (CUDA Programming Guide, CUDA Environment
Variables). A Megatron-LM run measured before 2022-10 (its source's month, else a framework cell's year before 2022)
gets `CUDA_DEVICE_MAX_CONNECTIONS=8` before its launch command (not a NeMo Megatron run: runs_megatron_lm), so its overlap is priced as that code ran it
(TrainingConfig.cuda_device_max_connections). Before 2021-09 (16c90445) Megatron-LM had no async grad-input
all-reduce at all; such a run predates bdd9731 too (ASYNC_ALLREDUCE_MONTH < ORDERED_LAUNCH_MONTH), so its
unordered launch prices that all-reduce serialized, as it ran (graph/layer_ops.async_dgrad_tags: no overlap
without launch order before Blackwell). Its command carries no `--no-async-tensor-model-parallel-allreduce`:
today's Megatron-LM ignores that flag (since 5fffdfc737, 2024-04-29) and its newest releases refuse it.
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


ORDERED_LAUNCH_MONTH = (2022, 10)
"""Megatron-LM bdd9731 (2022-10-14): the async TP collectives rely on CUDA_DEVICE_MAX_CONNECTIONS=1 from here on."""
UNORDERED_CONNECTIONS = "8"
"""CUDA's default number of work queues (CUDA_DEVICE_MAX_CONNECTIONS unset), under which the Megatron-LM of before
bdd9731 ran."""


def framework_year(framework_cell: str) -> int | None:
    """The year a framework cell names ("Megatron-LM (2022)"), else None."""
    match = re.search(r"\b(20\d{2})\b", framework_cell)
    return int(match.group(1)) if match else None


def runs_megatron_lm(framework_family: str, framework_cell: str, source_location: str) -> bool:
    """The run trained with Megatron-LM's own scripts: its framework cell or source location names Megatron-LM. Not
    NeMo Megatron: NeMo's launcher set CUDA_DEVICE_MAX_CONNECTIONS=1 for TP > 1 from 2022-07-05 (NeMo-Framework-
    Launcher ff5b306a 'Set GPU kernel queue switch count to 1 to support TP-collective overlap'; bignlp/core/stages.py
    _cuda_device_max_connections), before Megatron-LM did."""
    cell = framework_cell.lower()
    named = "megatron-lm" in cell or "megatron-lm" in source_location.lower()
    return framework_family in ("megatron", "megatron-core") and named and "nemo" not in cell


def measured_before(month_limit: tuple[int, int], framework_family: str, framework_cell: str, source: str,
                    source_location: str) -> bool:
    """A Megatron-LM run (runs_megatron_lm) measured before `month_limit`: its source's month, else a framework
    cell's year before the limit's year (a year alone cannot say which side of the month)."""
    if not runs_megatron_lm(framework_family, framework_cell, source_location):
        return False
    month = published_month(source, source_location)
    if month is None:
        year = framework_year(framework_cell)
        month = (year, 12) if year is not None and year < month_limit[0] else None
    return month is not None and month < month_limit


def legacy_max_connections(framework_family: str, framework_cell: str, source: str,
                           source_location: str) -> str | None:
    """CUDA_DEVICE_MAX_CONNECTIONS of a Megatron-LM run measured before bdd9731 (ORDERED_LAUNCH_MONTH): CUDA's
    default 8; None for later or undated runs and other frameworks (they run as today's Megatron requires)."""
    if measured_before(ORDERED_LAUNCH_MONTH, framework_family, framework_cell, source, source_location):
        return UNORDERED_CONNECTIONS
    return None


ASYNC_ALLREDUCE_MONTH = (2021, 9)
"""Megatron-LM 16c90445 (2021-09-02, 'minor changes' of the ColumnParallelLinearWithAsyncAllreduce series, merged as
f3e57f6f on 2021-09-06): the column-parallel linear's grad-input all-reduce runs asynchronously beside its weight-grad
GEMM, on by default (--no-async-tensor-model-parallel-allreduce turns it off). Before, it was a synchronous
all-reduce (mappings.py _CopyToModelParallelRegion.backward)."""


def predates_async_tp_allreduce(framework_family: str, framework_cell: str, source: str,
                                source_location: str) -> bool:
    """The Megatron-LM of the run had no async grad-input all-reduce (measured before ASYNC_ALLREDUCE_MONTH). Every
    such run also gets legacy_max_connections' unordered launch (the same test against a later month), which is
    what prices its all-reduce serialized."""
    assert ASYNC_ALLREDUCE_MONTH < ORDERED_LAUNCH_MONTH
    return measured_before(ASYNC_ALLREDUCE_MONTH, framework_family, framework_cell, source, source_location)
