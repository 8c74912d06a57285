"""Locate shipped data (configs/: hardware, clusters, models, search spaces, fitted profiles).

From a source checkout it is the top-level `configs/`; after a plain `pip install .` it is installed as the
package `llmperf_hook._configs` (see pyproject.toml).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path


_PACKAGE_DIR = Path(__file__).resolve().parent
"""Resolved once: resolve() stats every component of the path, and predict --batch asks configs_dir() a few times
per command (0.2 ms a call, 6 % of a batch's time)."""


def configs_dir() -> Path:
    checkout = _PACKAGE_DIR.parent / "configs"
    if checkout.is_dir():
        return checkout
    installed = _PACKAGE_DIR / "_configs"
    if installed.is_dir():
        return installed
    raise FileNotFoundError("llmperf_hook's shipped configs/ are missing: reinstall with `pip install .`")


def llmperf_home() -> Path:
    """User state (SQLite store, user profiles, calibrations): $LLMPERF_HOME or ~/.cache/llmperf."""
    return _home(os.environ.get("LLMPERF_HOME"), os.environ.get("HOME"))


def pin_llmperf_home() -> None:
    """A relative $LLMPERF_HOME made absolute once, when a command starts, for this process and every process it
    starts (the job under `llmperf run`, whose hook records there; a profile's children). Left relative, each
    access resolved it against the current folder: `predict --batch` reads each line from its file's folder
    (commands/predict.working_directory), so LLMPERF_HOME=home found no home/hardware/NAME.yaml there, and a job
    script that changes folder before starting python recorded its steps into another store."""
    value = os.environ.get("LLMPERF_HOME")
    try:
        path = Path(value).expanduser() if value else None
    except RuntimeError:  # ~name of no user here: said by llmperf_home() if the command reads it (explain does not)
        return
    if path is not None and not path.is_absolute():
        try:
            os.environ["LLMPERF_HOME"] = str(path.absolute())
        except FileNotFoundError as err:  # os.getcwd() of a folder removed under the shell
            from llmperf_hook.errors import UsageError

            raise UsageError(f"$LLMPERF_HOME={value!r} is relative, and the working directory it would be read from "
                             f"no longer exists ($PWD={os.environ.get('PWD', '?')!r}). `cd` into an existing folder, "
                             "or give LLMPERF_HOME as an absolute path.") from err


@lru_cache(maxsize=8)
def _home(llmperf_home_env: str | None, home_env: str | None) -> Path:
    """Memoised on the variables it reads (predict --batch asks a few times per command)."""
    if not llmperf_home_env:
        return Path.home() / ".cache" / "llmperf"
    try:
        return Path(llmperf_home_env).expanduser()
    except RuntimeError as err:  # pathlib: "~name/..." of a user this machine does not know
        from llmperf_hook.errors import UsageError

        raise UsageError(f"$LLMPERF_HOME={llmperf_home_env} starts with the home of a user this machine does not "
                         f"know ({err}): set it to a folder that exists here, e.g. ~/.cache/llmperf, or unset it."
                         ) from err
