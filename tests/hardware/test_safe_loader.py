"""hardware/load.SAFE_LOADER (libyaml's CSafeLoader where PyYAML has it, else yaml.SafeLoader) reads every YAML file
llmperf reads for predict: the user's hardware / cluster files and, since H193, the shipped-cluster scan behind
home_cluster. Both loaders are safe_load (SafeConstructor, the same resolver); only the scanners differ, on inputs
no shipped file holds (a tab after `key:`, tabs inside [...]: libyaml reads them, the Python scanner refuses them)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from llmperf_hook import api
from llmperf_hook.hardware.load import SAFE_LOADER
from llmperf_hook.resources import configs_dir


@pytest.mark.parametrize("path", sorted(configs_dir().rglob("*.y*ml")), ids=lambda p: p.name)
def test_every_shipped_yaml_reads_the_same_with_either_loader(path) -> None:
    text = path.read_text()
    assert yaml.load(text, Loader=SAFE_LOADER) == yaml.safe_load(text)


def test_the_loader_builds_no_python_objects() -> None:
    with pytest.raises(yaml.YAMLError, match="python/object"):
        yaml.load("gpu: !!python/object/apply:os.getcwd []\n", Loader=SAFE_LOADER)


def test_without_libyaml_the_pure_python_safe_loader_reads_the_presets() -> None:
    """A PyYAML built without libyaml has no CSafeLoader: SAFE_LOADER is yaml.SafeLoader and the shipped-cluster
    scan (home_cluster) and a preset load still work."""
    code = ("import yaml\ndel yaml.CSafeLoader\nfrom llmperf_hook.hardware.load import SAFE_LOADER\n"
            "from llmperf_hook import api\nassert SAFE_LOADER is yaml.SafeLoader, SAFE_LOADER\n"
            "print(api.home_cluster('a100-sxm4-80gb'), api.home_cluster('H100-SXM5-80GB'), "
            "api.load_cluster('dgx-a100').gpus_per_node)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["dgx-a100", "dgx-h100", "8"]


def test_a_cluster_file_that_is_not_utf8_is_skipped_by_the_scan(tmp_path, monkeypatch) -> None:
    """An unreadable file of $LLMPERF_HOME/clusters is skipped by the scan (and reported when named with --cluster):
    bytes that are not UTF-8 were an 'internal error: UnicodeDecodeError' of every predict of a non-preset GPU."""
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    (tmp_path / "clusters").mkdir()
    (tmp_path / "clusters" / "latin1.yaml").write_bytes("name: caf\xe9\ngpu: my-gpu\n".encode("latin-1"))
    (tmp_path / "clusters" / "mine.yaml").write_text("name: mine\ngpu: my-gpu\n")
    assert api.measured_clusters("my-gpu") == [tmp_path / "clusters" / "mine.yaml"]


def test_a_cluster_file_named_that_is_not_utf8_is_a_usage_error(tmp_path) -> None:
    from llmperf_hook.errors import UsageError
    from llmperf_hook.hardware.load import load_cluster

    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(UsageError, match="cannot read .*latin1.yaml.*utf-8"):
        load_cluster(str(path))
