"""sbatch's `--export` (command line, SBATCH_EXPORT, `#SBATCH --export`) and `#SLURM` directives, read as sbatch reads
them (src/sbatch/sbatch.c _fill_job_desc_from_opts, src/common/env.c env_merge_filter / find_quote_token, src/sbatch/
opt.c _opt_batch_script / _opt_verify), and srun's SLURM_EXPORT_ENV / SRUN_EXPORT_ENV input variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.launch.parse import parse_launch
from llmperf_hook.launch.slurm import export_items

GPT = ("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 "
       "--vocab-size 1000 --micro-batch-size 1 --global-batch-size 16")
SCRIPT = f"""#!/bin/bash
#SBATCH -N 2
#SBATCH --ntasks-per-node=1
{{header}}
export CUDA_DEVICE_MAX_CONNECTIONS=1
srun torchrun --nnodes $SLURM_NNODES --nproc-per-node ${{GPN:-8}} pretrain_gpt.py {GPT}
"""


def _job(tmp_path: Path, header: str, options: list[str], env: dict[str, str]):  # type: ignore[no-untyped-def]
    path = tmp_path / "job.sh"
    path.write_text(SCRIPT.replace("{header}", header))
    return parse_launch(["sbatch", *options, str(path)], env)


@pytest.mark.parametrize(("header", "options", "env", "per_node"), [
    ("", [], {"GPN": "4"}, 4),  # default ALL: the submitting environment reaches the script
    ("", ["--export=ALL"], {"GPN": "4"}, 4),
    ("", ["--export=NONE"], {"GPN": "4"}, 8),  # only SLURM* variables: ${GPN:-8}
    ("", ["--export=NIL"], {"GPN": "4"}, 8),
    ("", ["--export=GPN"], {"GPN": "4"}, 4),  # a bare name passes the submitting value
    ("", ["--export=OTHER"], {"GPN": "4"}, 8),
    ("", ["--export=GPN=2"], {"GPN": "4"}, 2),
    ("", ["--export=ALL,GPN=2"], {"GPN": "4"}, 2),  # items in order, each overwriting (env_array_merge)
    ("", ["--export=GPN=2,ALL"], {"GPN": "4"}, 4),
    ("", [], {"GPN": "4", "SBATCH_EXPORT": "NONE"}, 8),  # the input variable is --export
    ("#SBATCH --export=NONE", [], {"GPN": "4"}, 8),
    ("#SBATCH --export=NONE", ["--export=ALL"], {"GPN": "4"}, 4),  # the command line wins over the directive
    ("#SBATCH --export=NONE", [], {"GPN": "4", "SBATCH_EXPORT": "ALL"}, 4),  # and so does SBATCH_EXPORT
    ("#SBATCH --export=ALL,GPN=2", [], {"GPN": "4"}, 2),
])
def test_export_decides_what_the_script_sees(tmp_path: Path, header: str, options: list[str], env: dict[str, str],
                                             per_node: int) -> None:
    job = _job(tmp_path, header, options, env)
    assert (job.nnodes, job.nproc_per_node) == (2, per_node)


def test_export_none_reaches_the_scripts_srun(tmp_path: Path) -> None:
    """sbatch --export=NONE sets SLURM_EXPORT_ENV=NONE for the script (opt.c _opt_verify), which its srun reads as
    --export=NONE: the script's own `export CUDA_DEVICE_MAX_CONNECTIONS=1` reaches no task (sbatch.html --export=NONE)."""
    assert _job(tmp_path, "", [], {}).env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1"
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in _job(tmp_path, "", ["--export=NONE"], {}).env
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in _job(tmp_path, "", [], {"SLURM_EXPORT_ENV": "NONE"}).env
    # the man page's advice: SLURM_EXPORT_ENV=ALL in the script, or SRUN_EXPORT_ENV, which wins over it
    advised = _job(tmp_path, "export SLURM_EXPORT_ENV=ALL", ["--export=NONE"], {})
    assert advised.env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1"
    assert _job(tmp_path, "", ["--export=NONE"], {"SLURM_EXPORT_ENV": "ALL"}).env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1"


