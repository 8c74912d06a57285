"""Values a launch script takes from a command's output (`$(nvidia-smi -L | wc -l)`, `$(scontrol show hostnames ...
| wc -l)`, `` `...` ``; bash manual 3.5.4 Command Substitution): llmperf runs nothing, so such a value is never
guessed. A launch option given one is refused (exit 2) naming the line that sets it and the fix, a training option
given one likewise; a substitution written on the launch line itself stays one word (bash splits its output only
once it has run, 3.5.7): it was cut at its blanks, and torchrun was said to refuse an option `-L`."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.argv_words import split_joined_words, unexpanded_hint
from llmperf_hook.launch.parse import parse_launch
from tests.launch.cli_run import llmperf

MODEL = ("pretrain_gpt.py --num-layers {L} --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
         "--max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 8 --bf16 "
         "--tensor-model-parallel-size {TP}")


def _predict(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, body: str,
             launcher: str = "torchrun --nproc_per_node=8", layers: str = "4", tp: str = "1") -> tuple[int, str]:
    (tmp_path / "train.sh").write_text(f"#!/bin/bash\n{body}\n{launcher} {MODEL.format(L=layers, TP=tp)}\n")
    monkeypatch.chdir(tmp_path)
    done = llmperf(capsys, "predict", "--cluster", "dgx-h100", "--", "bash", "train.sh")
    return done.code, done.err


@pytest.mark.parametrize("body, launcher", [
    ("GPUS=$(nvidia-smi -L | wc -l)", "torchrun --nproc_per_node=$GPUS"),
    ("GPUS=`nvidia-smi -L | wc -l`", "torchrun --nproc_per_node=$GPUS"),
    ("NNODES=$(scontrol show hostnames $SLURM_JOB_NODELIST | wc -l)", "torchrun --nnodes=$NNODES --nproc_per_node=8"),
    ("NODES=$(scontrol show hostnames $SLURM_JOB_NODELIST | awk '{print $1}')\nN=$(echo $NODES | wc -w)",
     "torchrun --nnodes=$N --nproc_per_node=8"),
])
def test_a_launcher_size_from_a_commands_output_is_refused_with_its_line(
        body: str, launcher: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    code, err = _predict(tmp_path, capsys, monkeypatch, body, launcher)
    assert code == 2 and "Traceback" not in err
    last = body.splitlines()[-1]
    assert f"at line {1 + len(body.splitlines())} (`{last}`)" in err, err


def test_a_launcher_size_written_as_a_substitution_on_the_launch_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, err = _predict(tmp_path, capsys, monkeypatch, "", "torchrun --nproc_per_node=$(nvidia-smi -L | wc -l)")
    assert code == 2 and "-L" not in err.replace("$(nvidia-smi -L | wc -l)", "")
    assert "$(nvidia-smi -L | wc -l) is the output of a command" in err and "--nproc-per-node N" in err


def test_a_training_option_from_a_commands_output(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The refusal names the line and says the environment does not help (the generic hint to set the variable in
    the environment contradicted it)."""
    code, err = _predict(tmp_path, capsys, monkeypatch, "TP=$(echo 2)", tp="$TP")
    assert code == 2 and "at line 2 (`TP=$(echo 2)`)" in err
    assert "set it in the environment or write the number" not in err and "does not help" in err
    code, err = _predict(tmp_path, capsys, monkeypatch, "", layers="$(python -c 'print(4)')")
    assert code == 2 and "a command substitution" in err and "unexpanded shell variable" not in err


def test_a_substitution_stays_one_word() -> None:
    assert split_joined_words(["--nproc_per_node=$(nvidia-smi -L | wc -l)", "--x `a b`"]) == \
        ["--nproc_per_node=$(nvidia-smi -L | wc -l)", "--x `a b`"]
    assert split_joined_words(["--lr 1e-4 --bf16"]) == ["--lr", "1e-4", "--bf16"]  # joined flags: split as before
    assert "command substitution" in unexpanded_hint("$(nproc)") and "variable" in unexpanded_hint("$((N*2))")


@pytest.mark.parametrize("listed", ["$SLURM_JOB_NODELIST", '"${SLURM_JOB_NODELIST}"', "$SLURM_NODELIST", ""])
def test_the_allocations_node_count_from_scontrol(listed: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`$(scontrol show hostnames $SLURM_JOB_NODELIST | wc -l)` prints one line per node of the allocation
    (scontrol(1) hostnames), whose count the sbatch directives give; it was refused as a command's output."""
    (tmp_path / "job.sh").write_text(
        "#!/bin/bash\n#SBATCH --nodes=4\n#SBATCH --ntasks-per-node=1\n"
        f"NNODES=$(scontrol show hostnames {listed} | wc -l)"
        "\nsrun torchrun --nnodes=$NNODES --nproc_per_node=8 pretrain_gpt.py --num-layers 2\n")
    monkeypatch.chdir(tmp_path)
    job = parse_launch(["sbatch", "job.sh"], {})
    assert (job.nnodes, job.world_size) == (4, 32)


def test_other_node_lists_stay_a_commands_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another list, another count (`| wc -w`), or no allocation known: still undecided, named with its line."""
    for command in ("scontrol show hostnames node[1-2] | wc -l", "scontrol show hostnames $SLURM_JOB_NODELIST | wc -w"):
        (tmp_path / "job.sh").write_text(f"#!/bin/bash\n#SBATCH --nodes=4\nN=$({command})\n"
                                         "srun torchrun --nnodes=$N --nproc_per_node=8 pretrain_gpt.py\n")
        monkeypatch.chdir(tmp_path)
        with pytest.raises(UsageError, match=r"sets \$N at line 3"):
            parse_launch(["sbatch", "job.sh"], {})
    (tmp_path / "job.sh").write_text("#!/bin/bash\nN=$(scontrol show hostnames $SLURM_JOB_NODELIST | wc -l)\n"
                                     "torchrun --nnodes=$N --nproc_per_node=8 pretrain_gpt.py\n")
    with pytest.raises(UsageError, match=r"sets \$N at line 2"):  # run outside any allocation llmperf knows
        parse_launch(["bash", "job.sh"], {})
