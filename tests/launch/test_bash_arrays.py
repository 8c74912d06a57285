"""Bash arrays in batch scripts, as Megatron-LM's own example scripts write them (examples/gpt3/
train_gpt3_175b_distributed.sh: `DISTRIBUTED_ARGS=(` one flag per line `)` ... `torchrun ${DISTRIBUTED_ARGS[@]}
pretrain_gpt.py ${GPT_MODEL_ARGS[@]} ...`): the elements are expanded at assignment, `+=` appends, and `${NAME[@]}`
(quoted or not) gives them back as words. Before, every flag inside an array was lost ('Megatron requires
--num-layers'). Found by the issue-5 acceptance audit."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.launch.shell_script import logical_lines

# Megatron-LM examples/gpt3/train_gpt3_175b_distributed.sh (2025), with an #SBATCH header and 16 nodes
GPT3_EXAMPLE = """#!/bin/bash
#SBATCH --nodes=16
#SBATCH --ntasks-per-node=1

# Runs the "175B" parameter model

export CUDA_DEVICE_MAX_CONNECTIONS=1

GPUS_PER_NODE=8
MASTER_ADDR=localhost
MASTER_PORT=29500
NUM_NODES=16
NODE_RANK=0
WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))

CHECKPOINT_PATH=$1 #<Specify path>
VOCAB_FILE=$3 #<Specify path to file>/gpt2-vocab.json
MERGE_FILE=$4 #<Specify path to file>/gpt2-merges.txt

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE 
    --nnodes $NUM_NODES 
    --master_addr $MASTER_ADDR 
    --master_port $MASTER_PORT
)

GPT_MODEL_ARGS=(
    --num-layers 96 
    --hidden-size 12288 
    --num-attention-heads 96 
    --seq-length 2048 
    --max-position-embeddings 2048 
    --attention-backend auto # Can use (flash/fused/unfused/local)
)

TRAINING_ARGS=(
    --micro-batch-size 1 
    --global-batch-size 1536
    --step-batch-size-schedule "0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536"
    --fp16
)

MODEL_PARALLEL_ARGS=(
\t--tensor-model-parallel-size 8 
\t--pipeline-model-parallel-size 16 
)

DATA_ARGS=(
    --vocab-file $VOCAB_FILE 
    --merge-file $MERGE_FILE 
    --split 949,50,1
)

torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \\
    ${GPT_MODEL_ARGS[@]} \\
    ${TRAINING_ARGS[@]} \\
    ${MODEL_PARALLEL_ARGS[@]} \\
    ${DATA_ARGS[@]}
