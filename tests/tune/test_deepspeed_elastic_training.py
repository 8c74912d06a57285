"""`deepspeed --elastic_training` (DeepSpeed's launcher to 0.19.6: runner.py -> launch.py DSElasticAgent, a c10d
rendezvous from --min_elastic_nodes (default 1) to the nodes launched): a node range like torchrun's --nnodes MIN:MAX,
checked by tune at every count (launch/deepspeed_elastic.py); what runner.py / launch.py refuse exits 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook import api
from llmperf_hook.frameworks.resolve import JobOverrides
from tests.acceptance.cli import run_cli

DS = ["deepspeed", "--hostfile", "hosts", "--elastic_training", "--master_addr", "node0"]
SCRIPT = ["train.py", "--deepspeed_config", "ds.json"]
LLAMA = JobOverrides(model="llama2-7b")


@pytest.fixture
def home(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / ".llmperf"))
    (tmp_path / "hosts").write_text("".join(f"node{i} slots=8\n" for i in range(4)))
    (tmp_path / "ds.json").write_text(json.dumps({"train_batch_size": 512, "train_micro_batch_size_per_gpu": 1,
                                                  "bf16": {"enabled": True}, "zero_optimization": {"stage": 1}}))
    return tmp_path


def test_the_range_runs_from_min_elastic_nodes_to_the_nodes_launched(home: Path) -> None:
    job = api.resolve_command([*DS, "--min_elastic_nodes", "2", *SCRIPT], {}, cluster="dgx-h100", overrides=LLAMA)[0]
    assert (job.elastic_min_nnodes, job.nnodes, job.world_size) == (2, 4, 32)
    assert any("0.19.8's runner.py has none" in w for w in job.warnings)
    unset = api.resolve_command([*DS, *SCRIPT], {}, cluster="dgx-h100", overrides=LLAMA)[0]  # launch.py: unset is 1
    assert unset.elastic_min_nnodes == 1
    fixed = api.resolve_command(["deepspeed", "--hostfile", "hosts", *SCRIPT], {}, cluster="dgx-h100",
                                overrides=LLAMA)[0]
    assert fixed.elastic_min_nnodes is None


def test_the_mpi_and_slurm_runners_start_every_host(home: Path) -> None:
    """runner.py hands launch.py the elastic options on the local and pdsh paths only (multinode_runner.py
    PDSHRunner.get_cmd); --launcher openmpi starts the script on every host, so the job is priced at the hosts
    launched, with a warning. runner.py's --master_addr assert still holds there (main, before the runner)."""
    job = api.resolve_command([*DS, "--launcher", "OpenMPI", "--min_elastic_nodes", "2", *SCRIPT], {},
                              cluster="dgx-h100", overrides=LLAMA)[0]
    assert (job.elastic_min_nnodes, job.nnodes) == (None, 4)
    assert any("no effect under --launcher openmpi" in w for w in job.warnings), job.warnings
    pdsh = api.resolve_command([*DS, "--launcher", "pdsh", "--min_elastic_nodes", "2", *SCRIPT], {},
                               cluster="dgx-h100", overrides=LLAMA)[0]
    assert pdsh.elastic_min_nnodes == 2
    no_addr = [w for w in DS if w not in ("--master_addr", "node0")]
    with pytest.raises(Exception, match="Master Addr is required"):
        api.resolve_command([*no_addr, "--launcher", "openmpi", *SCRIPT], {}, cluster="dgx-h100", overrides=LLAMA)


@pytest.mark.parametrize("extra, said", [
    (["--min_elastic_nodes", "5"], "the rendezvous waits for 5 nodes and the job never starts"),
    (["--max_elastic_nodes", "2"], "trains on at most 2 nodes, not the 4 llmperf would price"),
    (["--min_elastic_nodes", "0"], "'Max and Min nodes should be positive'"),
    (["--no_local_rank"], "'--no_local_rank argument is not supported in Elastic training'"),
])
def test_what_the_launcher_refuses_exits_2(home: Path, capsys, extra: list[str], said: str) -> None:
    code, _, err = run_cli(["predict", "--cluster", "dgx-h100", "--model", "llama2-7b", "--", *DS, *extra, *SCRIPT],
                           capsys)
    assert code == 2 and said in err, err
    no_addr = [w for w in DS if w not in ("--master_addr", "node0")]
    code, _, err = run_cli(["predict", "--cluster", "dgx-h100", "--model", "llama2-7b", "--", *no_addr, *SCRIPT],
                           capsys)
    assert code == 2 and "'Master Addr is required when elastic training is enabled'" in err, err


def test_tune_checks_every_count(home: Path, capsys) -> None:
    """train_batch_size 512 on 1 to 4 nodes of 8: at 3 nodes DP is a multiple of 3 and DeepSpeed's batch assertion
    (train == micro x GAS x DP) stops the job whatever the layout: exit 3 naming the count and the range."""
    code, _, err = run_cli(["tune", "--cluster", "dgx-h100", "--model", "llama2-7b", "--", *DS, *SCRIPT], capsys)
    assert code == 3, err
    assert "at an elastic count (3 nodes, 24 GPUs)" in err, err
    (home / "ds.json").write_text(json.dumps({"train_batch_size": 576, "train_micro_batch_size_per_gpu": 1,
                                              "bf16": {"enabled": True}, "zero_optimization": {"stage": 1}}))
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--model", "llama2-7b", "--",
                              *DS, *SCRIPT], capsys)  # 576 = 6 x 96: every count splits it
    assert code == 0, err
    data = json.loads(out)
    words = "deepspeed --elastic_training --min_elastic_nodes 1 (up to its 4 nodes) starts at 1 to 4 nodes"
    assert data["top"] and data["elastic"].startswith(words), data["elastic"]
