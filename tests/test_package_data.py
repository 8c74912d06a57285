"""Every shipped config file is packaged: a file no package-data pattern matches is missing from a
non-editable install (as the gzip-compressed profile models were)."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_file_under_configs_matches_a_package_data_pattern() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = meta["tool"]["setuptools"]["package-data"]["llmperf_hook._configs"]
    configs = ROOT / "configs"
    files = [p.relative_to(configs).as_posix() for p in configs.rglob("*") if p.is_file() and p.suffix != ".py"]
    assert files
    # setuptools globs "**/x" also at the top level; fnmatch's "*" crosses "/", so strip the "**/" prefix too.
    globs = [g for p in patterns for g in (p, p.removeprefix("**/"))]
    missed = [f for f in files if not any(fnmatch.fnmatch(f, g) for g in globs)]
    assert not missed, f"not packaged by pyproject.toml package-data: {missed[:5]}"
