"""Replace a profile folder as a whole: the new files are written into a staging folder, then swapped in.

A profile is several files that must agree (profile.json names every model file's sha256). Rewritten in place,
a refit that is stopped part-way (Ctrl-C, a scheduler's SIGTERM or SIGKILL while the models are written) or that
runs beside another refit of the same name leaves the model files of one fit beside the profile.json of another:
every later `predict` refuses the profile until it is fitted again. Swapped in, a reader that opens the profile
after the swap sees the new one whole (one that reads its files across the swap may still meet both, and says so by
the sha256 check; read again, it is the new one), and a stop before the swap, or a swap that fails (a full disk),
leaves the old profile as it was. A SIGKILL leaves its stage in .staging/, which nothing reads; between the two
renames (microseconds) it leaves the old profile there too, as .staging/NAME.HOST.PID.HEX.old, and no profile in
place: `recover` (called before every write, and by predict's profile lookup) puts it back once its writer is gone,
and removes the stages dead writers left. Only a process on the writer's own host judges it gone: a PID means
nothing on another machine sharing $LLMPERF_HOME (NFS), where a live writer's stage would otherwise be deleted.

The staging folders live in `.staging/` beside the profiles, one level below them, so a glob of
`profiles/*/profile.json` (hardware/local_cpu.py) never finds a half-written one. Both renames stay inside one
folder tree, on one file system, where rename(2) is atomic.
"""

from __future__ import annotations

import errno
import os
import random
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import Callable

STAGING = ".staging"
"""Folder beside the profiles that holds profiles being written (and the old ones being removed)."""

MAX_SWAP_TRIES = 20
"""Renames (and the stage's mkdir) retried when another writer swaps the same profile in between (each retry
follows another writer's step)."""
SWAP_BACKOFF_S = 0.002
"""Upper bound of the random pause before swap retry n, times n (at most ~0.4 s in all). Without it, three writers in
lock-step on two cores used up the 20 tries (CI on a fresh clone, 2026-11-27 15:05)."""


def replace_folder(directory: Path, write: Callable[[Path], None], keep: Callable[[str], bool]) -> Path:
    """`write(stage)` fills a new folder, the files of `directory` it did not write and `keep(name)` accepts are
    carried over (files other stages of the tool add: reference_speed.json, framework_overhead.json), and the
    result replaces `directory`."""
    staging = directory.parent / STAGING
    stage = staging / f"{directory.name}.{_host()}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    recover(directory)
    _make_stage(stage)
    try:
        write(stage)
        _carry_over(directory, stage, keep)
        retired = _swap_in(stage, directory)
        # What a racing writer added to the folder this one replaced (a refit's framework_overhead.json written
        # after this stage carried the folder over): the last writer keeps it, as long as it wrote no such file.
        _carry_over(retired, directory, keep, atomic=True)
        shutil.rmtree(retired, ignore_errors=True)
    finally:  # (a folder moved aside that could not be put back stays in .staging/ for recover)
        shutil.rmtree(stage, ignore_errors=True)
        _remove_if_empty(staging)
    return directory


def _make_stage(stage: Path) -> None:
    """mkdir .staging/ and the stage in it, the umask's mode as `directory` itself was made (a shared $LLMPERF_HOME
    stays readable to the others). Retried: another writer removes .staging/ once empty, possibly between the two
    (mkdir(parents=True) is the same two steps and failed so with three writers of one profile)."""
    for _ in range(MAX_SWAP_TRIES):
        try:
            stage.parent.mkdir(parents=True, exist_ok=True)
            stage.mkdir()
            return
        except (FileNotFoundError, FileExistsError):  # the latter: .staging/ was there, and gone when checked
            continue
    raise OSError(f"could not create {stage}: other processes kept removing {stage.parent}")


