"""A GPU profile is named after the shipped preset of its device, so `--cluster` presets find it
(profile/local_hardware.py preset_for_device)."""

from __future__ import annotations

import pytest

from llmperf_hook.profile.local_hardware import preset_for_device


@pytest.mark.parametrize("device, preset", [
    ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),  # the preset's name is in the device name
    ("NVIDIA H100 80GB HBM3", "h100-sxm5-80gb"),  # as torch names the SXM5 part (measurements/h100-...)
    ("NVIDIA H200", "h200-sxm-141gb"),
    ("NVIDIA B200", "b200-180gb"),
    ("NVIDIA L40S", "l40s-48gb"),
    ("AMD Instinct MI300X", "mi300x-192gb"),
    ("NVIDIA H200 NVL", "h200-nvl"),  # not the SXM part: its own name
    ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada-generation"),
])
def test_profiles_take_their_presets_name(device: str, preset: str) -> None:
    assert preset_for_device(device) == preset
