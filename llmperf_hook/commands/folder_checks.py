"""What `llmperf run` and `llmperf refine` check of the folders they are given before they use them: the working
directory still exists, and a path can be looked up at all.

A path's lookup fails for other reasons than "not there", and pathlib turns some of them into "does not exist"
(`Path.exists()` ignores ELOOP) and raises the others (ENAMETOOLONG, EACCES on a folder above it) as bare OSErrors
(pathlib._IGNORED_ERRNOS in CPython 3.11), which reached the user as internal errors. Each is refused here with
what is wrong and what to change.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from llmperf_hook.errors import UsageError


def working_dir(needed_for: str) -> Path:
    """The working directory, or a UsageError when it was removed (rmdir / a rebuilt checkout under a shell that
    still stands in the old folder): relative paths and the default ./llmperf-runs are read from it."""
    try:
        return Path(os.getcwd())
    except FileNotFoundError as err:
        raise UsageError(f"the working directory no longer exists (removed while this shell stood in it, "
                         f"$PWD={os.environ.get('PWD', '?')!r}); {needed_for} are read from it. `cd` into an existing "
                         "folder and run the command again.") from err


def lookup_problem(path: Path) -> str:
    """Why `path` cannot be looked up or made, "" when it exists or may be created (a missing folder, or a file
    among its parents, which the callers name better)."""
    too_long = _name_too_long(path)
    if too_long:
        return too_long
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return ""
    except OSError as err:
        return _explain(err)
    return ""


def _name_too_long(path: Path) -> str:
    """A name longer than the file system allows (NAME_MAX of the nearest existing folder, os.pathconf), also below
    a folder that does not exist yet (mkdir -p would fail there only after the job was predicted)."""
    absolute = Path(os.path.abspath(path))
    existing = next((p for p in absolute.parents if _is_dir(p)), Path("/"))
    try:
        limit = os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255  # POSIX NAME_MAX of ext4, xfs, btrfs, tmpfs
    longest = max(absolute.parts, key=lambda part: len(os.fsencode(part)))
    if len(os.fsencode(longest)) > limit:
        return (f"the name {longest[:40]!r}... is {len(os.fsencode(longest))} bytes long, and the file system of "
                f"{str(existing)!r} allows {limit} bytes a name ([Errno {errno.ENAMETOOLONG}] File name too long). "
                "Use a shorter name")
    return ""


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


def _explain(err: OSError) -> str:
    if err.errno == errno.ELOOP:
        return (f"a symbolic link in it leads back to itself ([Errno {err.errno}] {err.strerror}). Fix or remove that "
                "link, or use another path")
    if err.errno == errno.EACCES:
        return (f"a folder in it cannot be searched by this user ([Errno {err.errno}] {err.strerror}). Use a folder "
                "you may enter")
    if err.errno == errno.ENAMETOOLONG:
        return (f"the path is longer than the file system allows ([Errno {err.errno}] {err.strerror}). Use a "
                "shorter path")
    return f"it cannot be looked up ([Errno {err.errno}] {err.strerror}). Use another path"
