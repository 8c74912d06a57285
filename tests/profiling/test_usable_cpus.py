"""--threads is bounded by the CPUs this process may keep busy (local_hardware.usable_cpus): its affinity mask, and
a cgroup CPU quota (docker --cpus, Kubernetes limits.cpu) that the mask does not show."""

import os
from pathlib import Path

import pytest

from llmperf_hook.profile.local_hardware import usable_cpus

AFFINITY = len(os.sched_getaffinity(0))


def _v2(root: Path, text: str) -> Path:
    root.mkdir(exist_ok=True)
    (root / "cpu.max").write_text(text)
    return root


def _v1(root: Path, quota: str, period: str) -> Path:
    (root / "cpu").mkdir(parents=True)
    (root / "cpu" / "cpu.cfs_quota_us").write_text(quota + "\n")
    (root / "cpu" / "cpu.cfs_period_us").write_text(period + "\n")
    return root


@pytest.mark.parametrize(("text", "cpus"), [("100000 100000\n", 1), ("150000 100000\n", 2), ("50000 100000\n", 1),
                                            ("max 100000\n", AFFINITY), ("garbage\n", AFFINITY)])
def test_a_cgroup_v2_quota_caps_the_affinity_mask(tmp_path: Path, text: str, cpus: int) -> None:
    """1.5 CPUs of quota keep 2 threads busy part of the time (rounded up, as loky does); 'max' is no quota."""
    assert usable_cpus(_v2(tmp_path, text)) == min(cpus, AFFINITY)


def test_a_cgroup_v1_quota_caps_it_and_minus_one_is_none(tmp_path: Path) -> None:
    assert usable_cpus(_v1(tmp_path / "a", "100000", "100000")) == 1
    assert usable_cpus(_v1(tmp_path / "b", "-1", "100000")) == AFFINITY


def test_no_cgroup_controller_leaves_the_affinity_mask(tmp_path: Path) -> None:
    assert usable_cpus(tmp_path) == AFFINITY
