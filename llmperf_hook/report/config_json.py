"""The `config` object of predict's JSON: issue 2's explain JSON (flat keys, sources, warnings) of the job."""

from __future__ import annotations

from typing import Any

from llmperf_hook.frameworks import explain_json
from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.launch.parsed_job import ParsedJob


def config_json(cfg: TrainingConfig, job: ParsedJob | None) -> dict[str, Any]:
    return dict(explain_json(cfg, job))
