"""Issue 2, round 12: `llmperf explain` on launch lines of the kinds users type, each derived value checked against
what the launcher and the framework compute, and each input the framework would refuse exiting 2 with one message.

Combinations the earlier rounds did not put together: an sbatch script whose Mixtral job comes through bash arrays
and $SLURM_NNODES, a deepspeed hostfile narrowed by --include, torchrun's PET_* fallbacks, ds_configs written as
DeepSpeed reads them (hjson: comments, trailing commas; duplicate keys refused), and an HF Trainer ds_config of
"auto" values next to a local config.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.acceptance.cli import error_lines, run_cli

LLAMA2_7B_SHAPE = ["--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32",
                   "--seq-length", "2048", "--max-position-embeddings", "2048", "--micro-batch-size", "1",
                   "--global-batch-size", "64", "--bf16"]
GPT = ["pretrain_gpt.py", *LLAMA2_7B_SHAPE]

# Megatron-LM examples/mixtral/train_mixtral_8x7b_distributed.sh, cut to its model / MoE / parallel arguments and
# wrapped in the #SBATCH header a cluster user adds (4 nodes x 8 GPUs).
MIXTRAL_SBATCH = """#!/bin/bash
#SBATCH --job-name=mixtral
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --exclusive

GPUS_PER_NODE=8
NUM_NODES=$SLURM_NNODES
MODEL_ARGS=(
    --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32
    --group-query-attention --num-query-groups 8 --seq-length 4096 --max-position-embeddings 32768
    --swiglu --normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights
    --disable-bias-linear --vocab-size 32000
)
MOE_ARGS=( --num-experts 8 --moe-router-topk 2 --moe-grouped-gemm --moe-token-dispatcher-type alltoall )
PAR_ARGS=( --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --expert-model-parallel-size 8
           --sequence-parallel --use-distributed-optimizer )
srun torchrun --nnodes $NUM_NODES --nproc-per-node $GPUS_PER_NODE --rdzv-backend c10d \\
    --rdzv-endpoint $MASTER_ADDR:29500 \\
    pretrain_gpt.py "${MODEL_ARGS[@]}" "${MOE_ARGS[@]}" "${PAR_ARGS[@]}" \\
    --micro-batch-size 1 --global-batch-size 256 --bf16
"""


def _explain(capsys, argv: list[str], *options: str) -> tuple[int, dict, str]:
    code, out, err = run_cli(["explain", "--format", "json", *options, "--", *argv], capsys)
    return code, (json.loads(out) if code == 0 else {}), err


def _refused(code: int, err: str, *words: str) -> None:
    """Exit 2, one `llmperf: error:` paragraph, no traceback, and the message names what is wrong."""
    assert code == 2, err
    assert "Traceback" not in err and len(error_lines(err)) == 1, err
    for word in words:
        assert word in err, (word, err)


def test_sbatch_mixtral_script_resolves_every_derived_value(tmp_path: Path, capsys, monkeypatch) -> None:
    """Nodes from #SBATCH --nodes via $SLURM_NNODES, 8 per node: world 32; DP = 32 / (TP 2 x PP 2) = 8;
    micro-batches = 256 / (1 x 8) = 32; SwiGLU keeps the explicit ffn 14336; GQA keeps 8 groups."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.sh").write_text(MIXTRAL_SBATCH)
    code, data, err = _explain(capsys, ["sbatch", "job.sh"])
    assert code == 0, err
    got = {k: data[k] for k in ("world_size", "nnodes", "nproc_per_node", "tp", "pp", "ep", "dp",
                                "num_microbatches", "num_query_groups", "ffn_hidden_size", "framework",
                                "sequence_parallel")}
    assert got == {"world_size": 32, "nnodes": 4, "nproc_per_node": 8, "tp": 2, "pp": 2, "ep": 8, "dp": 8,
                   "num_microbatches": 32, "num_query_groups": 8, "ffn_hidden_size": 14336,
                   "framework": "megatron", "sequence_parallel": True}
    # ceil(32000 / (128 * 2)) * 256 = 32000 (already a multiple)
    assert data["padded_vocab_size"] == 32000