def test_slurm_directives_are_read_like_sbatch_ones(tmp_path: Path) -> None:
    """`#SLURM` is sbatch's second magic word (opt.c _opt_batch_script, with an error asking for #SBATCH)."""
    path = tmp_path / "job.sh"
    path.write_text(f"#!/bin/bash\n#SLURM --nodes=3\n#SBATCH --ntasks-per-node=1\necho start\n#SLURM --nodes=5\n"
                    f"srun torchrun --nnodes $SLURM_NNODES --nproc-per-node 8 pretrain_gpt.py {GPT}\n")
    assert parse_launch(["sbatch", str(path)], {}).nnodes == 3
    assert parse_launch(["sbatch", "-N", "4", str(path)], {}).nnodes == 4


@pytest.mark.parametrize(("value", "items"), [
    ("ALL,FOO=1", ["ALL", "FOO=1"]),
    ('ALL,"FOO=a,b",B=2', ["ALL", "FOO=a,b", "B=2"]),  # an item wholly in quotes loses them
    ('A="x,y",B', ['A="x,y"', "B"]),  # quotes inside an item stay in its value
    ("'A=1,2'", ["A=1,2"]),
    ("\"a'b\",c", ["\"a'b\",c"]),  # each kind of quote toggles on its own: the ' is still open at the comma
])
def test_export_items_split_as_find_quote_token(value: str, items: list[str]) -> None:
    assert export_items(value) == items


def test_srun_export_keeps_a_quoted_comma(tmp_path: Path) -> None:
    job = parse_launch(["srun", "-N", "1", '--export=ALL,"NCCL_IB_HCA=mlx5_0,mlx5_1"', "torchrun", "--nproc-per-node",
                        "8", "pretrain_gpt.py", *GPT.split()], {})
    assert job.env.get("NCCL_IB_HCA") == "mlx5_0,mlx5_1"


