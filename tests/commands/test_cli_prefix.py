"""`llmperf LAUNCHER ...` is `llmperf run -- LAUNCHER ...` for every spelling of the launcher (issue h17 campaign:
`llmperf python3.11 -m torch.distributed.run ...` and `llmperf /opt/conda/bin/torchrun ...` were 'No such command')."""

from __future__ import annotations

import pytest

from llmperf_hook.cli import _rewrite_prefix


@pytest.mark.parametrize("head", ["torchrun", "ft_launcher", "deepspeed", "python", "python3", "python3.11", "/opt/conda/bin/torchrun",
                                  "/usr/bin/python3", "srun", "env", "mpirun", "mpiexec", "orterun", "mpiexec.hydra",
                                  "accelerate", "accelerate-launch", "sbatch"])
def test_launcher_prefixes(head: str) -> None:
    assert _rewrite_prefix([head, "x.py"]) == ["run", "--", head, "x.py"]


@pytest.mark.parametrize("args", [["predict", "--", "torchrun"], ["explain"], [], ["--help"], ["pythonic"]])
def test_subcommands_untouched(args: list[str]) -> None:
    assert _rewrite_prefix(args) == args


def test_a_click_exit_raised_in_a_command_keeps_its_code(monkeypatch) -> None:
    """click returns (does not raise) an Exit's code with standalone_mode=False; main must pass it on."""
    import click
    import pytest

    from llmperf_hook import cli

    @click.command()
    def exit3() -> None:
        raise click.exceptions.Exit(3)

    monkeypatch.setitem(cli.SUBCOMMANDS, "exit3", "test command")
    monkeypatch.setattr(cli.LazyGroup, "get_command", lambda self, ctx, name: exit3 if name == "exit3" else None)
    with pytest.raises(SystemExit) as info:
        cli.main(["exit3"])
    assert info.value.code == 3


def test_sbatch_dry_run_names_the_allocation_it_assumes(tmp_path, capsys) -> None:
    """`llmperf sbatch job.sh --dry-run`-style gate: the SLURM_* variables come from the #SBATCH options (sbatch sets
    them for the batch step), not from this shell; the placeholder job id is not listed as something the job reads."""
    from llmperf_hook import cli

    job = tmp_path / "job.sh"
    job.write_text("#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=8\n#SBATCH --gpus-per-node=8\n"
                   "srun python pretrain_gpt.py --num-layers 2 --hidden-size 256 --num-attention-heads 4 "
                   "--seq-length 256 --max-position-embeddings 256 --micro-batch-size 1 --global-batch-size 16 "
                   "--vocab-size 1024\n")
    with pytest.raises(SystemExit) as info:
        cli.main(["run", "--dry-run", "--cluster", "dgx-a100", "--", "sbatch", str(job)])
    out, err = capsys.readouterr()
    assert info.value.code == 0 and "on 16 GPUs" in err + out
    assert "SLURM_* as sbatch will set them" in out and "SLURM_NNODES=2" in out and "SLURM_JOB_ID" not in out