def test_deepspeed_hostfile_narrowed_by_include(tmp_path: Path, capsys, monkeypatch) -> None:
    """runner.py parse_inclusion_exclusion: --include worker-2:0,1 keeps two slots of one host of the hostfile."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hostfile").write_text("worker-1 slots=4\nworker-2 slots=4\n")
    code, data, err = _explain(capsys, ["deepspeed", "--hostfile", "hostfile", "--include", "worker-2:0,1", *GPT,
                                        "--vocab-size", "32000"])
    assert code == 0, err
    assert (data["world_size"], data["nnodes"], data["dp"], data["num_microbatches"]) == (2, 1, 2, 32)


def test_deepspeed_multi_node_without_hostfile_is_refused(tmp_path: Path, capsys, monkeypatch) -> None:
    """runner.py main(): 'Num nodes is >1 but no extra nodes available via hostfile'."""
    monkeypatch.chdir(tmp_path)
    code, _, err = _explain(capsys, ["deepspeed", "--num_nodes", "2", "--num_gpus", "8", *GPT,
                                     "--vocab-size", "32000"])
    _refused(code, err, "hostfile")


def test_torchrun_reads_pet_environment_fallbacks(capsys, monkeypatch) -> None:
    """torch/distributed/run.py env_or_default: --nnodes from PET_NNODES, --nproc-per-node from PET_NPROC_PER_NODE."""
    monkeypatch.setenv("PET_NNODES", "2")
    monkeypatch.setenv("PET_NPROC_PER_NODE", "4")
    code, data, err = _explain(capsys, ["torchrun", *GPT, "--vocab-size", "32000"])
    assert code == 0, err
    assert (data["world_size"], data["nnodes"], data["nproc_per_node"], data["num_microbatches"]) == (8, 2, 4, 8)


@pytest.mark.parametrize("tp,divisible_by,padded", [(8, None, 51200), (2, "64", 50304), (1, None, 50304)])
def test_gpt2_tokenizer_vocab_padding(tp: int, divisible_by: str | None, padded: int, capsys) -> None:
    """megatron/training/tokenizer _vocab_size_with_padding: multiple = make_vocab_size_divisible_by (128) * TP;
    50257 -> ceil(50257 / multiple) * multiple: TP 8 -> 51200, 64 x TP 2 -> 50304, TP 1 -> 50304."""
    extra = ["--make-vocab-size-divisible-by", divisible_by] if divisible_by else []
    code, data, err = _explain(capsys, ["torchrun", "--nproc-per-node", "8", *GPT, "--tokenizer-type",
                                        "GPT2BPETokenizer", "--tensor-model-parallel-size", str(tp), *extra])
    assert code == 0, err
    assert data["padded_vocab_size"] == padded


def test_query_groups_count_only_with_group_query_attention(capsys) -> None:
    """arguments.py: num_query_groups is used only when --group-query-attention is set; otherwise heads."""
    base = ["torchrun", "--nproc-per-node", "8", *GPT, "--vocab-size", "32000", "--num-query-groups", "8"]
    code, data, err = _explain(capsys, base)
    assert code == 0 and data["num_query_groups"] == 32, err
    code, data, err = _explain(capsys, [*base, "--group-query-attention", "--tensor-model-parallel-size", "8"])
    assert code == 0 and data["num_query_groups"] == 8, err


@pytest.mark.parametrize("extra,words", [
    (["--group-query-attention", "--num-query-groups", "6", "--tensor-model-parallel-size", "4"],
     ["num-query-groups 6", "tensor-model-parallel-size 4"]),
    (["--fp16"], ["--fp16", "--bf16"]),
    (["--pipeline-model-parallel-size", "4", "--num-layers-per-virtual-pipeline-stage", "3"],
     ["--num-layers-per-virtual-pipeline-stage 3"]),
    (["--global-batch-size", "100", "--micro-batch-size", "3"], ["global batch size 100", "micro batch size 3"]),
    (["--no-such-megatron-flag", "1"], ["--no-such-megatron-flag"]),
], ids=["query-groups-vs-tp", "fp16-and-bf16", "virtual-stage-layers", "gbs-vs-mbs-dp", "unknown-flag"])
def test_megatron_would_refuse(extra: list[str], words: list[str], capsys) -> None:
    code, _, err = _explain(capsys, ["torchrun", "--nproc-per-node", "8", *GPT, "--vocab-size", "32000", *extra])
    _refused(code, err, *words)


def test_both_virtual_pipeline_spellings_agree(capsys) -> None:
    """Older --num-layers-per-virtual-pipeline-stage 2 over 32 layers / PP 4 = 8 per rank gives 4 virtual stages,
    the same as today's --num-virtual-stages-per-pipeline-rank 4."""
    base = ["torchrun", "--nproc-per-node", "8", *GPT, "--vocab-size", "32000", "--pipeline-model-parallel-size", "4"]
    old = _explain(capsys, [*base, "--num-layers-per-virtual-pipeline-stage", "2"])
    new = _explain(capsys, [*base, "--num-virtual-stages-per-pipeline-rank", "4"])
    assert old[0] == new[0] == 0, (old[2], new[2])
    assert (old[1]["vpp"], old[1]["pp"]) == (new[1]["vpp"], new[1]["pp"]) == (4, 4)


