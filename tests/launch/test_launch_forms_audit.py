"""Launch scripts in the shapes the frameworks' own examples have them: Megatron-LM's megatron_fsdp sbatch (a batch
script piped to `sbatch <<EOF`, its #SBATCH values left as placeholders, its srun running `bash -x -c
"${TRAINING_CMD}"`), a NeMo-launcher batch script (srun ... bash -c "cd ...; VAR=1 python3 -u ..."), and
Megatron-DeepSpeed's run scripts that start the job with another script (`bash ds_pretrain_gpt2.sh ARGS`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.parse import parse_launch
from tests.launch.cli_run import llmperf

GPT = ("--num-layers 2 --hidden-size 256 --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512 "
       "--micro-batch-size 1 --global-batch-size 8 --tokenizer-type NullTokenizer --vocab-size 1000")
MEGATRON_FSDP = """#!/bin/bash
export NCCL_IB_TIMEOUT=19
MEGATRON_PATH=${MEGATRON_PATH:-"/opt/megatron"}
OUTPUT_PATH=${OUTPUT_PATH:-"/out"}
TP=${TP:-2}
PRETRAIN_ARGS=(
    --tensor-model-parallel-size ${TP}
    GPT_ARGS
)
if [ "${USE_MEGATRON_FSDP:-1}" = 1 ]; then
    unset CUDA_DEVICE_MAX_CONNECTIONS
fi
TRAINING_CMD="
cd ${MEGATRON_PATH};
git rev-parse HEAD;
export PYTHONPATH=${MEGATRON_PATH}:${PYTHONPATH};
python ${MEGATRON_PATH}/pretrain_gpt.py ${PRETRAIN_ARGS[@]}"
SLURM_LOGS="${OUTPUT_PATH}/slurm_logs"
set +e
sbatch <<EOF
#!/bin/bash

#SBATCH --job-name=your_own_job_name
#SBATCH --nodes=NODES
#SBATCH --ntasks-per-node=TASKS
#SBATCH --gres=gpu:8
#SBATCH --exclusive

srun \\
    --mpi=pmix -l \\
    --container-workdir=${MEGATRON_PATH} \\
    bash -x -c "${TRAINING_CMD}" 2>&1 | tee ${SLURM_LOGS}/\\${SLURM_JOB_ID}.log

EOF
set -e
""".replace("GPT_ARGS", GPT)


def _script(tmp_path: Path, text: str, name: str = "job.sh") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_megatron_fsdp_sbatch_here_document(tmp_path: Path) -> None:
    text = MEGATRON_FSDP.replace("=NODES", "=4").replace("=TASKS", "=8")
    job = parse_launch(["bash", _script(tmp_path, text)], {"CUDA_DEVICE_MAX_CONNECTIONS": "1"})
    assert (job.launcher, job.nnodes, job.nproc_per_node, job.world_size) == ("srun", 4, 8, 32)
    assert job.script == "/opt/megatron/pretrain_gpt.py" and job.script_args[:2] == ("--tensor-model-parallel-size", "2")
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in job.env  # the script unsets it for Megatron-FSDP


@pytest.mark.parametrize("nodes, tasks, said", [
    ("your_own_num_nodes", "8", '"your_own_num_nodes" is not a valid node count'),
    ("4", "your_own_tasks_per_node", 'Invalid numeric value "your_own_tasks_per_node" for --ntasks-per-node')])
def test_a_placeholder_left_in_the_batch_script_stops_sbatch(nodes: str, tasks: str, said: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    text = MEGATRON_FSDP.replace("=NODES", "=" + nodes).replace("=TASKS", "=" + tasks)
    out = llmperf(capsys, "explain", "--", "bash", _script(tmp_path, text))
    assert out.code == 2 and said in out.err and "Traceback" not in out.err, out.err


NEMO = """#!/bin/bash

# Parameters
#SBATCH --dependency=singleton
#SBATCH --exclusive
#SBATCH --gpus-per-node=8
#SBATCH --job-name=nemo-megatron-gpt3_5b
#SBATCH --mem=0
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --output=/results/log-%j.out
#SBATCH --time=1-00:00:00

# setup
export TRANSFORMERS_OFFLINE=1
export NCCL_NVLS_ENABLE=0

# command 1
srun --output /results/log-%j.out --container-image nvcr.io/nvidia/nemo:24.05 --container-mounts /d:/d --no-container-mount-home bash -c "
  cd /opt/NeMo;
  git rev-parse HEAD;
  export PYTHONPATH=/opt/NeMo:\\${PYTHONPATH};
  CUDA_DEVICE_MAX_CONNECTIONS=1 python3 -u /opt/NeMo/examples/nlp/language_modeling/megatron_gpt_pretraining.py  \\
  --config-path=/results \\
  --config-name=gpt3_5b_hydra.yaml \\
  trainer.num_nodes=2 "
"""


def test_nemo_launcher_batch_script(tmp_path: Path) -> None:
    job = parse_launch(["sbatch", _script(tmp_path, NEMO)], {})
    assert (job.launcher, job.nnodes, job.nproc_per_node, job.world_size) == ("srun", 2, 8, 16)
    assert job.script.endswith("megatron_gpt_pretraining.py") and job.script_args[-1] == "trainer.num_nodes=2"
    assert job.env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1"


def test_a_run_script_that_starts_the_job_with_another_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Megatron-DeepSpeed's curriculum_learning/ds_train.sh: settings, then `bash ds_pretrain_gpt2.sh $CONFIG ...`,
    whose deepspeed line is held in run_cmd and eval'd."""
    monkeypatch.chdir(tmp_path)
    _script(tmp_path, 'NUM_GPUS=$3\nrun_cmd="deepspeed --num_nodes 1 --num_gpus ${NUM_GPUS} pretrain_gpt.py ' + GPT +
            ' --tensor-model-parallel-size $1 --seed $2 &>> log"\necho ${run_cmd}\neval ${run_cmd}\n', "ds_pretrain.sh")
    run = _script(tmp_path, "# prepare\nbash prepare_data.sh\nMP=2\nSEED=7\nbash ds_pretrain.sh $MP $SEED 4\n", "ds_train.sh")
    _script(tmp_path, "mkdir -p data\n", "prepare_data.sh")
    job = parse_launch(["bash", run], {})
    assert (job.launcher, job.world_size) == ("deepspeed", 4)
    assert job.script_args[-4:] == ("--tensor-model-parallel-size", "2", "--seed", "7")


def test_a_script_call_without_a_launcher_is_not_the_launch(tmp_path: Path) -> None:
    _script(tmp_path, "echo torchrun is not run here\n# torchrun --nproc_per_node 8\n", "notes.sh")
    run = _script(tmp_path, f"bash {tmp_path}/notes.sh\ntorchrun --nproc_per_node 4 pretrain_gpt.py {GPT}\n")
    assert parse_launch(["bash", run], {}).world_size == 4
    with pytest.raises(UsageError, match="no launch line"):
        parse_launch(["bash", _script(tmp_path, f"bash {tmp_path}/missing.sh\n", "x.sh")], {})
