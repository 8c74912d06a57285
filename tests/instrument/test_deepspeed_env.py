""".deepspeed_env setting PYTHONPATH: DeepSpeed's multi-node runners export it over ours; the hook must still
reach every rank (instrument/deepspeed_env.py), and the user's file stays as it was."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from instrument_helpers import SMALL_GPT, TRAIN_GPT, free_port, read_records, run_session, steps_by_rank

from llmperf_hook.instrument.deepspeed_env import DS_ENV_FILE, keep_hook_in_deepspeed_env, runner_env_files


def _runner_exports(path: Path) -> dict[str, str]:
    """What deepspeed/launcher/runner.py does with one environment file (readlines, split at '=', add_export)."""
    exports: dict[str, str] = {}
    with open(path) as fd:
        for var in fd.readlines():
            key, val = var.split("=", maxsplit=1)
            exports[key.strip()] = val
    return exports


def test_no_file_or_no_python_path_adds_nothing(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path / "home")}
    assert keep_hook_in_deepspeed_env(env, tmp_path / "hook", tmp_path, tmp_path) == {}
    (tmp_path / ".deepspeed_env").write_text("NCCL_DEBUG=INFO\n")
    assert keep_hook_in_deepspeed_env(env, tmp_path / "hook", tmp_path, tmp_path) == {}
    assert not (tmp_path / "deepspeed_env").exists()


def test_home_then_working_directory_last_python_path_wins_with_the_hook_first(tmp_path: Path) -> None:
    home, cwd, job = tmp_path / "home", tmp_path / "work", tmp_path / "job"
    for folder in (home, cwd, job):
        folder.mkdir()
    (home / ".deepspeed_env").write_text("PYTHONPATH=/home/lib\nNCCL_DEBUG=INFO")  # no final newline
    user_text = "NCCL_SOCKET_IFNAME=eth0\nPYTHONPATH=/work/megatron:/work/src\n"
    (cwd / ".deepspeed_env").write_text(user_text)
    added = keep_hook_in_deepspeed_env({"HOME": str(home)}, Path("/run/hook"), job, cwd)
    ours = Path(added[DS_ENV_FILE])
    assert ours.parent == job and ours.is_absolute()
    assert _runner_exports(ours) == {"NCCL_DEBUG": "INFO\n", "NCCL_SOCKET_IFNAME": "eth0\n",
                                     "PYTHONPATH": "/run/hook:/work/megatron:/work/src\n"}
    assert (cwd / ".deepspeed_env").read_text() == user_text  # the user's file is never rewritten
    # the runner joins DS_ENV_FILE to ~ and to '.': an absolute name is our file both times
    assert {os.path.join(str(home), added[DS_ENV_FILE]), os.path.join(".", added[DS_ENV_FILE])} == {str(ours)}


def test_ds_env_file_names_the_file_the_runner_reads(tmp_path: Path) -> None:
    (tmp_path / "cluster.env").write_text("PYTHONPATH=/opt/code")
    (tmp_path / ".deepspeed_env").write_text("PYTHONPATH=/ignored\n")  # not read when DS_ENV_FILE names another
    env = {"HOME": str(tmp_path / "nohome"), DS_ENV_FILE: "cluster.env"}
    assert runner_env_files(env, tmp_path) == [tmp_path / "cluster.env"]
    added = keep_hook_in_deepspeed_env(env, Path("/h"), tmp_path, tmp_path)
    assert _runner_exports(Path(added[DS_ENV_FILE])) == {"PYTHONPATH": "/h:/opt/code"}


FAKE_PDSH = """#!/bin/sh
# Stand-in for pdsh on one host: `pdsh -S -f N -w HOSTS <command words>` runs the words as the remote shell would
# (pdsh joins them with spaces; %n is the node rank).
shift 5
exec bash -c "$(echo "$*" | sed 's/%n/0/g')"
"""


def test_multi_node_runner_with_a_python_path_in_deepspeed_env_still_reaches_the_rank(
        tmp_path: Path, child_env: dict[str, str]) -> None:
    """DeepSpeed's own runner, multi-node (pdsh) branch, on this machine: a PYTHONPATH line in ./.deepspeed_env
    (written without a final newline, the form pdsh's `export K=V; ...` line accepts) replaced the hook's on the
    node, and no step was recorded."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "pdsh").write_text(FAKE_PDSH)
    (bin_dir / "pdsh").chmod(0o755 | stat.S_IEXEC)
    (tmp_path / "hostfile").write_text("localhost slots=1\n")
    repo = str(TRAIN_GPT.parents[2])
    (tmp_path / ".deepspeed_env").write_text(f"PYTHONPATH={repo}")
    env = {**child_env, "PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{child_env['PATH']}"}
    argv = [sys.executable, "-m", "deepspeed.launcher.runner", "--hostfile", str(tmp_path / "hostfile"),
            "--force_multi", "--no_ssh_check", "--launcher", "pdsh", "--master_addr", "127.0.0.1",
            "--master_port", str(free_port()), str(TRAIN_GPT), *SMALL_GPT, "--train-iters", "3"]
    done = run_session(tmp_path, env, argv, steps=3)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "done: 3 steps" in done.stdout
    assert steps_by_rank(read_records(tmp_path / "run")) == {0: [0, 1, 2]}, done.stderr[-3000:]
    assert "sets PYTHONPATH" in done.stderr and (tmp_path / ".deepspeed_env").read_text() == f"PYTHONPATH={repo}"


def test_dry_run_lists_the_ds_env_file_the_launch_would_add(tmp_path: Path, child_env: dict[str, str]) -> None:
    import subprocess

    argv = [sys.executable, "-m", "llmperf_hook", "run", "--dry-run", "--instrument", "2", "--run-dir",
            str(tmp_path / "run"), "--", sys.executable, "-c", "pass"]
    without = subprocess.run(argv, env=child_env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    (tmp_path / ".deepspeed_env").write_text("PYTHONPATH=/opt/code\n")
    with_file = subprocess.run(argv, env=child_env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert without.returncode == with_file.returncode == 0, with_file.stderr
    assert "DS_ENV_FILE" not in without.stdout
    assert f"+ DS_ENV_FILE={tmp_path / 'run'}/jobs/<job id>/deepspeed_env" in with_file.stdout
    assert not (tmp_path / "run").exists()  # a dry run creates nothing
