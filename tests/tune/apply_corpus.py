"""A corpus of launch commands as users write them, for `tune --apply --dry-run` followed by `explain` (issue 7).

Each Case is one command with the files it reads (ds_config, hostfile, accelerate config) and the environment it
runs in. `check_case` runs tune --apply --dry-run on it in a scratch folder and returns every way it went wrong:
an exit other than the case's expected one (1 never), an applied command `explain` refuses or resolves to another
layout than tune's first row or `predict` prices differently, a written ds_config DeepSpeed's own DeepSpeedConfig
rejects (or reads another batch or stage), a user file changed, an exit 3 whose message does not name the largest configuration that would fit.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

GPT_1B = ["--num-layers", "24", "--hidden-size", "2048", "--num-attention-heads", "16", "--seq-length", "2048",
          "--max-position-embeddings", "2048", "--vocab-size", "50257"]
LLAMA_8B = ["--num-layers", "32", "--hidden-size", "4096", "--ffn-hidden-size", "14336", "--num-attention-heads", "32",
            "--group-query-attention", "--num-query-groups", "8", "--swiglu", "--normalization", "RMSNorm",
            "--position-embedding-type", "rope", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
            "--seq-length", "4096", "--max-position-embeddings", "8192", "--vocab-size", "128256"]
MOE = ["--num-layers", "16", "--hidden-size", "2048", "--ffn-hidden-size", "5632", "--num-attention-heads", "16",
       "--group-query-attention", "--num-query-groups", "4", "--swiglu", "--normalization", "RMSNorm",
       "--position-embedding-type", "rope", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
       "--seq-length", "4096", "--max-position-embeddings", "4096", "--vocab-size", "32000", "--num-experts", "8",
       "--moe-router-topk", "2", "--moe-grouped-gemm"]
GPT3_175B = ["--num-layers", "96", "--hidden-size", "12288", "--num-attention-heads", "96", "--seq-length", "2048",
             "--max-position-embeddings", "2048", "--vocab-size", "50257"]
HF = ["--model_name_or_path", "meta-llama/Llama-2-7b-hf", "--dataset_name", "wikitext", "--do_train",
      "--output_dir", "out", "--bf16"]
TORCHRUN_16 = ["torchrun", "--nnodes", "2", "--nproc-per-node", "8"]
DS_8 = ["deepspeed", "--num_gpus", "8"]
SLURM_16 = {"SLURM_NNODES": "2", "SLURM_NTASKS_PER_NODE": "8", "SLURM_NTASKS": "16", "SLURM_JOB_ID": "7"}
HOSTFILE = "node1 slots=8\nnode2 slots=8\n"


def ds(stage: int, **keys: Any) -> str:
    """A ds_config's text: ZeRO `stage`, bf16, and the given top-level keys (batch keys, sections)."""
    zero = {"stage": stage, **keys.pop("zero", {})}
    return json.dumps({**keys, "bf16": {"enabled": True}, "zero_optimization": zero}, indent=2)


HF_AUTO = json.dumps({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                      "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
                      "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"},
                      "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                                                "weight_decay": "auto"}},
                      "zero_optimization": {"stage": 3, "overlap_comm": True, "reduce_bucket_size": "auto",
                                            "stage3_prefetch_bucket_size": "auto",
                                            "stage3_param_persistence_threshold": "auto"}}, indent=2)


@dataclass(frozen=True)
class Case:
    name: str
    argv: tuple[str, ...]
    files: Mapping[str, str] = field(default_factory=dict)
    """Name (relative to the scratch folder) -> text: the user's files, hashed before and after."""
    model: str | None = None
    """llmperf's --model, for scripts without Megatron model flags."""
    env: Mapping[str, str] = field(default_factory=dict)
    expect: int = 0
    """tune's exit code: 0, 2 (the framework would refuse the command, or --apply cannot rewrite it), 3 nothing fits."""
    says: str = ""
    """Text the exit-2 / exit-3 message must hold."""
    search: str = ""
    """A --search YAML (written to llmperf-search.yaml in the scratch folder) that narrows or widens the space."""
    cwd: str = ""
    """The folder (relative to the scratch folder) the command is launched from: `../configs/ds.json` paths."""


