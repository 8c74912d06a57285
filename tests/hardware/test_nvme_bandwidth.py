"""The host's NVMe bandwidth a cluster YAML may state (nvme_read_GBps / nvme_write_GBps, per host), with DeepSpeed's
measured 4 x PCIe Gen4 RAID-0 figures (10 / 5 GB/s, blogs/deepnvme) when it does not."""

from __future__ import annotations

import pytest
import yaml

from llmperf_hook.errors import UsageError
from llmperf_hook.hardware.load import load_cluster, parse_cluster
from llmperf_hook.resources import configs_dir


def _raw() -> dict:
    return yaml.safe_load((configs_dir() / "clusters" / "dgx-a100.yaml").read_text())


def test_default_is_four_gen4_drives_in_raid0() -> None:
    cluster = load_cluster("dgx-a100")
    assert (cluster.nvme_read_bytes_per_s, cluster.nvme_write_bytes_per_s) == (10e9, 5e9)


def test_yaml_keys_set_it_and_bad_values_are_refused() -> None:
    cluster = parse_cluster({**_raw(), "nvme_read_GBps": 48, "nvme_write_GBps": 26}, "x.yaml")
    assert (cluster.nvme_read_bytes_per_s, cluster.nvme_write_bytes_per_s) == (48e9, 26e9)
    with pytest.raises(UsageError, match="nvme_write_GBps must be a positive number"):
        parse_cluster({**_raw(), "nvme_write_GBps": 0}, "x.yaml")
