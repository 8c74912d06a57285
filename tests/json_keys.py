"""Every key of a JSON document, at any depth (the key tests of docs/output.md and docs/validate.md compare them
with the documented names). This folder is on sys.path (conftest.py), so tests import it by name."""

from __future__ import annotations

from typing import Any


def json_keys(value: Any) -> set[str]:
    """The keys of every object in `value`, nested objects and lists included."""
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in json_keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in json_keys(v)}
    return set()
