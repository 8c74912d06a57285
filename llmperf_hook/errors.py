"""User-facing errors and their exit codes (DESIGN.md "Errors and exit codes").

0 ok; 2 bad input (usage, or a configuration the framework itself would reject); 3 valid but infeasible
(predicted out of memory, over a budget, nothing fits); 1 only for an unexpected internal error.
Every message says what is wrong, the values and where each came from, the rule, and what to change.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2
EXIT_INFEASIBLE = 3


class LlmperfError(Exception):
    """Base of every error shown to the user without a traceback."""

    exit_code: int = EXIT_INTERNAL


class UsageError(LlmperfError):
    """The command line of llmperf itself, or a file it was pointed at, is unusable."""

    exit_code = EXIT_BAD_INPUT


class ConfigError(LlmperfError):
    """A training configuration the framework itself would reject (or that we cannot resolve)."""

    exit_code = EXIT_BAD_INPUT


class ProfileError(LlmperfError):
    """A fitted hardware profile is missing, corrupted or does not match (never predict a wrong number)."""

    exit_code = EXIT_BAD_INPUT


class InfeasibleError(LlmperfError):
    """A valid job that cannot run as asked: out of memory, over a step-time budget, nothing fits."""

    exit_code = EXIT_INFEASIBLE