DS_ARGV = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config", "ds.json"]


def test_ds_config_read_as_hjson_like_deepspeed(tmp_path: Path, capsys, monkeypatch) -> None:
    """DeepSpeedConfig reads the file with hjson.load: a // comment and a trailing comma are accepted."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text('{\n  // ZeRO-2 on 8 GPUs\n  "train_batch_size": 64,\n'
                                      '  "train_micro_batch_size_per_gpu": 2,\n'
                                      '  "zero_optimization": {"stage": 2,},\n  "bf16": {"enabled": true}\n}\n')
    code, data, err = _explain(capsys, DS_ARGV, "--model", "llama2-7b")
    assert code == 0, err
    # gradient_accumulation_steps = 64 / (2 x 8) = 4 (DeepSpeedConfig._set_batch_related_parameters)
    assert (data["zero_stage"], data["num_microbatches"], data["global_batch_size"]) == (2, 4, 64)


@pytest.mark.parametrize("text,words", [
    ('{"train_batch_size": 64, "train_batch_size": 32, "train_micro_batch_size_per_gpu": 2}', ["twice"]),
    ('{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 4}}', ["stage", "4"]),
    ('{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, "bogus_key": 1}}', ["bogus_key"]),
    ('{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, "fp16": {"enabled": true}}',
     ["fp16", "bf16"]),
    ('{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 3}',
     ["train_batch_size 64", "96"]),
    ('{"train_batch_size": 64,', ["ds.json"]),
], ids=["duplicate-key", "zero-stage-4", "unknown-zero-key", "fp16-and-bf16", "batch-triad", "truncated-json"])
def test_deepspeed_would_refuse_the_config(text: str, words: list[str], tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(text)
    before = (tmp_path / "ds.json").read_bytes()
    code, _, err = _explain(capsys, DS_ARGV, "--model", "llama2-7b")
    _refused(code, err, *words)
    assert (tmp_path / "ds.json").read_bytes() == before


LLAMA_HF = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
            "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32,
            "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5}
HF_AUTO = {"train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto", "gradient_accumulation_steps": "auto",
           "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"},
                                 "offload_optimizer": {"device": "cpu"}, "stage3_prefetch_bucket_size": "auto"},
           "bf16": {"enabled": "auto"}}
RUN_CLM = ["run_clm.py", "--deepspeed", "ds.json", "--model_name_or_path", "llama", "--do_train", "--output_dir",
           "out", "--block_size", "2048", "--bf16"]


def _hf_files(tmp_path: Path, ds: dict) -> None:
    (tmp_path / "llama").mkdir()
    (tmp_path / "llama" / "config.json").write_text(json.dumps(LLAMA_HF))
    (tmp_path / "ds.json").write_text(json.dumps(ds))


def test_hf_trainer_fills_auto_values_from_its_arguments(tmp_path: Path, capsys, monkeypatch) -> None:
    """transformers integrations/deepspeed.py trainer_config_process: micro = per_device_train_batch_size,
    accumulation = gradient_accumulation_steps, train_batch_size = micro x accumulation x world = 2 x 4 x 8."""
    monkeypatch.chdir(tmp_path)
    _hf_files(tmp_path, HF_AUTO)
    code, data, err = _explain(capsys, ["deepspeed", "--num_gpus", "8", *RUN_CLM, "--per_device_train_batch_size",
                                        "2", "--gradient_accumulation_steps", "4"])
    assert code == 0, err
    got = {k: data[k] for k in ("world_size", "micro_batch_size", "global_batch_size", "num_microbatches",
                                "zero_stage", "precision", "seq_length", "num_layers", "ffn_hidden_size")}
    assert got == {"world_size": 8, "micro_batch_size": 2, "global_batch_size": 64, "num_microbatches": 4,
                   "zero_stage": 3, "precision": "bf16", "seq_length": 2048, "num_layers": 32,
                   "ffn_hidden_size": 11008}


def test_hf_trainer_refuses_a_ds_value_that_contradicts_its_argument(tmp_path: Path, capsys, monkeypatch) -> None:
    """trainer_config_process -> fill_match: 'Please correct the following DeepSpeed config values that mismatch
    TrainingArguments values'."""
    monkeypatch.chdir(tmp_path)
    _hf_files(tmp_path, {**HF_AUTO, "train_micro_batch_size_per_gpu": 4})
    code, _, err = _explain(capsys, ["deepspeed", "--num_gpus", "8", *RUN_CLM, "--per_device_train_batch_size", "2"])
    _refused(code, err, "train_micro_batch_size_per_gpu", "per_device_train_batch_size")


