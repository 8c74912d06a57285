"""HardwareSpec.host_link_bytes_per_s (YAML host_link_GBps) and compute_capability: every shipped NVIDIA preset states
both, with the link its host interface has; a bad value is a one-paragraph UsageError."""

from __future__ import annotations

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.hardware.load import load_hardware, parse_hardware
from llmperf_hook.resources import configs_dir

LINKS_GBPS = {"a100-pcie-80gb": 31.5, "a100-sxm4-40gb": 31.5, "a100-sxm4-80gb": 31.5, "l40s-48gb": 31.5,
              "h100-pcie-80gb": 63, "h100-sxm5-80gb": 63, "h200-sxm-141gb": 63, "b200-180gb": 63, "mi300x-192gb": 63,
              "gh200-96gb": 450, "gb200-186gb": 450}


def test_every_preset_states_its_host_link() -> None:
    shipped = {p.stem for p in (configs_dir() / "hardware").glob("*.yaml")}
    assert shipped == set(LINKS_GBPS)
    for name, gbps in LINKS_GBPS.items():
        assert load_hardware(name).host_link_bytes_per_s == gbps * 1e9


def test_compute_capability_of_hopper_and_blackwell() -> None:
    assert load_hardware("h100-sxm5-80gb").compute_capability == 9.0
    assert load_hardware("gb200-186gb").compute_capability == 10.0
    assert load_hardware("mi300x-192gb").compute_capability == 0.0  # not a CUDA device


def test_defaults_and_bad_values() -> None:
    raw = {"name": "x", "peak_TFLOPs": {"bf16": 100}, "memory_bandwidth_GBps": 1000, "memory_capacity_GiB": 16}
    spec = parse_hardware(raw, "x.yaml")
    assert spec.host_link_bytes_per_s == 31.5e9 and spec.compute_capability == 0.0
    with pytest.raises(UsageError, match="host_link_GBps must be a positive number"):
        parse_hardware({**raw, "host_link_GBps": 0}, "x.yaml")
