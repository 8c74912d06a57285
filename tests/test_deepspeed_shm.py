"""tests/deepspeed_shm.py removes exactly the /dev/shm all-reduce buffers of a finished DeepSpeed job's ports."""

from __future__ import annotations

import os
import time
from pathlib import Path

from deepspeed_shm import buffer_port, deepspeed_buffers_removed, job_buffers, remove_job_buffers


def _touch(folder: Path, name: str, age_s: float = 0.0) -> Path:
    path = folder / name
    path.write_bytes(b"\0" * 16)
    if age_s:
        then = time.time() - age_s
        os.utime(path, (then, then))
    return path


def test_port_read_from_both_name_forms() -> None:
    assert buffer_port("deepspeed_allreduce_buffer_0_127.0.0.1_40511_0") == 40511  # 0.19: uid first
    assert buffer_port("deepspeed_allreduce_buffer_127.0.0.1_29500_3") == 29500  # earlier releases
    assert buffer_port("deepspeed_allreduce_buffer_1000_localhost_29500_12") == 29500
    assert buffer_port("deepspeed_allreduce_buffer_0_127.0.0.1_40511") is None  # no rank: not shm.cpp's name
    assert buffer_port("psm_shm.29500_0") is None
    assert buffer_port("sem.deepspeed_allreduce_buffer_0_127.0.0.1_40511_0") is None


def test_only_our_ports_written_during_the_job_are_removed(tmp_path: Path) -> None:
    started = time.time()
    ours = [_touch(tmp_path, f"deepspeed_allreduce_buffer_{os.getuid()}_127.0.0.1_40511_{r}") for r in (0, 1)]
    other_port = _touch(tmp_path, f"deepspeed_allreduce_buffer_{os.getuid()}_127.0.0.1_40512_0")
    same_port_older = _touch(tmp_path, "deepspeed_allreduce_buffer_127.0.0.1_40511_2", age_s=3600)
    unrelated = _touch(tmp_path, "torch_shm_40511_0")
    assert job_buffers([40511], started, shm_dir=tmp_path) == sorted(ours)
    assert remove_job_buffers([40511], started, shm_dir=tmp_path) == sorted(ours)
    assert not any(p.exists() for p in ours)
    assert other_port.exists() and same_port_older.exists() and unrelated.exists()


def test_a_later_job_reusing_the_port_keeps_its_buffer(tmp_path: Path) -> None:
    started = time.time()
    ended = started + 1.0
    later = _touch(tmp_path, "deepspeed_allreduce_buffer_0_127.0.0.1_40511_0")
    # the job we clean up for ended 100 s before this buffer was made: it is another job's
    assert remove_job_buffers([40511], started - 200, ended_unix_s=ended - 100, shm_dir=tmp_path) == []
    assert later.exists()


def test_context_manager_cleans_up_even_when_the_job_fails(tmp_path: Path) -> None:
    path = tmp_path / "deepspeed_allreduce_buffer_0_127.0.0.1_41000_0"
    try:
        with deepspeed_buffers_removed(41000, shm_dir=tmp_path):
            path.write_bytes(b"x")
            raise RuntimeError("the job failed")
    except RuntimeError:
        pass
    assert not path.exists()


def test_missing_shm_folder_is_nothing_to_clean(tmp_path: Path) -> None:
    assert remove_job_buffers([29500], time.time(), shm_dir=tmp_path / "absent") == []
