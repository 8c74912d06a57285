"""`.deepspeed_env` (in `~` and the current folder, named by DS_ENV_FILE): exported by the deepspeed launcher to every
rank of a multi-node launch, read as deepspeed/launcher/runner.py reads it, through the real CLI."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from llmperf_hook.launch.parse import parse_launch
from tests.launch.cli_run import llmperf

GPT = ["pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "256", "--num-attention-heads", "8", "--seq-length",
       "512", "--max-position-embeddings", "512", "--micro-batch-size", "1", "--global-batch-size", "16",
       "--tokenizer-type", "NullTokenizer", "--vocab-size", "1000"]


@pytest.fixture()
def two_hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with a two-host hostfile, an empty HOME beside it, as the working directory."""
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    (work / "hosts").write_text("node-a slots=8\nnode-b slots=8\n")
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("DS_ENV_FILE", raising=False)
    monkeypatch.delenv("NCCL_IB_HCA", raising=False)
    return work


def _dry_run_env(capsys: pytest.CaptureFixture[str], *launcher: str) -> dict[str, str]:
    out = llmperf(capsys, "run", "--dry-run", "--format", "json", "--cluster", "dgx-h100", "--", *launcher, *GPT)
    assert out.code == 0, out.err
    return json.loads(out.out.strip().splitlines()[-1])["environment"]


def test_multi_node_ranks_get_the_file_home_then_cwd(two_hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (two_hosts.parent / "home" / ".deepspeed_env").write_text("NCCL_IB_HCA=mlx5_0\nNCCL_DEBUG=WARN\n")
    (two_hosts / ".deepspeed_env").write_text("NCCL_IB_HCA = mlx5_1 \nCUDA_DEVICE_MAX_CONNECTIONS=1\n")
    env = _dry_run_env(capsys, "deepspeed", "--hostfile", "hosts")
    assert env["NCCL_IB_HCA"] == "mlx5_1" and env["NCCL_DEBUG"] == "WARN" and env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"


def test_ds_env_file_names_the_file(two_hosts: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    (two_hosts / ".deepspeed_env").write_text("NCCL_DEBUG=INFO\n")
    (two_hosts / "cluster.env").write_text("NCCL_DEBUG=WARN\n")
    monkeypatch.setenv("DS_ENV_FILE", "cluster.env")
    env = _dry_run_env(capsys, "deepspeed", "--hostfile", "hosts")
    assert env["NCCL_DEBUG"] == "WARN" and env["DS_ENV_FILE"] == "cluster.env"


@pytest.mark.parametrize("launcher", [["deepspeed", "--num_gpus", "8"], ["deepspeed", "--hostfile", "hosts", "--no_ssh",
                                                                         "--node_rank", "0"]])
def test_a_single_node_or_no_ssh_launch_does_not_read_it(launcher: list[str], two_hosts: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    (two_hosts / ".deepspeed_env").write_text("NCCL_DEBUG=INFO\n")
    out = llmperf(capsys, "explain", "--", *launcher, *GPT)
    assert out.code == 0 and ".deepspeed_env is not read: the deepspeed launcher exports it only to a multi-node" in out.out
    assert "NCCL_DEBUG" not in parse_launch([*launcher, *GPT], {"HOME": str(two_hosts.parent / "home")}).env


def test_force_multi_reads_it_on_one_node(two_hosts: Path) -> None:
    (two_hosts / ".deepspeed_env").write_text("NCCL_DEBUG=INFO\n")
    job = parse_launch(["deepspeed", "--force_multi", "--num_gpus", "8", *GPT], {"HOME": str(two_hosts.parent / "home")})
    assert job.env["NCCL_DEBUG"] == "INFO"


@pytest.mark.parametrize("text, line", [("NCCL_DEBUG=INFO\n\n", 2), ("# cluster settings\nNCCL_DEBUG=INFO\n", 1)])
def test_a_line_without_equals_is_refused_as_deepspeed_fails(text: str, line: int, two_hosts: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    (two_hosts / ".deepspeed_env").write_text(text)
    out = llmperf(capsys, "explain", "--", "deepspeed", "--hostfile", "hosts", *GPT)
    assert out.code == 2 and f".deepspeed_env line {line}" in out.err and "ValueError" in out.err, out.err


def test_what_is_mirrored_is_what_the_installed_runner_does() -> None:
    """The lines of deepspeed/launcher/runner.py this reader follows (found without importing deepspeed)."""
    spec = importlib.util.find_spec("deepspeed")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("needs deepspeed installed")
    source = (Path(list(spec.submodule_search_locations)[0]) / "launcher" / "runner.py").read_text()
    for line in ('DEEPSPEED_ENVIRONMENT_NAME = os.getenv("DS_ENV_FILE", ".deepspeed_env")',
                 "DEEPSPEED_ENVIRONMENT_PATHS = [os.path.expanduser(\"~\"), '.']",
                 "key, val = var.split('=', maxsplit=1)",
                 "multi_node_exec = (args.force_multi or len(active_resources) > 1) and not args.no_ssh"):
        assert line in source, line
