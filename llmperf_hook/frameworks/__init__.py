"""Stage [2]: the training script's arguments (+ ds_config, presets) -> TrainingConfig. See DESIGN.md."""

from __future__ import annotations

from typing import Any


def explain_json(cfg: Any, job: Any = None) -> dict[str, Any]:
    """Flat explain JSON of a resolved job (see frameworks/explain_data.py); imported lazily to keep this package light."""
    from llmperf_hook.frameworks.explain_data import explain_json as _explain_json

    return _explain_json(cfg, job)
