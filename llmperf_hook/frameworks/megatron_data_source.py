"""Megatron-LM's single-data-source rule: validate_args asserts

    args.mock_data + bool(args.data_path) + any([args.train_data_path, args.valid_data_path, args.test_data_path]) <= 1,
    "A single data source must be provided in training mode, else None"

(megatron/training/arguments.py, c90aa1671f 2024-05, in core_v0.7.0 and every release since, `== 1` at first; HEAD
~line 1679). --mock-data came one release before (core_v0.6.0, 8d8241a9cf 2024-01), which ignored --data-path beside
it; the releases that enforce the rule are those of 2024-05 on, so a command giving two sources is refused (exit 2),
as megatron_validate_args.py does for rules of 2024.

A launch script read by llmperf may have given both sources from two branches of a condition it could not decide (an
`if` on a command's output: bash runs one branch, llmperf reads both, ParsedJob.undecided); then the rule is a warning
naming those lines, never a refusal bash would not cause."""

from __future__ import annotations

from typing import Sequence

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.megatron_rules import list_values

_SPLIT_PATHS = ("--train-data-path", "--valid-data-path", "--test-data-path")
DATA_SOURCE_FLAGS = ("--mock-data", "--data-path", *_SPLIT_PATHS)
"""The options validate_args counts as data sources: an undecided line setting none of them softens nothing."""


def _sources(script_args: Sequence[str]) -> list[str]:
    """The data sources the arguments give, as validate_args counts them (a flag given with no value is None / [])."""
    found = ["--mock-data"] if "--mock-data" in script_args else []
    if list_values(script_args, "--data-path"):
        found.append("--data-path")
    split = [flag for flag in _SPLIT_PATHS if list_values(script_args, flag)]
    return found + ([" / ".join(split)] if split else [])


def check_single_data_source(script_args: Sequence[str], undecided: Sequence[str]) -> list[str]:
    """ConfigError when Megatron-LM arguments give more than one data source (Megatron-DeepSpeed has no --mock-data
    and no such assert: not called for it); a warning instead when the launch script read both branches of a
    condition (`undecided`, ParsedJob.undecided)."""
    sources = _sources(script_args)
    if len(sources) <= 1:
        return []
    rule = (f"{' and '.join(sources)} are both given: Megatron-LM's validate_args asserts 'A single data source must "
            "be provided in training mode, else None' (core_v0.7.0, 2024-05, and later)")
    if undecided:
        lines = ", ".join(undecided[:4]) + (", ..." if len(undecided) > 4 else "")
        return [f"{rule}. The launch script runs {lines} on conditions llmperf could not decide and it read both "
                "branches; bash runs one, so check that the job gets one source"]
    raise ConfigError(f"{rule}, so the job stops at start-up. Keep one: --mock-data for synthetic data, or the "
                      "dataset's --data-path (or --train/valid/test-data-path).")