def _megatron(name: str, argv: list[str], **kw: Any) -> Case:
    return Case(name, tuple(argv), **kw)


CASES: tuple[Case, ...] = (
    # Megatron-LM
    _megatron("mlm-gpt-tp2-pp2-full-recompute", [*TORCHRUN_16, "pretrain_gpt.py", *GPT_1B, "--micro-batch-size", "1",
              "--global-batch-size", "256", "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
              "--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1", "--bf16"]),
    _megatron("mlm-llama-distopt-sp", ["torchrun", "--nproc_per_node=8", "pretrain_gpt.py", *LLAMA_8B,
              "--micro-batch-size", "1", "--global-batch-size", "128", "--tensor-model-parallel-size=4",
              "--sequence-parallel", "--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather",
              "--bf16"]),
    _megatron("mlm-interleaved-vpp", [*TORCHRUN_16, "pretrain_gpt.py", *GPT_1B, "--micro-batch-size", "1",
              "--global-batch-size", "128", "--pipeline-model-parallel-size", "4",
              "--num-layers-per-virtual-pipeline-stage", "3", "--bf16"]),
    _megatron("mlm-context-parallel", ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py",
              *[w if w != "4096" else "8192" for w in LLAMA_8B], "--micro-batch-size", "1", "--global-batch-size", "32",
              "--tensor-model-parallel-size", "4", "--context-parallel-size", "2", "--sequence-parallel",
              "--use-distributed-optimizer", "--bf16"]),
    _megatron("mlm-moe-ep4-alltoall", ["torchrun", "--nnodes", "4", "--nproc-per-node", "8", "pretrain_gpt.py", *MOE,
              "--expert-model-parallel-size", "4", "--moe-token-dispatcher-type", "alltoall", "--micro-batch-size",
              "1", "--global-batch-size", "256", "--use-distributed-optimizer", "--bf16"]),
    _megatron("mlm-moe-ep8-etp1-allgather", ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", *MOE,
              "--expert-model-parallel-size", "8", "--expert-tensor-parallel-size", "1", "--tensor-model-parallel-size",
              "2", "--sequence-parallel", "--moe-token-dispatcher-type", "allgather", "--micro-batch-size", "1",
              "--global-batch-size", "64", "--use-distributed-optimizer", "--bf16"]),
    _megatron("mlm-mamba-not-modelled", ["torchrun", "--nproc-per-node", "8", "pretrain_mamba.py", *GPT_1B,
              "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16"], expect=2, says="Mamba"),
    _megatron("mlm-python-m-torch-distributed-run", ["python", "-m", "torch.distributed.run", "--nproc_per_node", "8",
              "pretrain_gpt.py", *GPT_1B, "--micro-batch-size", "2", "--global-batch-size", "64", "--fp16"]),
    _megatron("mlm-global-batch-derived", ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", *GPT_1B,
              "--micro-batch-size", "1", "--tensor-model-parallel-size", "2", "--bf16"]),
    _megatron("mlm-rampup", [*TORCHRUN_16, "pretrain_gpt.py", *GPT_1B, "--micro-batch-size", "1",
              "--global-batch-size", "256", "--rampup-batch-size", "32", "32", "1000000", "--bf16"]),
    _megatron("mlm-srun-slurm-env", ["srun", "python", "pretrain_gpt.py", *GPT_1B, "--micro-batch-size", "1",
              "--global-batch-size", "128", "--tensor-model-parallel-size", "2", "--bf16"], env=SLURM_16),
    _megatron("mlm-sbatch-wrap", ["sbatch", "--nodes=2", "--ntasks-per-node=8", "--wrap",
              "srun python pretrain_gpt.py " + " ".join(GPT_1B) + " --micro-batch-size 1 --global-batch-size 128 "
              "--bf16"]),
    _megatron("mlm-bash-c-torchrun", ["bash", "-c", "torchrun --nproc-per-node 8 pretrain_gpt.py " + " ".join(GPT_1B)
              + " --micro-batch-size 1 --global-batch-size 64 --bf16 2>&1 | tee train.log"]),
    _megatron("mlm-fp8-hybrid", ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", *LLAMA_8B,
              "--micro-batch-size", "1", "--global-batch-size", "64", "--tensor-model-parallel-size", "2",
              "--sequence-parallel", "--use-distributed-optimizer", "--bf16", "--fp8-format", "hybrid",
              "--transformer-impl", "transformer_engine"]),
    _megatron("mlm-gpt3-175b-on-8-infeasible", ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", *GPT3_175B,
              "--micro-batch-size", "1", "--global-batch-size", "8", "--bf16"], expect=3, says="largest model that would fit"),
    _megatron("mlm-selective-recompute", [*TORCHRUN_16, "pretrain_gpt.py", *GPT_1B, "--micro-batch-size", "2",
              "--global-batch-size", "256", "--recompute-activations", "--tensor-model-parallel-size", "2",
              "--sequence-parallel", "--bf16"]),
    _megatron("mlm-uneven-first-stage", [*TORCHRUN_16, "pretrain_gpt.py", *GPT_1B, "--micro-batch-size", "1",
              "--global-batch-size", "128", "--pipeline-model-parallel-size", "4",
              "--decoder-first-pipeline-num-layers", "3", "--bf16"]),
    _megatron("mlm-env-prefix", ["CUDA_DEVICE_MAX_CONNECTIONS=1", "torchrun", "--nproc-per-node", "8",
              "pretrain_gpt.py", *GPT_1B, "--micro-batch-size", "1", "--global-batch-size", "64",
              "--tensor-model-parallel-size", "2", "--bf16"]),
    _megatron("mlm-deepspeed-launcher-hostfile", ["deepspeed", "--hostfile", "hostfile", "pretrain_gpt.py", *GPT_1B,
              "--micro-batch-size", "1", "--global-batch-size", "128", "--bf16"], files={"hostfile": HOSTFILE}),
    _megatron("mlm-torchrun-elastic-nnodes", ["torchrun", "--nnodes", "1:4", "--nproc-per-node", "8", "pretrain_gpt.py",
              *GPT_1B, "--micro-batch-size", "1", "--global-batch-size", "384", "--bf16"]),  # 128: nothing at 3 nodes
    _megatron("mlm-srun-options", ["srun", "-N", "2", "--ntasks-per-node", "8", "python", "pretrain_gpt.py", *GPT_1B,
              "--micro-batch-size", "1", "--global-batch-size", "128", "--bf16"]),
    _megatron("epfllm-underscore-options", ["torchrun", "--nproc_per_node", "8", "finetune.py", "--model_name", "llama2",
              "--tensor_model_parallel_size", "8", "--pipeline_model_parallel_size", "1", "--num_layers", "32",
              "--hidden_size", "4096", "--num_attention_heads", "32", "--ffn_hidden_size", "11008", "--seq_length",
              "4096", "--max_position_embeddings", "4096", "--vocab_size", "32000", "--use_rms_norm",
              "--glu_activation", "swiglu", "--no_tie_embed_logits", "--position_embedding_type", "rotary", "--bf16",
              "--global_batch_size", "12", "--micro_batch_size", "1", "--sequence_parallel", "--recompute_granularity",
              "selective", "--use_flash_attn"]),
    _megatron("mlm-mpirun", ["mpirun", "-np", "16", "-H", "node1:8,node2:8", "python", "pretrain_gpt.py", *GPT_1B,
              "--micro-batch-size", "1", "--global-batch-size", "128", "--bf16"]),
    _megatron("mlm-torch-fsdp2", ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", *GPT_1B, "--micro-batch-size",
              "1", "--global-batch-size", "64", "--use-torch-fsdp2", "--untie-embeddings-and-output-weights",
              "--no-gradient-accumulation-fusion", "--bf16", "--ckpt-format", "torch_dist"]),
    _megatron("mlm-moe-no-layer-fits", ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py",
              *[{"16": "64", "2048": "7168", "5632": "18432", "8": "256"}.get(w, w) for w in MOE], "--micro-batch-size",
              "1", "--global-batch-size", "64", "--bf16", "--expert-model-parallel-size", "8"], expect=3,
              says="largest model that would fit"),
    # Megatron-DeepSpeed: pretrain_gpt.py --deepspeed --deepspeed_config
    Case("mds-zero0-pipeline-engine", (*DS_8, "pretrain_gpt.py", *GPT_1B, "--micro-batch-size", "1",
         "--global-batch-size", "64", "--pipeline-model-parallel-size", "2", "--bf16", "--deepspeed",
         "--deepspeed_config", "ds.json", "--zero-stage", "0"),
         files={"ds.json": ds(0, train_batch_size=64, train_micro_batch_size_per_gpu=1)}),
    Case("mds-zero1-no-pipeline", (*DS_8, "pretrain_gpt.py", *GPT_1B, "--micro-batch-size", "2",
         "--global-batch-size", "64", "--tensor-model-parallel-size", "2", "--bf16", "--deepspeed",
         "--deepspeed_config", "ds.json", "--zero-stage", "1", "--no-pipeline-parallel"),
         files={"ds.json": ds(1, train_batch_size=64, train_micro_batch_size_per_gpu=2, gradient_accumulation_steps=8)}),
    Case("mds-zero2-no-pipeline", (*DS_8, "pretrain_gpt.py", *GPT_1B, "--micro-batch-size", "1",
         "--global-batch-size", "64", "--bf16", "--deepspeed", "--deepspeed_config", "ds.json", "--zero-stage", "2",
         "--no-pipeline-parallel"), files={"ds.json": ds(2, train_batch_size=64, train_micro_batch_size_per_gpu=1)}),
    Case("mds-zero3-no-pipeline", (*DS_8, "pretrain_gpt.py", *GPT_1B, "--micro-batch-size", "1",
         "--global-batch-size", "64", "--bf16", "--deepspeed", "--deepspeed_config", "ds.json", "--zero-stage", "3",
         "--no-pipeline-parallel"), files={"ds.json": ds(3, train_batch_size=64, train_micro_batch_size_per_gpu=1)}),
    Case("mds-hostfile-pp2", ("deepspeed", "--hostfile", "hostfile", "pretrain_gpt.py", *GPT_1B, "--micro-batch-size",
         "1", "--global-batch-size", "128", "--pipeline-model-parallel-size", "2", "--checkpoint-activations",
         "--bf16", "--deepspeed", "--deepspeed_config", "ds.json"),
         files={"hostfile": HOSTFILE, "ds.json": ds(1, train_batch_size=128, train_micro_batch_size_per_gpu=1)}),
    Case("mds-include", ("deepspeed", "--hostfile", "hostfile", "--include", "node1:0,1,2,3@node2:0,1,2,3",
         "pretrain_gpt.py", *GPT_1B, "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16", "--deepspeed",
         "--deepspeed_config", "ds.json"),
         files={"hostfile": HOSTFILE, "ds.json": ds(1, train_batch_size=64, train_micro_batch_size_per_gpu=1)}),
    Case("mds-interval-in-ds-config", (*DS_8, "pretrain_gpt.py", *GPT_1B, "--micro-batch-size", "1",
         "--global-batch-size", "64", "--pipeline-model-parallel-size", "2", "--bf16", "--deepspeed",
         "--deepspeed_config", "ds.json", "--deepspeed-activation-checkpointing", "--checkpoint-activations"),
         files={"ds.json": json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
                                       "zero_optimization": {"stage": 1}, "bf16": {"enabled": True},
                                       "pipeline": {"activation_checkpoint_interval": 1},
                                       "activation_checkpointing": {"partition_activations": False}})}),
    Case("mds-torchrun-gas-and-micro", ("torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", *GPT_1B,
         "--micro-batch-size", "2", "--global-batch-size", "64", "--bf16", "--deepspeed", "--deepspeed_config",
         "ds.json"), files={"ds.json": ds(1, train_micro_batch_size_per_gpu=2, gradient_accumulation_steps=4)}),
    # DeepSpeed scripts (the model given with --model)
    Case("ds-tbs-and-micro-zero2", (*DS_8, "train.py", "--deepspeed_config", "ds.json"),
         files={"ds.json": ds(2, train_batch_size=64, train_micro_batch_size_per_gpu=1)}, model="llama2-7b"),
    Case("ds-micro-and-gas-zero3", (*DS_8, "train.py", "--deepspeed", "--deepspeed_config", "ds.json"),
         files={"ds.json": ds(3, train_micro_batch_size_per_gpu=2, gradient_accumulation_steps=4)}, model="llama2-7b"),
    Case("ds-tbs-and-gas", (*DS_8, "train.py", "--deepspeed", "--deepspeed_config", "ds.json"),
         files={"ds.json": ds(1, train_batch_size=128, gradient_accumulation_steps=4)}, model="llama2-7b"),
    Case("ds-tbs-and-gas-no-zero-section", (*DS_8, "train.py", "--deepspeed_config", "ds.json"),
         files={"ds.json": json.dumps({"train_batch_size": 64, "gradient_accumulation_steps": 8, "bf16": {"enabled": True}})},
         model="llama2-7b"),
    Case("ds-all-three", (*DS_8, "train.py", "--deepspeed_config", "ds.json"),
         files={"ds.json": ds(1, train_batch_size=128, train_micro_batch_size_per_gpu=4, gradient_accumulation_steps=4)},
         model="llama2-7b"),
    Case("ds-tbs-only", (*DS_8, "train.py", "--deepspeed_config", "ds.json"),
         files={"ds.json": ds(0, train_batch_size=64)}, model="llama2-7b"),
    Case("ds-zero3-offload-optimizer", (*DS_8, "train.py", "--deepspeed_config", "ds.json"),
         files={"ds.json": ds(3, train_batch_size=256, train_micro_batch_size_per_gpu=4,
                              zero={"offload_optimizer": {"device": "cpu", "pin_memory": True}})}, model="llama2-13b"),
    Case("ds-fp16-dynamic-loss-scale", (*DS_8, "train.py", "--deepspeed_config", "ds.json"),
         files={"ds.json": json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2,
                                       "fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 16},
                                       "zero_optimization": {"stage": 1, "reduce_bucket_size": 5e8}})},
         model="llama2-7b"),
    Case("ds-hostfile-zero3", ("deepspeed", "--hostfile", "hostfile", "train.py", "--deepspeed_config", "ds.json"),
         files={"hostfile": HOSTFILE, "ds.json": ds(3, train_batch_size=128, train_micro_batch_size_per_gpu=1)},
         model="llama2-13b"),
    Case("ds-include-localhost", ("deepspeed", "--include", "localhost:0,1,2,3", "train.py", "--deepspeed_config",
         "ds.json"), files={"ds.json": ds(2, train_batch_size=32, train_micro_batch_size_per_gpu=2)}, model="llama2-7b"),
    Case("ds-torchrun-launcher", ("torchrun", "--nproc-per-node", "8", "train.py", "--deepspeed_config", "ds.json"),
         files={"ds.json": ds(1, train_batch_size=64, train_micro_batch_size_per_gpu=1)}, model="llama3-8b"),
    Case("ds-release-0.5.4-zero1", ("LLMPERF_DEEPSPEED_VERSION=0.5.4", *DS_8, "train.py", "--deepspeed_config",
         "ds.json"), files={"ds.json": ds(1, train_batch_size=64, train_micro_batch_size_per_gpu=1)},
         model="llama2-7b"),
    Case("ds-srun-slurm", ("srun", "python", "train.py", "--deepspeed_config", "ds.json"), env=SLURM_16,
         files={"ds.json": ds(2, train_batch_size=128, train_micro_batch_size_per_gpu=1)}, model="llama2-7b"),
    Case("ds-llama70b-on-8-infeasible", (*DS_8, "train.py", "--deepspeed_config", "ds.json"),
         files={"ds.json": ds(0, train_batch_size=8, train_micro_batch_size_per_gpu=1)}, model="llama2-70b", expect=3,
         says="largest model"),
    Case("mds-no-batch-keys", (*DS_8, "pretrain_gpt.py", *GPT_1B, "--micro-batch-size", "1", "--global-batch-size",
         "64", "--bf16", "--deepspeed", "--deepspeed_config", "ds.json", "--tensor-model-parallel-size", "2"),
         files={"ds.json": ds(1)}, expect=2, says="train_micro_batch_size_per_gpu"),  # DeepSpeedConfig asserts
    Case("mds-gas-only", (*DS_8, "pretrain_gpt.py", *GPT_1B, "--micro-batch-size", "1", "--global-batch-size", "64",
         "--bf16", "--deepspeed", "--deepspeed_config", "ds.json", "--tensor-model-parallel-size", "2"),
         files={"ds.json": ds(1, gradient_accumulation_steps=16)}, expect=2, says="train_micro_batch_size_per_gpu"),
    Case("mds-ulysses", (*DS_8, "pretrain_gpt.py", *GPT_1B, "--micro-batch-size", "1", "--global-batch-size", "32",
         "--ds-sequence-parallel-size", "2", "--bf16", "--deepspeed", "--deepspeed_config", "ds.json",
         "--no-pipeline-parallel", "--zero-stage", "2", "--use-flash-attn-v2"),
         files={"ds.json": ds(2, train_batch_size=32, train_micro_batch_size_per_gpu=1)}),
    Case("mds-moe-ep-size", (*DS_8, "pretrain_gpt.py", *GPT_1B, "--micro-batch-size", "1", "--global-batch-size", "64",
         "--bf16", "--deepspeed", "--deepspeed_config", "ds.json", "--num-experts", "8", "--ep-size", "4",
         "--no-pipeline-parallel", "--zero-stage", "1"),
         files={"ds.json": ds(1, train_batch_size=64, train_micro_batch_size_per_gpu=1)}),
    Case("ds-micro-auto-plain", (*DS_8, "train.py", "--deepspeed_config", "ds.json"),
         files={"ds.json": ds(1, train_batch_size=64, train_micro_batch_size_per_gpu="auto")}, model="llama2-7b"),
    Case("ds-offload-param-zero3", (*DS_8, "train.py", "--deepspeed_config", "ds.json"),
         files={"ds.json": ds(3, train_batch_size=64, train_micro_batch_size_per_gpu=1,
                              zero={"offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}})},
         model="llama2-7b"),
    Case("ds-zeropp-hpz", (*DS_8, "train.py", "--deepspeed_config", "ds.json"),
         files={"ds.json": ds(3, train_batch_size=64, train_micro_batch_size_per_gpu=1,
                              zero={"zero_hpz_partition_size": 8, "zero_quantized_weights": True})}, model="llama2-7b"),
    Case("ds-release-0.4-zero3", ("LLMPERF_DEEPSPEED_VERSION=0.4.0", *DS_8, "train.py", "--deepspeed_config",
         "ds.json"), files={"ds.json": ds(3, train_batch_size=64, train_micro_batch_size_per_gpu=1)},
         model="llama2-7b"),
    Case("ds-deepscale-config", (*DS_8, "train.py", "--deepspeed", "--deepscale_config", "ds.json"),
         files={"ds.json": ds(1, train_batch_size=64, train_micro_batch_size_per_gpu=1)}, model="llama2-7b"),
    Case("ds-config-equals-form", (*DS_8, "train.py", "--deepspeed", "--deepspeed_config=ds.json"),
         files={"ds.json": ds(1, train_batch_size=64, train_micro_batch_size_per_gpu=1)}, model="llama2-7b"),
    Case("ds-duplicate-keys-refused", (*DS_8, "train.py", "--deepspeed_config", "ds.json"),
         files={"ds.json": '{"train_batch_size": 64, "train_batch_size": 32, "zero_optimization": {"stage": 1}}'},
         model="llama2-7b", expect=2, says="train_batch_size"),
    Case("mds-config-in-subfolder", (*DS_8, "pretrain_gpt.py", *GPT_1B, "--micro-batch-size", "1",
         "--global-batch-size", "64", "--bf16", "--deepspeed", "--deepspeed_config", "cfg/ds.json"),
         files={"cfg/ds.json": ds(1, train_batch_size=64, train_micro_batch_size_per_gpu=1)}),
    # Hugging Face Trainer and accelerate
    Case("hf-trainer-no-batch-keys", (*DS_8, "run_clm.py", "--deepspeed", "ds.json", "--per_device_train_batch_size",
         "2", "--gradient_accumulation_steps", "2", *HF), files={"ds.json": ds(2)}, model="llama2-7b", expect=2,
         says="train_micro_batch_size_per_gpu"),  # the Trainer fills only keys the file has ("auto"), none here
    Case("hf-trainer-auto-zero3", (*DS_8, "run_clm.py", "--deepspeed", "ds.json", "--per_device_train_batch_size",
         "2", "--gradient_accumulation_steps", "4", *HF), files={"ds.json": HF_AUTO}, model="llama2-7b"),
    Case("hf-trainer-torchrun-checkpointing", ("torchrun", "--nproc-per-node", "8", "run_clm.py", "--deepspeed",
         "ds.json", "--per_device_train_batch_size", "1", "--gradient_checkpointing", *HF),
         files={"ds.json": HF_AUTO.replace('"stage": 3', '"stage": 2')}, model="llama2-7b"),
    Case("accelerate-plugin-yaml", ("accelerate", "launch", "--config_file", "acc.yaml", "run_clm.py",
         "--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "4", *HF),
         files={"acc.yaml": "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\ndeepspeed_config:\n"
                            "  zero_stage: 2\n  gradient_accumulation_steps: 4\nmixed_precision: bf16\n"
                            "num_machines: 1\nnum_processes: 8\n"}, model="llama2-7b"),
    Case("accelerate-ds-config-file-option", ("accelerate", "launch", "--use_deepspeed", "--num_processes", "8",
         "--deepspeed_config_file", "ds.json", "run_clm.py", "--per_device_train_batch_size", "2", *HF),
         files={"ds.json": HF_AUTO}, model="llama2-7b"),
    Case("accelerate-ds-config-file-in-yaml", ("accelerate", "launch", "--config_file", "acc.yaml", "run_clm.py",
         "--per_device_train_batch_size", "2", *HF),
         files={"ds.json": HF_AUTO.replace('"stage": 3', '"stage": 2'),
                "acc.yaml": "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n"
                            "  zero3_init_flag: false\nnum_machines: 1\nnum_processes: 8\n"}, model="llama2-7b"),
)


def _hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


RunCli = Callable[[list[str]], tuple[int, str, str]]


def check_case(case: Case, folder: Path, run_cli: RunCli, deepspeed_config: Any | None = None,
               seen: dict[str, Any] | None = None) -> list[str]:
    """Every problem of tune --apply --dry-run on `case`, run from `folder` (or its `case.cwd`) with `run_cli`;
    `seen` receives tune's JSON object ("data") for further checks."""
    for name, text in case.files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    search = ["--search", str(folder / "llmperf-search.yaml")] if case.search else []
    if case.search:
        (folder / "llmperf-search.yaml").write_text(case.search)
    (folder / case.cwd).mkdir(parents=True, exist_ok=True)
    os.chdir(folder / case.cwd)
    before = _hashes(folder)
    model = ["--model", case.model] if case.model else []
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--format", "json", *model, *search, "--apply",
                              "--dry-run", "--", *case.argv])
    data = json.loads(out)  # --format json: one object, errors included
    if seen is not None:
        seen["data"] = data
    problems = [f"user file {k} changed" for k, v in before.items() if _hashes(folder).get(k) != v]
    if code != case.expect:
        return [*problems, f"exit {code}, expected {case.expect}: {data.get('error', err)[-600:]}"]
    if code != 0:
        message = data.get("error", "")
        if case.says not in message:
            problems.append(f"exit {code} message lacks {case.says!r}: {message[-600:]}")
        return problems
    return problems + _check_applied(data, model, run_cli, deepspeed_config)


def _check_applied(data: dict[str, Any], model: list[str], run_cli: RunCli, deepspeed_config: Any | None) -> list[str]:
    applied, best = data["applied"], data["top"][0]
    code, out, err = run_cli(["explain", "--format", "json", *model, "--", *applied["argv"]])
    if code != 0:
        return [f"explain refuses the applied command (exit {code}): {err[-600:]}"]
    resolved = json.loads(out)
    problems = [f"{key}: explain {resolved[key]}, tune {best[key]}" for key in
                ("tp", "pp", "vpp", "cp", "micro_batch_size", "zero_stage", "distributed_optimizer", "sequence_parallel")
                if resolved[key] != best[key]]
    held = re.search(r"(\d+) GPUs, global batch (\d+)", data["job"])  # what tune holds fixed
    if (resolved["world_size"], resolved["global_batch_size"]) != (int(held[1]), int(held[2])):
        problems.append(f"explain runs {resolved['world_size']} GPUs, global batch {resolved['global_batch_size']}; "
                        f"tune held {held[0]}")
    for path in applied.get("new_files", []):
        problems += _deepspeed_reads(path, resolved, deepspeed_config)
    code, out, err = run_cli(["predict", "--cluster", "dgx-h100", "--format", "json", *model, "--", *applied["argv"]])
    predicted = json.loads(out.strip().splitlines()[-1])["step_time_s"] if code in (0, 3) else None
    if predicted is None or abs(predicted - best["step_time_s"]) > 1e-5 * best["step_time_s"]:  # JSON keeps 6 digits
        problems.append(f"predict of the applied command: {predicted} s (exit {code}), tune listed "
                        f"{best['step_time_s']} s for {best['layout']} {err[-300:]}")
    return problems


def _deepspeed_reads(path: str, resolved: dict[str, Any], deepspeed_config: Any | None) -> list[str]:
    """DeepSpeed's DeepSpeedConfig on a tuned ds_config (the Trainer's "auto" values filled as its
    HfTrainerDeepSpeedConfig.trainer_config_process fills them), at the data-parallel size explain resolves."""
    written = json.loads(Path(path).read_text())
    stage = (written.get("zero_optimization") or {}).get("stage")
    if written.get("train_micro_batch_size_per_gpu") not in (resolved["micro_batch_size"], "auto") or stage not in (
            resolved["zero_stage"], "auto"):  # what a reader of the copy (test_tune_command's) looks for
        return [f"{path} does not state the tuned micro-batch and ZeRO stage: {written}"]
    if deepspeed_config is None:
        return []
    raw = filled(written, resolved)

    class Mpu:
        def get_data_parallel_world_size(self) -> int:
            return resolved["dp"]  # Megatron-DeepSpeed's mpu: the data-parallel group, Ulysses ranks apart

    try:
        ds = deepspeed_config.DeepSpeedConfig(raw, mpu=Mpu())
    except Exception as err:  # noqa: BLE001 - any refusal is the finding
        return [f"DeepSpeedConfig rejects {path}: {type(err).__name__}: {err}"]
    got = (ds.train_batch_size, ds.train_micro_batch_size_per_gpu, ds.zero_optimization_stage)
    want = (resolved["global_batch_size"], resolved["micro_batch_size"], resolved["zero_stage"])
    return [] if got == want else [f"DeepSpeed reads {path} as (batch, micro, stage) {got}, explain {want}"]


_FLOATS = ("lr", "eps", "weight_decay", "gradient_clipping")


def filled(node: Any, resolved: dict[str, Any], key: str = "") -> Any:
    """`node` with the Trainer's "auto" values as the resolved job has them (batch, stage, precision off), numbers
    elsewhere (bucket sizes, learning rates): what DeepSpeed receives from the Trainer."""
    if isinstance(node, dict):
        return {k: filled(v, resolved, k) for k, v in node.items()}
    if node != "auto":
        return node
    dp = resolved["dp"]
    known = {"train_micro_batch_size_per_gpu": resolved["micro_batch_size"],
             "train_batch_size": resolved["global_batch_size"],
             "gradient_accumulation_steps": resolved["global_batch_size"] // (resolved["micro_batch_size"] * dp),
             "stage": resolved["zero_stage"], "enabled": False, "betas": [0.9, 0.999]}
    return known.get(key, 1e-4 if key in _FLOATS else 1_000_000)
