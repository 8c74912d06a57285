"""Fixture: a folder of cluster presets with the standard keys (name, gpu, gpus_per_node, bandwidths)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml


@pytest.fixture
def clusters_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "clusters"
    folder.mkdir()
    presets = {
        "dgx-a100": ("a100-sxm4-80gb", 25.0),
        "vtrain-a100": ("a100-sxm4-80gb", 12.5),
        "dgx-h100": ("h100-sxm5-80gb", 50.0),
        "dgx-h200": ("h200-sxm-141gb", 50.0),
    }
    for name, (gpu, inter) in presets.items():
        body = {"name": name, "gpu": gpu, "gpus_per_node": 8, "intra_node_bandwidth_GBps": 300.0,
                "inter_node_bandwidth_GBps": inter}
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(body))
    return folder
