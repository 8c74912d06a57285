"""`llmperf tune -- sbatch job.sh`: the changes listed are those of the script's launch line, the line the user
edits by hand (--apply refuses batch scripts). Diffed against the sbatch argv they read 'add --micro-batch-size
16' instead of '1->16' and never named a flag to drop, so --recompute-activations in the script stayed on
while the tuned layout had recompute off."""

from __future__ import annotations

import json
from pathlib import Path

from .helpers import run_cli

SCRIPT = """#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
ARGS="--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048"
srun python pretrain_gpt.py $ARGS --micro-batch-size 1 --global-batch-size 256 --bf16 --vocab-size 50257 \\
    --tensor-model-parallel-size 2 --sequence-parallel --recompute-activations
"""


def test_changes_are_those_of_the_scripts_launch_line(tmp_path: Path, capsys) -> None:
    (tmp_path / "job.sh").write_text(SCRIPT)
    (tmp_path / "s.yaml").write_text("micro_batch_size: [4]\ntensor_parallel: [1]\npipeline_parallel: [1]\n"
                                     "recompute: [none]\ndistributed_optimizer: [true]\n")
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--format", "json", "--search", str(tmp_path / "s.yaml"),
                              "--", "sbatch", str(tmp_path / "job.sh")], capsys)
    assert code == 0, err
    best = next(r for r in json.loads(out)["top"] if r["changes"])
    changes = {c["key"]: (c["old"], c["new"]) for c in best["changes"]}
    assert changes == {"--micro-batch-size": ("1", "4"), "--tensor-model-parallel-size": ("2", "1"),
                       "--sequence-parallel": ("", None), "--recompute-activations": ("", None),
                       "--use-distributed-optimizer": (None, "")}
    assert all(c["where"] == "argv" for c in best["changes"])


LAUNCH_SCRIPT = """#!/bin/bash
GPUS_PER_NODE=8
DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes 2
)
MODEL_ARGS=(
    --num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048
)
torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py ${MODEL_ARGS[@]} --micro-batch-size 1 --global-batch-size 256 \\
    --bf16 --vocab-size 50257 --tensor-model-parallel-size 2 --sequence-parallel --recompute-activations
"""


def test_bash_train_sh_is_refused_by_apply_with_the_launch_lines_changes(tmp_path: Path, capsys, monkeypatch) -> None:
    """`bash train.sh` (how Megatron-LM's README runs its examples) reads the script's torchrun line; --apply used
    to append the tuned flags to `bash train.sh ...`, where the script reads them as $1... and never passes them on
    ('would run: bash train.sh --pipeline-model-parallel-size 2 ...', exit 0)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text(LAUNCH_SCRIPT)
    (tmp_path / "s.yaml").write_text("micro_batch_size: [4]\ntensor_parallel: [1]\npipeline_parallel: [1]\n"
                                     "recompute: [none]\ndistributed_optimizer: [true]\n")
    before = (tmp_path / "train.sh").read_bytes()
    for launch in (["bash", "train.sh", "ckpt"], ["./train.sh"], ["bash", "-x", "-e", "train.sh"]):
        code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--format", "json", "--search", "s.yaml",
                                  "--apply", "--dry-run", "--", *launch], capsys)
        assert code == 2 and "cannot rewrite a shell script" in err and "would run" not in out + err
        data = json.loads(out)
        assert data["applied"] is None
        changes = {c["key"]: (c["old"], c["new"]) for c in next(r for r in data["top"] if r["changes"])["changes"]}
        assert changes["--micro-batch-size"] == ("1", "4") and changes["--recompute-activations"] == ("", None)
    assert (tmp_path / "train.sh").read_bytes() == before


def test_a_flag_whose_value_names_a_shell_is_not_a_script_file() -> None:
    """Only a word that runs (a shell past its options, or a .sh file) makes the command a script file, as the
    launch parser reads it: `--shell=/bin/bash` is an option of the training script, which --apply rewrites (it
    was taken for `bash` running the next word and the command refused as a shell script)."""
    from llmperf_hook.tune.apply import script_file_kind

    assert script_file_kind(["torchrun", "pretrain_gpt.py", "--shell=/bin/bash", "--lr", "1e-4"]) is None
    assert script_file_kind(["torchrun", "pretrain_gpt.py", "--hook=post.sh"]) is None
    assert script_file_kind(["bash", "-x", "train.sh"]) == script_file_kind(["./train.sh"]) == "shell script"
    assert script_file_kind(["bash", "-c", "torchrun pretrain_gpt.py"]) is None
    assert script_file_kind(["sbatch", "job.sh"]) == "sbatch script"


def test_a_wrap_among_the_scripts_arguments_is_not_sbatchs() -> None:
    """sbatch's options end at the script (launch/sbatch.sbatch_launch reads them so): `sbatch job.sh --wrap X`
    runs job.sh with the arguments `--wrap X`, a batch script --apply refuses. The --wrap lookup scanned every word
    and took X for sbatch's command, to be rewritten in place."""
    from llmperf_hook.tune.apply import script_file_kind

    cmd = "torchrun pretrain_gpt.py --tensor-model-parallel-size 2"
    assert script_file_kind(["sbatch", "job.sh", "--wrap", cmd]) == "sbatch script"
    assert script_file_kind(["sbatch", "job.sh", f"--wrap={cmd}"]) == "sbatch script"
    assert script_file_kind(["sbatch", "--nodes", "1", "--wrap", cmd]) is None
    assert script_file_kind(["sbatch", "-N", "1", f"--wrap={cmd}"]) is None
