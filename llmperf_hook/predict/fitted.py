"""Fitted per-hardware operator profiles and per-cluster communication models (issue 4).

Lookup order, the first that serves the job's dtype wins:
  operator profiles:   $LLMPERF_HOME/profiles/NAME/profile.json  (user-fitted, `llmperf profile`)
                       configs/profiles/NAME/profile.json        (shipped: a100-sxm4-80gb, gh200-96gb)
  communication model: $LLMPERF_HOME/profiles/comm/NAME/comm_model.json, then configs/profiles/comm/NAME/
NAME is the hardware (or cluster) name, lower-cased. A profile that exists but is corrupted or was fitted with
other features raises ProfileError (never a silently wrong number); a missing one returns None and the
caller falls back to roofline / alpha-beta. Loaded profiles are cached per path and sha256 of the metadata file
(profile.json, which holds the models' own sha256; comm_model.json): a rewrite within the file system's timestamp
granularity, even one of the same size (a hand-edited peak), is a new key, where a modification time is not.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from llmperf_hook.predict.op_times import OpClassPredictor
from llmperf_hook.profile.staged_folder import recover as recover_folder
from llmperf_hook.resources import configs_dir, llmperf_home


def profile_dirs(name: str, *parts: str) -> list[Path]:
    """Candidate directories for NAME, user first then shipped."""
    try:
        shipped: Path | None = configs_dir()
    except FileNotFoundError:
        shipped = None
    return list(_profile_dirs(name.strip().lower(), parts, llmperf_home(), shipped))


@lru_cache(maxsize=64)
def _profile_dirs(key: str, parts: tuple[str, ...], home: Path, shipped: Path | None) -> tuple[Path, ...]:
    """The paths alone, memoised: predict --batch asks for them several times per command (pathlib's joins cost
    ~15 us each)."""
    roots = [home / "profiles"] + ([shipped / "profiles"] if shipped is not None else [])
    return tuple(root.joinpath(*parts, key) for root in roots)


_BATCH: dict[tuple, tuple[tuple | None, object]] | None = None
"""find_profile's and find_comm_model's answers inside batch_lookups(), with the stat signature they were read at."""
T = TypeVar("T")
RACY_NS = 2_000_000_000
"""An answer read from a file or folder changed less than this before its stat is not kept: where timestamps are a
clock tick (a jiffy, 1-10 ms, on Linux before 6.13's multigrain timestamps), a same-size rewrite within that tick
leaves the stat signature as it was (git's 'racily clean' entries, Documentation/technical/racy-git.txt)."""


@contextlib.contextmanager
def batch_lookups() -> Iterator[None]:
    """Within: find_profile and find_comm_model answer from their previous result while every folder and metadata
    file they read is unchanged by os.stat (mode, inode, size, mtime and ctime in ns; taken before the lookup runs,
    so a change during it is seen next time). predict --batch looks up the same profile for each of hundreds of
    commands (~30 stats, pathlib joins and a sha256 of profile.json: ~0.4 ms a command); a file rewritten, replaced,
    created or removed between two commands is read again, and an answer from a file changed in the last RACY_NS
    is not kept. Outside (one predict, tune) each call looks up afresh,
    keyed by the metadata's sha256 (module docstring)."""
    global _BATCH
    previous, _BATCH = _BATCH, {}
    try:
        yield
    finally:
        _BATCH = previous


def _stat_signature(paths: tuple[str, ...]) -> tuple:
    out = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out.append(None)
            continue
        out.append((st.st_mode, st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(out)


def _batch_memo(key: tuple, directories: list[Path], meta_name: str, lookup: Callable[[], T]) -> T:
    """lookup(), or inside batch_lookups() its answer for `key` while `directories`, their parents and their
    `meta_name` files are unchanged."""
    if _BATCH is None:
        return lookup()
    paths = _watched_paths(tuple(directories), meta_name)
    now_ns = time.time_ns()
    signature = _stat_signature(paths)
    hit = _BATCH.get(key)
    if hit is not None and hit[0] == signature:
        return hit[1]  # type: ignore[return-value]
    value = lookup()
    recent = any(s is not None and max(s[4], s[5]) > now_ns - RACY_NS for s in signature)
    _BATCH[key] = (None if recent else signature, value)  # a signature of None is never equal: looked up again
    return value


@lru_cache(maxsize=64)
def _watched_paths(directories: tuple[Path, ...], meta_name: str) -> tuple[str, ...]:
    """Each directory's parent (a folder renamed in or out: a refit's staging), itself and its metadata file."""
    return tuple(str(p) for d in directories for p in (d.parent, d, d / meta_name))


def content_key(path: Path) -> str:
    """The cache key of a metadata file: the sha256 of its bytes (about 25 KB: tens of microseconds)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


@lru_cache(maxsize=16)
def _load_profile(directory: str, key: str):
    from llmperf_hook.profile.predictor import FittedProfile

    return FittedProfile(Path(directory))


@lru_cache(maxsize=16)
def _load_comm(directory: str, key: str):
    from llmperf_hook.profile.comm_model import CommPredictor, read_comm_model

    return CommPredictor(read_comm_model(Path(directory)))


def find_profile(hardware_name: str, dtype: str) -> OpClassPredictor | None:
    """The first fitted operator profile for this hardware (user's, then shipped) that serves `dtype`, or None. A
    user profile fitted in other dtypes only (`llmperf profile --dtype fp32 --name a100-sxm4-80gb`) does not hide
    the shipped one's bf16 / fp16 models. Answered once per batch while its files are unchanged (batch_lookups)."""
    return _batch_memo(("profile", hardware_name, dtype, llmperf_home()), profile_dirs(hardware_name), "profile.json",
                       lambda: next((p for p in _profiles(hardware_name) if dtype in p.meta.serves_dtypes), None))


def served_dtypes(hardware_name: str) -> tuple[str, ...]:
    """Every dtype some fitted profile of this hardware answers (find_profile's choices); () when it has none."""
    served: dict[str, None] = {}
    for profile in _profiles(hardware_name):
        served.update(dict.fromkeys(profile.meta.serves_dtypes))
    return tuple(served)


def _profiles(hardware_name: str):
    """The fitted profiles of profile_dirs in lookup order (each checked to be this hardware's)."""
    for directory in profile_dirs(hardware_name):
        meta = directory / "profile.json"
        _check_not_a_file(directory)
        if not directory.exists():  # a refit killed between its two renames left it in .staging/: put it back
            recover_folder(directory)
        if meta.is_file():
            profile = _load_profile(str(directory), content_key(meta))
            _check_fitted_for(profile.meta, directory)
            yield profile
        elif directory.is_dir() and any(directory.glob("*.txt*")):
            from llmperf_hook.errors import ProfileError

            raise ProfileError(
                f"fitted profile {directory} has model files but no profile.json (written last by llmperf profile: "
                f"an interrupted fit, or a copy that left it out), so it is never used. Re-create it with "
                f"`llmperf profile ... --name {hardware_name.strip().lower()}`, copy its profile.json too, or delete "
                f"the directory to fall back to the roofline model.")


def _check_not_a_file(directory: Path, what: str = "fitted profile", fallback: str = "the roofline model") -> None:
    """profiles/NAME (or profiles/ itself; for a cluster, profiles/comm/NAME or profiles/comm/) that is a file is
    damage, not an absent profile: the job was priced by the roofline (or alpha-beta), silently but for a warning
    (none at all for a comm model), where the user meant a fitted one to be used."""
    home = llmperf_home()
    if home not in directory.parents:  # the shipped ones; $LLMPERF_HOME itself a file is the store's to refuse
        return
    chain = (directory, *directory.parents[:directory.parents.index(home)])
    file = next((p for p in chain if p.exists() and not p.is_dir()), None)
    if file is not None:
        from llmperf_hook.errors import ProfileError

        raise ProfileError(f"{what} {directory} is unusable: {file} is a file, not a folder (a fitted model is a "
                           f"folder of JSON and model files, written by `llmperf profile`). Move the file away to fall "
                           f"back to {fallback}, or put the fitted folder there.")


def _check_fitted_for(meta, directory: Path) -> None:
    """A profile serves the hardware it was fitted for: profiles/NAME holds the profile whose profile.json says
    NAME. One copied or renamed from another GPU or machine would price this hardware with that one's times."""
    from llmperf_hook.errors import ProfileError

    device = meta.hardware.get("device", "?") if isinstance(meta.hardware, dict) else "?"
    if str(meta.name).strip().lower() == directory.name:
        if not _fingerprint_fits_preset(directory.name, meta.hardware):
            raise ProfileError(
                f"fitted profile {directory} is for the GPU preset {directory.name!r}, but its hardware fingerprint "
                f"says it was measured on {device!r} ({dict(meta.hardware) if isinstance(meta.hardware, dict) else meta.hardware}): "
                f"a profile of other hardware is never used for this GPU. Re-create it on that GPU with `llmperf "
                f"profile --device cuda --name {directory.name}`, or delete the folder to use the shipped profile "
                f"or the roofline model.")
        return
    raise ProfileError(
        f"fitted profile {directory} is for hardware {directory.name!r}, but its profile.json says it was fitted as "
        f"{meta.name!r} (hardware fingerprint: {device}): a profile copied or renamed from other hardware is never "
        f"used, its operator times would be that hardware's. Move it back to profiles/{str(meta.name).lower()}, "
        f"re-create it on this hardware with `llmperf profile ... --name {directory.name}`, or delete the folder to "
        f"fall back to the roofline model.")


def _fingerprint_fits_preset(name: str, hardware: object) -> bool:
    """For a shipped GPU preset name (`h100-sxm5-80gb`): the fingerprint is a GPU's (no CPU clock) whose device
    name carries the preset's chip (`H100` among the words of 'NVIDIA H100 80GB HBM3'). Other names: True.
    A shipped preset is configs/hardware/NAME.yaml (local_hardware.shipped_hardware_names), looked up here without
    importing local_hardware: its sampler imports cost a predict's process ~10 ms."""
    import re

    if not (configs_dir() / "hardware" / f"{name}.yaml").is_file():
        return True
    if not isinstance(hardware, dict) or "cpu" in str(hardware.get("clock", "")).lower():
        return False
    return name.split("-")[0].upper() in re.split(r"[^A-Z0-9]+", str(hardware.get("device", "")).upper())


def find_comm_model(cluster_name: str) -> OpClassPredictor | None:
    """The fitted communication model for this cluster, or None (alpha-beta fallback); once per batch while its
    files are unchanged (batch_lookups)."""
    directories = profile_dirs(cluster_name, "comm")
    return _batch_memo(("comm", cluster_name, llmperf_home()), directories, "comm_model.json",
                       lambda: _find_comm_model(directories))


def _find_comm_model(directories: list[Path]) -> OpClassPredictor | None:
    for directory in directories:
        _check_not_a_file(directory, "communication model", "the cluster's alpha-beta")
        path = directory / "comm_model.json"
        if path.is_file():
            return _load_comm(str(directory), content_key(path))
    return None
