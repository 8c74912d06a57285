"""HardwareSpec.host_link_bytes_per_s (YAML host_link_GBps), compute_capability and streaming_multiprocessors: every
shipped NVIDIA preset states the first two, with the link its host interface has, and its NVSwitch parts their SMs; a
bad value is a one-paragraph UsageError."""

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


SMS = {"a100-sxm4-40gb": 108, "a100-sxm4-80gb": 108, "h100-sxm5-80gb": 132, "h200-sxm-141gb": 132, "gh200-96gb": 132,
       "b200-180gb": 148, "gb200-186gb": 148}
"""Streaming multiprocessors of the NVSwitch parts (NVIDIA's A100 / H100 whitepapers, Blackwell technical brief)."""


def test_nvswitch_parts_state_their_sms_and_the_others_leave_them_out() -> None:
    for p in (configs_dir() / "hardware").glob("*.yaml"):
        assert load_hardware(p.stem).streaming_multiprocessors == SMS.get(p.stem, 0), p.stem


def test_streaming_multiprocessors_must_be_a_positive_whole_number() -> None:
    raw = {"name": "x", "peak_TFLOPs": {"bf16": 100}, "memory_bandwidth_GBps": 1000, "memory_capacity_GiB": 16}
    assert parse_hardware(raw, "x.yaml").streaming_multiprocessors == 0
    assert parse_hardware({**raw, "streaming_multiprocessors": 80}, "x.yaml").streaming_multiprocessors == 80
    for bad in (0, 80.5, "80", True):
        with pytest.raises(UsageError, match="streaming_multiprocessors must be a positive whole number"):
            parse_hardware({**raw, "streaming_multiprocessors": bad}, "x.yaml")
