"""Fitted per-hardware operator profiles and per-cluster communication models (issue 4).

Lookup order, first found wins:
  operator profiles:   $LLMPERF_HOME/profiles/NAME/profile.json  (user-fitted, `llmperf profile`)
                       configs/profiles/NAME/profile.json        (shipped: a100-sxm4-80gb, gh200-96gb)
  communication model: $LLMPERF_HOME/profiles/comm/NAME/comm_model.json, then configs/profiles/comm/NAME/
NAME is the hardware (or cluster) name, lower-cased. A profile that exists but is corrupted or was fitted with
other features raises ProfileError (never a silently wrong number); a missing one returns None and the
caller falls back to roofline / alpha-beta. Loaded profiles are cached per path and modification time.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from llmperf_hook.predict.op_times import OpClassPredictor
from llmperf_hook.resources import configs_dir, llmperf_home


def profile_dirs(name: str, *parts: str) -> list[Path]:
    """Candidate directories for NAME, user first then shipped."""
    key = name.strip().lower()
    roots = [llmperf_home() / "profiles"]
    try:
        roots.append(configs_dir() / "profiles")
    except FileNotFoundError:
        pass
    return [root.joinpath(*parts, key) for root in roots]


@lru_cache(maxsize=16)
def _load_profile(directory: str, mtime_ns: int):
    from llmperf_hook.profile.predictor import FittedProfile

    return FittedProfile(Path(directory))


@lru_cache(maxsize=16)
def _load_comm(directory: str, mtime_ns: int):
    from llmperf_hook.profile.comm_model import CommPredictor, read_comm_model

    return CommPredictor(read_comm_model(Path(directory)))


def find_profile(hardware_name: str, dtype: str) -> OpClassPredictor | None:
    """The fitted operator profile for this hardware that serves `dtype`, or None."""
    for directory in profile_dirs(hardware_name):
        meta = directory / "profile.json"
        if meta.is_file():
            profile = _load_profile(str(directory), meta.stat().st_mtime_ns)
            return profile if dtype in profile.meta.serves_dtypes else None
        if directory.is_dir() and any(directory.glob("*.txt*")):
            from llmperf_hook.errors import ProfileError

            raise ProfileError(
                f"fitted profile {directory} has model files but no profile.json (written last by llmperf profile: "
                f"an interrupted fit, or a copy that left it out), so it is never used. Re-create it with "
                f"`llmperf profile ... --name {hardware_name.strip().lower()}`, copy its profile.json too, or delete "
                f"the directory to fall back to the roofline model.")
    return None


def find_comm_model(cluster_name: str) -> OpClassPredictor | None:
    """The fitted communication model for this cluster, or None (alpha-beta fallback)."""
    for directory in profile_dirs(cluster_name, "comm"):
        path = directory / "comm_model.json"
        if path.is_file():
            return _load_comm(str(directory), path.stat().st_mtime_ns)
    return None
