"""`--hardware NAME` whose fitted profile is in $LLMPERF_HOME/profiles/NAME but whose hardware file is not (a profile
folder shared, or copied, without hardware/NAME.yaml) says so and how to fix it; it read as if NAME did not exist."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.hardware.load import load_cluster, load_hardware


def test_profile_without_its_hardware_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    (tmp_path / "profiles" / "my-cpu").mkdir(parents=True)
    (tmp_path / "profiles" / "my-cpu" / "profile.json").write_text("{}")
    with pytest.raises(UsageError, match=r"holds its fitted operator profile, but not the hardware file .*my-cpu\.yaml"
                                         r".*llmperf profile --name my-cpu"):
        load_hardware("my-cpu")


def test_a_name_without_a_profile_keeps_the_preset_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    with pytest.raises(UsageError, match="not a shipped preset. Shipped: a100"):
        load_hardware("my-cpu")


def test_the_profiles_own_profile_json_is_not_a_hardware_file(tmp_path: Path) -> None:
    """`--hardware HOME/profiles/NAME/profile.json` was read as a hardware YAML (JSON is YAML) and refused for its
    'unknown keys format, roofline, models ...', which named neither the mistake nor the fix."""
    meta = tmp_path / "profiles" / "my-cpu" / "profile.json"
    meta.parent.mkdir(parents=True)
    meta.write_text('{"format": "llmperf-profile", "name": "my-cpu"}')
    with pytest.raises(UsageError, match=r"profile\.json of a fitted operator profile, not a hardware file\. Pass its "
                                         r"name, --hardware my-cpu .*hardware/my-cpu\.yaml"):
        load_hardware(str(meta))
    with pytest.raises(UsageError, match=r"folder of a fitted operator profile, not a hardware file\. Pass its name, "
                                         r"--hardware my-cpu .*hardware/my-cpu\.yaml"):
        load_hardware(str(meta.parent))


@pytest.mark.parametrize("given", ["comm_model.json", "."])
def test_a_comm_model_is_not_a_cluster_file(tmp_path: Path, given: str) -> None:
    """`--cluster HOME/profiles/comm/box1/comm_model.json` (what `llmperf profile --comm` prints it wrote) was read as
    a cluster YAML and refused for 'missing keys name, gpu, ...', and its folder as 'not found (it is a folder)':
    neither named the mistake nor the cluster file (clusters/box1.yaml) written beside it."""
    model = tmp_path / "profiles" / "comm" / "box1" / "comm_model.json"
    model.parent.mkdir(parents=True)
    model.write_text('{"format": "llmperf-comm-model", "cluster": "box1"}')
    with pytest.raises(UsageError, match=r"(comm_model\.json|folder) of a fitted communication model, not a cluster "
                                         r"file\. Pass its name, --cluster box1 .*clusters/box1\.yaml"):
        load_cluster(str(model.parent / given))
