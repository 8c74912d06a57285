"""Import a script of the project that is not a package module (a benchmark, a data-compiling script) by its path,
so tests can call its functions. This folder is on sys.path (conftest.py), so tests import it by name."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_script(path: Path) -> ModuleType:
    """The module of `path`, registered under its file stem (dataclasses defined in it look themselves up there)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # type: ignore[union-attr]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module