"""


def _write(tmp_path: Path, text: str) -> str:
    (tmp_path / "job.sh").write_text(text)
    return str(tmp_path / "job.sh")


def test_a_multi_line_array_is_one_logical_line() -> None:
    lines = logical_lines("A=(\n  --x 1  # note (one)\n  --y 'a )b'\n)\nB=2\nC=( --z )\n")
    assert [(line.number, line.text) for line in lines] == [
        (1, "A=(\n  --x 1  # note (one)\n  --y 'a )b'\n)"), (5, "B=2"), (6, "C=( --z )")]


GPT3_NO_SCHEDULE = GPT3_EXAMPLE.replace('    --step-batch-size-schedule "0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536"\n',
                                        "")
"""The example without its schedule, which Megatron-LM refuses beside --global-batch-size ('Cannot specify both',
tests/frameworks/test_step_batch_schedule_rule.py)."""


def test_megatron_gpt3_example_script_through_sbatch(tmp_path: Path) -> None:
    from llmperf_hook.launch.parse import parse_launch

    job = parse_launch(["sbatch", _write(tmp_path, GPT3_EXAMPLE), "ckpt", "tb", "vocab.json", "merges.txt"], {})
    at = job.script_args.index("--step-batch-size-schedule")  # `${TRAINING_ARGS[@]}` unquoted: bash splits the element
    assert job.script_args[at + 1:at + 4] == ("0:16", "2.4B:320", "4.8B:624")
    job, cfg = resolve_job(["sbatch", _write(tmp_path, GPT3_NO_SCHEDULE), "ckpt", "tb", "vocab.json", "merges.txt"], {})
    assert (job.launcher, job.nnodes, job.nproc_per_node, job.world_size) == ("torchrun", 16, 8, 128)
    assert (cfg.parallel.tp, cfg.parallel.pp, cfg.parallel.dp) == (8, 16, 1)
    assert (cfg.model.num_layers, cfg.model.hidden_size, cfg.batch.global_batch_size) == (96, 12288, 1536)
    assert cfg.precision == "fp16"


@pytest.mark.parametrize("ref", ['"${ARGS[@]}"', "${ARGS[@]}", "${ARGS[*]}"])
def test_append_and_quoted_references(tmp_path: Path, ref: str) -> None:
    script = ("#!/bin/bash\n#SBATCH -N 2\n#SBATCH --ntasks-per-node=8\nTP=2\n"
              "ARGS=(--num-layers 24 --hidden-size 2048 --num-attention-heads 16)\n"
              "ARGS+=(\n  --seq-length 2048 --max-position-embeddings 2048\n  --tensor-model-parallel-size $TP\n)\n"
              f"srun python pretrain_gpt.py {ref} --micro-batch-size 1 --bf16 --vocab-size 50257\n")
    job, cfg = resolve_job(["sbatch", _write(tmp_path, script)], {})
    assert (job.world_size, cfg.parallel.tp, cfg.parallel.dp, cfg.model.seq_length) == (16, 2, 8, 2048)


@pytest.mark.parametrize("launch", [["bash"], []])
def test_the_example_run_with_bash_as_its_readme_says(launch: list[str], tmp_path: Path, monkeypatch) -> None:
    """`bash examples/gpt3/train_gpt3_175b_distributed.sh ...` (or `./train.sh`): the same launch line, no allocation."""
    (tmp_path / "train.sh").write_text(GPT3_NO_SCHEDULE)
    monkeypatch.chdir(tmp_path)
    job, cfg = resolve_job([*launch, "train.sh" if launch else "./train.sh", "ckpt", "tb", "vocab.json", "merges.txt", "data"], {})
    assert (job.launcher, job.nnodes, job.nproc_per_node, cfg.parallel.pp) == ("torchrun", 16, 8, 16)


def test_the_example_run_with_sh_is_read_as_the_machines_sh(tmp_path: Path, monkeypatch) -> None:
    """`sh train.sh`: where /bin/sh is bash its arrays work; where it is dash (Debian, Ubuntu) the script stops at its
    first array (tests/launch/test_posix_sh.py), and llmperf refuses it instead of reading it as bash."""
    from llmperf_hook.errors import UsageError
    from llmperf_hook.launch.posix_shell import script_shell

    (tmp_path / "train.sh").write_text(GPT3_NO_SCHEDULE)
    monkeypatch.chdir(tmp_path)
    if script_shell("sh", "")[0] == "bash":
        job, cfg = resolve_job(["sh", "train.sh", "ckpt", "tb", "vocab.json", "merges.txt", "data"], {})
        assert (job.launcher, job.nnodes, cfg.parallel.pp) == ("torchrun", 16, 16)
    else:
        with pytest.raises(UsageError, match="uses a bash array assignment"):
            resolve_job(["sh", "train.sh", "ckpt", "tb", "vocab.json", "merges.txt", "data"], {})


def test_an_argument_not_given_leaves_its_flag_without_a_value(tmp_path: Path, monkeypatch) -> None:
    """Without $4, bash drops the empty `$MERGE_FILE` element of DATA_ARGS, so `--merge-file` is followed by the next
    flag and Megatron's argparse stops ('expected one argument'); it was read as `--merge-file ''`."""
    from llmperf_hook.errors import ConfigError

    (tmp_path / "train.sh").write_text(GPT3_EXAMPLE)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="--merge-file needs 1 value"):
        resolve_job(["bash", "train.sh", "ckpt", "tb", "vocab.json"], {})


def test_a_missing_shell_script_is_named(tmp_path: Path, monkeypatch) -> None:
    from llmperf_hook.errors import UsageError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="shell script nope.sh does not exist"):
        resolve_job(["bash", "nope.sh"], {})


def test_a_shell_script_without_a_launch_line_is_called_a_shell_script(tmp_path: Path, monkeypatch) -> None:
    from llmperf_hook.errors import UsageError

    (tmp_path / "train.sh").write_text('echo start\npython -c "print(1)"\n')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="^shell script train.sh has no launch line"):
        resolve_job(["bash", "train.sh"], {})
