"""A profile.json whose format_version is not this llmperf's is refused naming the value as written: a string "1"
(a hand edit, or a writer that quoted it) read `format_version 1 is not 1`, which names no difference at all."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from llmperf_hook.errors import ProfileError
from llmperf_hook.profile.profile_io import read_profile_meta
from llmperf_hook.resources import configs_dir


@pytest.mark.parametrize(("version", "says"), [("1", "format_version '1' is not 1,"), (2, "format_version 2 is not 1,")])
def test_wrong_format_version_is_named_as_written(tmp_path: Path, version: object, says: str) -> None:
    copy = tmp_path / "a100-sxm4-80gb"
    shutil.copytree(configs_dir() / "profiles" / "a100-sxm4-80gb", copy)
    doc = json.loads((copy / "profile.json").read_text())
    doc["format_version"] = version
    (copy / "profile.json").write_text(json.dumps(doc))
    with pytest.raises(ProfileError, match=says) as err:
        read_profile_meta(copy)
    assert "a newer llmperf wrote it" in str(err.value)
