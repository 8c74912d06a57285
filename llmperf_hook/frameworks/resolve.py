"""Stages [1]+[2] entry point: launch command -> (ParsedJob, TrainingConfig).  (Being written: issue 2.)"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.launch.parsed_job import ParsedJob


@dataclass(frozen=True)
class JobOverrides:
    """llmperf's own options that override what the command says (highest precedence)."""

    nnodes: int | None = None
    nproc_per_node: int | None = None
    model: str | None = None
    """--model PRESET|FILE: model shape for scripts that do not state it in Megatron-style flags."""


def resolve_job(
    argv: Sequence[str], env: Mapping[str, str], overrides: JobOverrides = JobOverrides()
) -> tuple[ParsedJob, TrainingConfig]:
    raise NotImplementedError("resolve_job is being written (issue 2)")
