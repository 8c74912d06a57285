"""Per-op model refit from the op samples an instrumented run recorded with `--profile-ops`.

The samples (graph op classes and dims, see instrument/op_profile.py) are stored per hardware in the store
(`refine_op_samples`). When the hardware has a user-fitted profile ($LLMPERF_HOME/profiles/<hardware>/) and the
profile package offers a refit entry point, they are handed to it so the next prediction uses them.
"""

from __future__ import annotations

from typing import Any, Sequence

REFIT_ENTRY_POINTS = (("llmperf_hook.profile.refit", "refit_profile"), ("llmperf_hook.profile", "refit_profile"))


def refit_op_models(hardware: str, samples: Sequence[dict[str, Any]]) -> str:
    """Hand the stored samples of this hardware to the profile refit; say what happened."""
    if not samples:
        return "no op samples"
    refit = _refit_entry_point()
    classes = sorted({s["op_class"] for s in samples})
    if refit is None:
        return (f"{len(samples)} op samples of {hardware} stored ({', '.join(classes)}); the profile package has no "
                f"refit entry point yet, so the per-op models were not refitted")
    result = refit(hardware, samples)
    return f"refitted {hardware}'s per-op models with {len(samples)} samples ({', '.join(classes)}): {result}"


def _refit_entry_point() -> Any:
    import importlib

    for module_name, attr in REFIT_ENTRY_POINTS:
        try:
            fn = getattr(importlib.import_module(module_name), attr, None)
        except ImportError:
            continue
        if callable(fn):
            return fn
    return None