def _carry_over(directory: Path, stage: Path, keep: Callable[[str], bool], atomic: bool = False) -> None:
    """Copy the kept files `stage` lacks (`atomic`: each through a temporary name, for a folder readers already
    see). A folder another writer of the same profile moves aside meanwhile (FileNotFoundError) is not an error:
    what it held is carried from where that writer moved it, after the swap (replace_folder)."""
    try:
        for old in (directory.iterdir() if directory.is_dir() else ()):
            if old.is_file() and keep(old.name) and not (stage / old.name).exists():
                target = stage / (f".{old.name}.{uuid.uuid4().hex[:8]}.tmp" if atomic else old.name)
                shutil.copy2(old, target)
                if atomic:
                    os.replace(target, stage / old.name)
    except FileNotFoundError:
        pass


def _swap_in(stage: Path, directory: Path) -> Path:
    """Move `directory` aside and `stage` in its place; retried while another writer does the same. Returns where
    the replaced folder went (the caller removes it)."""
    retired = directory.parent / STAGING / f"{stage.name}.old"
    for attempt in range(MAX_SWAP_TRIES):
        if attempt:  # a random pause that grows: writers that keep meeting each other fall out of step
            time.sleep(random.uniform(0.0, SWAP_BACKOFF_S * attempt))
        try:
            if directory.exists():
                os.rename(directory, retired)
            os.rename(stage, directory)
            break
        except FileNotFoundError:  # another writer moved `directory` aside first
            continue
        except OSError as err:
            if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                # not another writer's profile in the way: the old one could not be moved aside (permissions) or
                # the new one not renamed in (a full or read-only disk); the old one stays, or is put back
                _put_back(retired, directory)
                raise
            # another writer put its profile in place between the two renames: the one moved aside is replaced
            shutil.rmtree(retired, ignore_errors=True)
            continue
    else:
        raise OSError(f"could not swap {stage} in as {directory}: other processes kept replacing it")
    return retired


def _put_back(retired: Path, directory: Path) -> None:
    """The old profile back in place when the new one could not be: a failed write never loses it."""
    if retired.exists() and not directory.exists():
        os.rename(retired, directory)


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:  # another writer's stage is in it, or files were left by a killed writer
        pass


def recover(directory: Path) -> bool:
    """Put back the folder a writer killed between its two renames left in .staging/ as NAME.HOST.PID.HEX.old (the
    newest, when `directory` is missing and that writer is gone), and remove the stages of writers that are gone.
    True when a folder was put back. A live writer's files are never touched: it is between two renames, or
    writing its stage; so a writer on another host (or whose PID was reused) is taken to be alive."""
    staging = directory.parent / STAGING
    try:
        entries = list(staging.iterdir())
    except OSError:  # no .staging/: nothing was left behind
        return False
    pids = {e: _writer_pid(e.name, directory.name) for e in entries}
    mine = [e for e, pid in pids.items() if pid is not None and pid != os.getpid() and not _alive(pid)]
    retired = sorted((e for e in mine if e.name.endswith(".old")), key=_mtime, reverse=True)
    restored = False
    if retired and not directory.exists():
        try:
            os.rename(retired[0], directory)
            restored = True
        except OSError:  # another process put one in place (or recovered it) first
            pass
    for entry in mine:
        shutil.rmtree(entry, ignore_errors=True)
    _remove_if_empty(staging)
    return restored


def _writer_pid(entry_name: str, folder_name: str) -> int | None:
    """The writer's PID of a stage (NAME.HOST.PID.HEX) or retired folder (NAME.HOST.PID.HEX.old) of `folder_name`
    written on this host; None for another host's (or another folder's) entry."""
    rest = entry_name[len(folder_name) + 1:] if entry_name.startswith(folder_name + ".") else ""
    parts = rest.removesuffix(".old").split(".")
    if len(parts) == 3 and parts[0] == _host() and parts[1].isdigit() and len(parts[2]) == 8:
        return int(parts[1])
    return None


def _host() -> str:
    """This machine's name without dots (a stage name's fields are dot-separated): whose PIDs os.kill can test."""
    import socket  # here, not at the top: predict's profile lookup imports this module, and socket costs ~2 ms

    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:64] or "host"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
