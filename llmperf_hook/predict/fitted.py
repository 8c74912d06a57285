"""Fitted per-hardware operator profiles and per-cluster communication models.  (Being written: issue 4.)"""

from __future__ import annotations

from llmperf_hook.predict.op_times import OpClassPredictor


def find_profile(hardware_name: str, dtype: str) -> OpClassPredictor | None:
    """The fitted operator profile for this hardware ($LLMPERF_HOME/profiles, then shipped), or None."""
    return None


def find_comm_model(cluster_name: str) -> OpClassPredictor | None:
    """The fitted communication model for this cluster, or None (alpha-beta fallback)."""
    return None
