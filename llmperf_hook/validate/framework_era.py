"""What a measured run's framework did at the time it was measured, when that differs from today's defaults.

Measured runs come from papers and READMEs of several years; the framework changed under them. A behaviour
that differs is written into the run's launch command as the current setting that reproduces it, so the
predictor models it with today's semantics and the rule is visible in the plan's notes:

- DeepSpeed ZeRO-3 from its release (v0.3.12, March 2021) up to v0.5.4 called `torch.cuda.synchronize()`
  before every parameter all-gather (deepspeed/runtime/zero/partition_parameters.py `_allgather_param`),
  so no fetch overlapped compute: "the async version is not async at all, because each all_gather calls
  torch.cuda.synchronize()" (commit c0eeb69df, "ZeRO3, improved parameter all-gather operation", first
  released in v0.5.5, November 2021). Today's DeepSpeed behaves so with prefetching off:
  `zero_optimization.stage3_prefetch_bucket_size = 0` (each module's fetch starts when it is reached and
  the module waits for it). The device-wide synchronize also waits for the gradient reduce-scatter running
  on the reduction stream before the next module's fetch, so gradient reduction did not overlap either:
  `overlap_comm = false`.

- The same releases gathered each parameter tensor with a list all-gather of per-rank views (a Python loop and
  one copy per rank), and up to v0.5.10 reduce-scattered each parameter's gradient the same way, biases and norms
  included (v0.6.0, March 2022, brought reduce_scatter_coalesced). No current setting reproduces these, so they
  are OptimizerConfig fields (zero3_list_param_gather, zero3_per_tensor_grad_reduce) that `era_optimizer_fields`
  gives for a run; graph/zero3_legacy.py prices them.

The era of a run is its DeepSpeed version when the framework cell names one ("DeepSpeed 0.4.2"), else the
publication month of its source: an arXiv identifier (arXiv:YYMM.NNNNN) or an ISO date in `source` /
`source_location`.
"""

from __future__ import annotations

import re

DEEPSPEED_ASYNC_FETCH_VERSION = (0, 5, 5)
"""First DeepSpeed release whose ZeRO-3 parameter fetch does not synchronise the device (commit c0eeb69df)."""
DEEPSPEED_ASYNC_FETCH_MONTH = (2021, 11)
"""Its release month: runs published before it ran a DeepSpeed with the synchronous fetch."""
DEEPSPEED_COALESCED_REDUCE_VERSION = (0, 6, 0)
"""First DeepSpeed release whose ZeRO-3 reduces gradients with reduce_scatter_coalesced (stage3.py), not one list
reduce-scatter per parameter (partition_parameters.py _reduce_scatter_gradient, still there in v0.5.10)."""
DEEPSPEED_COALESCED_REDUCE_MONTH = (2022, 3)
"""Its release month (v0.6.0, 2022-03-07)."""


def deepspeed_version(framework_cell: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) from a framework cell such as "DeepSpeed v0.4.2"; None when no version is given."""
    match = re.search(r"deepspeed\D{0,12}?v?(\d+)\.(\d+)(?:\.(\d+))?", framework_cell.lower())
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


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


def _zero3_older_than(version_bound: tuple[int, int, int], month_bound: tuple[int, int], zero_stage: int,
                      framework_cell: str, source: str, source_location: str) -> bool:
    """True for a ZeRO-3 run of a DeepSpeed older than `version_bound` (by its version, else its publication month)."""
    if zero_stage != 3 or "deepspeed" not in framework_cell.lower():
        return False
    version = deepspeed_version(framework_cell)
    if version is not None:
        return version < version_bound
    month = published_month(source, source_location)
    return month is not None and month < month_bound


def synchronous_zero3_fetch(zero_stage: int, framework_cell: str, source: str, source_location: str) -> bool:
    """True for a ZeRO-3 run of a DeepSpeed older than v0.5.5 (by its version, else its publication month)."""
    return _zero3_older_than(DEEPSPEED_ASYNC_FETCH_VERSION, DEEPSPEED_ASYNC_FETCH_MONTH, zero_stage, framework_cell,
                             source, source_location)


def per_tensor_zero3_reduce(zero_stage: int, framework_cell: str, source: str, source_location: str) -> bool:
    """True for a ZeRO-3 run of a DeepSpeed older than v0.6.0: one list reduce-scatter per parameter gradient."""
    return _zero3_older_than(DEEPSPEED_COALESCED_REDUCE_VERSION, DEEPSPEED_COALESCED_REDUCE_MONTH, zero_stage,
                             framework_cell, source, source_location)


def release_optimizer_fields(zero_stage: int, version: tuple[int, int, int]) -> dict[str, bool]:
    """The same fields for a known DeepSpeed release (e.g. the installed one, importlib.metadata.version)."""
    if zero_stage != 3:
        return {}
    fields = {"zero3_list_param_gather": version < DEEPSPEED_ASYNC_FETCH_VERSION,
              "zero3_per_tensor_grad_reduce": version < DEEPSPEED_COALESCED_REDUCE_VERSION}
    return {k: v for k, v in fields.items() if v}


def era_optimizer_fields(zero_stage: int, framework_cell: str, source: str, source_location: str) -> dict[str, bool]:
    """OptimizerConfig fields that make a run's ZeRO-3 collectives those of its DeepSpeed release (empty for
    today's): apply with dataclasses.replace(cfg.optimizer, **fields)."""
    fields = {"zero3_list_param_gather": synchronous_zero3_fetch(zero_stage, framework_cell, source, source_location),
              "zero3_per_tensor_grad_reduce": per_tensor_zero3_reduce(zero_stage, framework_cell, source,
                                                                      source_location)}
    return {k: v for k, v in fields.items() if v}