def test_a_script_that_sources_its_settings_and_submits_the_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Megatron-LM examples/academic_paper_scripts/sc21: run_figure_11.sh sets the sizes, sources CONFIG.sh (which
    exports MEGATRON_PARAMS) and SBATCH.sh, whose `sbatch --nodes=$NNODES --export=...,MEGATRON_PARAMS,... SRUN.sh`
    submits SRUN.sh (#SBATCH --ntasks-per-node=8; srun sh -c "python pretrain_gpt.py $MEGATRON_PARAMS")."""
    (tmp_path / "run.sh").write_text("#!/bin/bash\nPP=2\nTP=8\nNNODES=${PP}\nNLS=$((3*PP))\n. `pwd`/CONFIG.sh\n"
                                     ". `pwd`/SBATCH.sh\nexit 0\n")
    (tmp_path / "CONFIG.sh").write_text(f'#!/bin/bash\nexport MEGATRON_CODE_DIR=/code\nNOT_EXPORTED=1\nexport MEGATRON_PARAMS="'
                                        f'--tensor-model-parallel-size $TP --pipeline-model-parallel-size $PP '
                                        f'{GPT.replace("--num-layers 2", "--num-layers $NLS")}"\n')
    (tmp_path / "SBATCH.sh").write_text("#!/bin/bash\nsbatch -p part --nodes=${NNODES} --export=MEGATRON_CODE_DIR,"
                                        "MEGATRON_PARAMS SRUN.sh\nexit 0\n")
    (tmp_path / "SRUN.sh").write_text('#!/bin/bash\n#SBATCH -t 0:30:00 --exclusive --ntasks-per-node=8\n'
                                      'CMD="python -u ${MEGATRON_CODE_DIR}/pretrain_gpt.py ${MEGATRON_PARAMS} ${NOT_EXPORTED:+--bf16}"\n'
                                      'srun -l sh -c "${CMD}"\n')
    monkeypatch.chdir(tmp_path)
    job = parse_launch(["bash", "run.sh"], {})
    assert (job.launcher, job.nnodes, job.nproc_per_node, job.script) == ("srun", 2, 8, "/code/pretrain_gpt.py")
    args = " ".join(job.script_args)
    assert "--num-layers 6" in args and "--pipeline-model-parallel-size 2" in args
    assert "--bf16" not in args  # NOT_EXPORTED is not in sbatch's --export list


def test_a_batch_script_on_standard_input_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Megatron-LM examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh submits `sbatch <<EOF` ... `EOF`: sbatch reads a
    script from its standard input when given no file, here the here-document (tests/launch/test_here_documents.py
    compares it with what bash gives sbatch)."""
    (tmp_path / "submit.sh").write_text(f"#!/bin/bash\nsbatch <<EOF\n#!/bin/bash\n#SBATCH --nodes=2\nsrun torchrun "
                                        f"--nproc-per-node 8 pretrain_gpt.py {GPT}\nEOF\n")
    monkeypatch.chdir(tmp_path)
    job = parse_launch(["bash", "submit.sh"], {})
    assert (job.launcher, job.nnodes, job.nproc_per_node, job.world_size) == ("torchrun", 1, 8, 8)


def test_a_batch_script_submitting_its_successor_launches_its_own_line(tmp_path: Path) -> None:
    path = tmp_path / "job.sh"
    path.write_text(f"#!/bin/bash\n#SBATCH -N 2\n#SBATCH --ntasks-per-node=1\nsbatch --dependency=afterany:$SLURM_JOB_ID "
                    f"next.sh\nsrun torchrun --nnodes $SLURM_NNODES --nproc-per-node 8 pretrain_gpt.py {GPT}\n")
    job = parse_launch(["sbatch", str(path)], {})
    assert (job.launcher, job.nnodes, job.nproc_per_node) == ("torchrun", 2, 8)


def test_a_submission_reads_the_variables_of_its_own_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bash expands `sbatch -N "$N" job.sh` where the line runs: a later `N=4` does not reach it (reading goes on past
    a submission, since a later srun line would be the launch)."""
    (tmp_path / "job.sh").write_text(f"#!/bin/bash\n#SBATCH --ntasks-per-node=8\nsrun python pretrain_gpt.py {GPT}\n")
    (tmp_path / "submit.sh").write_text('#!/bin/bash\nN=2\nsbatch --nodes="$N" job.sh\nN=4\n')
    monkeypatch.chdir(tmp_path)
    job = parse_launch(["bash", "submit.sh"], {})
    assert (job.nnodes, job.world_size) == (2, 16)


def test_a_scripts_wrapped_command_expands_its_own_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`sbatch --wrap '... $SLURM_NNODES ...'` in a script: the quotes keep the `$` from the script's shell, and the
    `#!/bin/sh` script sbatch wraps the command in expands it on the node."""
    (tmp_path / "submit.sh").write_text("#!/bin/bash\nsbatch -N 2 --ntasks-per-node=1 --wrap 'srun torchrun --nnodes "
                                        f"$SLURM_NNODES --nproc-per-node 8 pretrain_gpt.py {GPT}'\n")
    monkeypatch.chdir(tmp_path)
    job = parse_launch(["bash", "submit.sh"], {})
    assert (job.launcher, job.nnodes, job.nproc_per_node) == ("torchrun", 2, 8)


def test_the_variables_a_submission_is_split_from_are_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`sbatch $OPTS job.sh` as a script's launch: OPTS is among the variables the job was read from (explain's
    environment), as for a launch line."""
    (tmp_path / "job.sh").write_text(f"#!/bin/bash\nsrun python pretrain_gpt.py {GPT}\n")
    (tmp_path / "submit.sh").write_text('#!/bin/bash\nOPTS="--nodes=2 --ntasks-per-node=8"\nsbatch $OPTS job.sh\n')
    monkeypatch.chdir(tmp_path)
    job = parse_launch(["bash", "submit.sh"], {})
    assert (job.nnodes, job.world_size, job.env.get("OPTS")) == (2, 16, "--nodes=2 --ntasks-per-node=8")