@pytest.mark.parametrize("content", [None, "distributed_type: [DEEP\n"], ids=["missing", "bad-yaml"])
def test_accelerate_config_file_missing_or_broken(content: str | None, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    if content is not None:
        (tmp_path / "acc.yaml").write_text(content)
    _hf_files(tmp_path, HF_AUTO)
    code, _, err = _explain(capsys, ["accelerate", "launch", "--config_file", "acc.yaml", *RUN_CLM])
    _refused(code, err, "acc.yaml")


@pytest.mark.parametrize("value,warned", [([], True), (["True"], True), (["False"], False)])
def test_trainer_auto_find_batch_size_is_warned(value: list[str], warned: bool, tmp_path: Path, capsys,
                                                monkeypatch) -> None:
    """Trainer.train wraps its loop in find_executable_batch_size (transformers trainer_utils, accelerate's): the job
    may run a smaller per-device batch than the one priced. It said nothing (H166)."""
    monkeypatch.chdir(tmp_path)
    _hf_files(tmp_path, HF_AUTO)
    argv = ["torchrun", "--nproc-per-node", "8", *[a for a in RUN_CLM if a not in ("--deepspeed", "ds.json")],
            "--auto_find_batch_size", *value]
    code, data, err = _explain(capsys, argv)
    assert code == 0, err
    assert data["micro_batch_size"] == 8  # TrainingArguments.per_device_train_batch_size default
    assert any(w.startswith("--auto_find_batch_size") for w in data["warnings"]) == warned, data["warnings"]


def test_recompute_method_without_granularity_is_warned(capsys) -> None:
    code, data, err = _explain(capsys, ["torchrun", "--nproc-per-node", "8", *GPT, "--vocab-size", "32000",
                                        "--recompute-method", "uniform", "--recompute-num-layers", "2"])
    assert code == 0, err
    assert data["recompute"] == "none"
    assert any("--recompute-method" in w for w in data["warnings"]), data["warnings"]
