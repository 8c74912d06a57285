"""A second corpus of launch commands as users write them (issue 7's --apply criteria), apart from apply_corpus.py's:
BERT and T5 entry points, Mixtral-style MoE with EP on several nodes, torchrun rendezvous and --node_rank forms, Slurm
srun, the deepspeed launcher with --hostfile / --master_port, the Hugging Face Trainer's `--deepspeed ds.json`,
accelerate with a DeepSpeed config file whose batch keys are numbers, configs named by relative paths (`./`, `../`),
a ds_config whose tuned-copy name a user's file already holds, epfLLM's Megatron-LLM with CP widened by --search,
and jobs that do not fit or that the framework refuses. Each is run by apply_corpus.check_case."""

from __future__ import annotations

import json
from typing import Any

from .apply_corpus import GPT_1B, HF, HF_AUTO, HOSTFILE, LLAMA_8B, Case, ds

BERT_LARGE = ["--num-layers", "24", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "512",
              "--max-position-embeddings", "512", "--vocab-size", "30522", "--lr", "1e-4", "--train-iters", "1000000",
              "--data-path", "bert_text_sentence", "--split", "949,50,1", "--lr-decay-style", "linear"]
T5_BASE = ["--encoder-num-layers", "12", "--decoder-num-layers", "12", "--hidden-size", "768", "--num-attention-heads",
           "12", "--kv-channels", "64", "--ffn-hidden-size", "3072", "--encoder-seq-length", "512",
           "--decoder-seq-length", "128", "--max-position-embeddings", "512", "--vocab-size", "32128",
           "--vocab-extra-ids", "100", "--lr", "1e-4", "--train-iters", "100000"]
MIXTRAL = ["--num-layers", "32", "--hidden-size", "4096", "--ffn-hidden-size", "14336", "--num-attention-heads", "32",
           "--group-query-attention", "--num-query-groups", "8", "--swiglu", "--normalization", "RMSNorm",
           "--position-embedding-type", "rope", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
           "--seq-length", "4096", "--max-position-embeddings", "32768", "--vocab-size", "32000", "--num-experts", "8",
           "--moe-router-topk", "2", "--moe-router-load-balancing-type", "aux_loss", "--moe-aux-loss-coeff", "1e-2",
           "--moe-grouped-gemm", "--moe-token-dispatcher-type", "alltoall"]
LLAMA2_70B = ["--num-layers", "80", "--hidden-size", "8192", "--ffn-hidden-size", "28672", "--num-attention-heads",
              "64", "--group-query-attention", "--num-query-groups", "8", "--swiglu", "--normalization", "RMSNorm",
              "--position-embedding-type", "rope", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
              "--seq-length", "4096", "--max-position-embeddings", "4096", "--vocab-size", "32000"]
MEGATRON_LLM = ["finetune.py", "--model_name", "llama2", "--tensor_model_parallel_size", "4",
                "--pipeline_model_parallel_size", "1", "--num_layers", "32", "--hidden_size", "4096",
                "--num_attention_heads", "32", "--ffn_hidden_size", "11008", "--seq_length", "16384",
                "--max_position_embeddings", "16384", "--vocab_size", "32000", "--use_rms_norm", "--glu_activation",
                "swiglu", "--no_tie_embed_logits", "--position_embedding_type", "rotary", "--bf16",
                "--global_batch_size", "16", "--micro_batch_size", "1", "--sequence_parallel", "--use_flash_attn"]
TORCHRUN_2x8 = ["torchrun", "--nnodes", "2", "--nproc_per_node", "8"]
RDZV = ["torchrun", "--nnodes=2", "--nproc_per_node=8", "--rdzv_id=456", "--rdzv_backend=c10d",
        "--rdzv_endpoint=node1:29500"]
NODE_RANK = ["torchrun", "--nproc_per_node", "8", "--nnodes", "2", "--node_rank", "0", "--master_addr", "10.0.0.1",
             "--master_port", "6000"]
SLURM_4x8 = {"SLURM_NNODES": "4", "SLURM_NTASKS_PER_NODE": "8", "SLURM_NTASKS": "32", "SLURM_JOB_ID": "42"}
HF_TRAINER = [*HF, "--num_train_epochs", "1", "--learning_rate", "2e-5", "--logging_steps", "10"]


def _acc_yaml(extra: str) -> str:
    """An accelerate config file (no mixed_precision: beside a deepspeed_config_file accelerate refuses it)."""
    return ("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\n" + extra +
            "num_machines: 1\nnum_processes: 8\nmachine_rank: 0\n")


def _numbers(**keys: Any) -> str:
    """A Trainer / accelerate ds_config whose batch keys are numbers (not "auto"), ZeRO 2, bf16 auto."""
    return json.dumps({**keys, "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 2, "overlap_comm": True}},
                      indent=2)


CASES: tuple[Case, ...] = (
    # Megatron-LM entry points
    Case("bert-large-torchrun", ("torchrun", "--nproc_per_node", "8", "pretrain_bert.py", *BERT_LARGE,
         "--micro-batch-size", "4", "--global-batch-size", "256", "--fp16")),
    Case("t5-base-not-modelled", ("torchrun", "--nproc_per_node=8", "pretrain_t5.py", *T5_BASE, "--micro-batch-size",
         "16", "--global-batch-size", "128", "--bf16"), expect=2, says="encoder-decoder"),
    Case("mixtral-ep8-pp4-32gpus", (*["torchrun", "--nnodes", "4", "--nproc_per_node", "8"], "pretrain_gpt.py",
         *MIXTRAL, "--expert-model-parallel-size", "8", "--pipeline-model-parallel-size", "4", "--micro-batch-size",
         "1", "--global-batch-size", "256", "--use-distributed-optimizer", "--bf16")),
    Case("mixtral-ep4-tp2-sp", ("torchrun", "--nnodes", "2", "--nproc-per-node", "8", "pretrain_gpt.py", *MIXTRAL,
         "--expert-model-parallel-size", "4", "--tensor-model-parallel-size", "2", "--sequence-parallel",
         "--pipeline-model-parallel-size", "2", "--micro-batch-size", "1", "--global-batch-size", "128",
         "--use-distributed-optimizer", "--recompute-granularity", "full", "--recompute-method", "uniform",
         "--recompute-num-layers", "1", "--bf16")),
    Case("llama70b-64gpus-tp8-pp4", ("torchrun", "--nnodes", "8", "--nproc-per-node", "8", "pretrain_gpt.py",
         *LLAMA2_70B, "--tensor-model-parallel-size", "8", "--pipeline-model-parallel-size", "4",
         "--sequence-parallel", "--use-distributed-optimizer", "--micro-batch-size", "1", "--global-batch-size",
         "512", "--bf16", "--overlap-grad-reduce")),
    Case("gpt-torchrun-rdzv", (*RDZV, "pretrain_gpt.py", *GPT_1B, "--micro-batch-size", "2", "--global-batch-size",
         "256", "--bf16")),
    Case("gpt-torchrun-node-rank", (*NODE_RANK, "pretrain_gpt.py", *GPT_1B, "--micro-batch-size", "4",
         "--global-batch-size", "128", "--tensor-model-parallel-size", "2", "--bf16")),
    Case("gpt-srun-32-tasks", ("srun", "--nodes", "4", "--ntasks-per-node", "8", "--gpus-per-node", "8",
         "--cpus-per-task", "8", "python", "-u", "pretrain_gpt.py", *LLAMA_8B, "--micro-batch-size", "1",
         "--global-batch-size", "256", "--tensor-model-parallel-size", "2", "--sequence-parallel", "--bf16"),
         env=SLURM_4x8),
    Case("gpt-vpp-block-recompute", (*TORCHRUN_2x8, "pretrain_gpt.py", *GPT_1B, "--micro-batch-size", "1",
         "--global-batch-size", "64", "--pipeline-model-parallel-size", "4", "--num-layers-per-virtual-pipeline-stage",
         "2", "--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "2",
         "--bf16")),
    Case("gpt-fp16-equals-forms", ("torchrun", "--nproc-per-node=8", "pretrain_gpt.py", *GPT_1B,
         "--micro-batch-size=2", "--global-batch-size=64", "--tensor-model-parallel-size=2", "--fp16",
         "--loss-scale-window", "1000")),
    Case("megatron-llm-cp-widened", ("torchrun", "--nproc_per_node", "8", *MEGATRON_LLM),
         search="context_parallel: [1, 2, 4, 8]\n"),
    # the framework refuses the command, or nothing fits
    Case("gpt-fp16-and-bf16-refused", ("torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", *GPT_1B,
         "--micro-batch-size", "1", "--global-batch-size", "64", "--fp16", "--bf16"), expect=2, says="bf16"),
    Case("gpt-tp4-on-6-gpus-refused", ("torchrun", "--nproc-per-node", "6", "pretrain_gpt.py", *GPT_1B,
         "--micro-batch-size", "1", "--global-batch-size", "60", "--tensor-model-parallel-size", "4", "--bf16"),
         expect=2, says="6"),
    Case("gpt-batch-not-divisible-refused", (*TORCHRUN_2x8, "pretrain_gpt.py", *GPT_1B, "--micro-batch-size", "1",
         "--global-batch-size", "100", "--bf16"), expect=2, says="100"),
    Case("llama70b-on-8-gpus-infeasible", ("torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", *LLAMA2_70B,
         "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16"), expect=3, says="largest model"),
    Case("long-sequence-narrowed-infeasible", ("torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", *LLAMA_8B,
         "--seq-length", "131072", "--max-position-embeddings", "131072", "--micro-batch-size", "1",
         "--global-batch-size", "8", "--bf16"), search="context_parallel: [1]\ntensor_parallel: [1]\n", expect=3,
         says="largest model"),
    # Megatron-DeepSpeed
    Case("mds-hostfile-num-nodes-dot-slash", ("deepspeed", "--hostfile", "hostfile", "--num_nodes", "2", "--num_gpus",
         "8", "pretrain_gpt.py", *GPT_1B, "--micro-batch-size", "2", "--global-batch-size", "256",
         "--tensor-model-parallel-size", "2", "--bf16", "--deepspeed", "--deepspeed_config", "./ds_config.json",
         "--zero-stage", "1", "--no-pipeline-parallel"),
         files={"hostfile": HOSTFILE, "ds_config.json": ds(1, train_batch_size=256, train_micro_batch_size_per_gpu=2)}),
    Case("mds-config-in-parent-folder", ("deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *GPT_1B,
         "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16", "--deepspeed", "--deepspeed_config",
         "../configs/ds_zero1.json", "--zero-stage", "1"), cwd="run",
         files={"configs/ds_zero1.json": ds(1, train_batch_size=64, train_micro_batch_size_per_gpu=1)}),
    Case("mds-tuned-name-taken", ("deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *GPT_1B, "--micro-batch-size",
         "16", "--global-batch-size", "128", "--bf16", "--deepspeed", "--deepspeed_config", "ds.json"),
         files={"ds.json": ds(0, train_batch_size=128, train_micro_batch_size_per_gpu=16),
                "ds.llmperf-tuned.json": ds(3, train_batch_size=8, train_micro_batch_size_per_gpu=1)}),
    Case("mds-fp16-in-flags-and-config", ("deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *GPT_1B,
         "--micro-batch-size", "8", "--global-batch-size", "64", "--fp16", "--deepspeed", "--deepspeed_config",
         "ds.json", "--zero-stage", "0"),
         files={"ds.json": json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 8,
                                       "fp16": {"enabled": True, "loss_scale": 0},
                                       "zero_optimization": {"stage": 0}})}),
    Case("mds-srun-slurm", ("srun", "python", "pretrain_gpt.py", *GPT_1B, "--micro-batch-size", "1",
         "--global-batch-size", "256", "--bf16", "--deepspeed", "--deepspeed_config", "ds.json", "--zero-stage",
         "1"), env=SLURM_4x8, files={"ds.json": ds(1, train_batch_size=256, train_micro_batch_size_per_gpu=1)}),
    # DeepSpeed scripts
    Case("ds-master-port-include", ("deepspeed", "--master_port", "29501", "--include", "localhost:0,1,2,3,4,5,6,7",
         "train.py", "--deepspeed", "--deepspeed_config", "ds_config.json"),
         files={"ds_config.json": ds(2, train_batch_size=64, train_micro_batch_size_per_gpu=8)}, model="llama2-7b"),
    Case("ds-hostfile-num-nodes", ("deepspeed", "--hostfile", "hostfile", "--num_nodes", "2", "train.py",
         "--deepspeed_config", "cfg/zero3.json"),
         files={"hostfile": HOSTFILE, "cfg/zero3.json": ds(3, train_micro_batch_size_per_gpu=1,
                                                             gradient_accumulation_steps=8)}, model="llama2-13b"),
    Case("ds-13b-on-1-gpu-infeasible", ("deepspeed", "--num_gpus", "1", "train.py", "--deepspeed_config", "ds.json"),
         files={"ds.json": ds(2, train_batch_size=16, train_micro_batch_size_per_gpu=1)}, model="llama2-13b",
         expect=3, says="largest model"),
    # Hugging Face Trainer
    Case("hf-deepspeed-hostfile-z3", ("deepspeed", "--hostfile", "hostfile", "run_clm.py", "--deepspeed",
         "ds_z3.json", "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2", *HF_TRAINER),
         files={"hostfile": HOSTFILE, "ds_z3.json": HF_AUTO}, model="llama2-7b"),
    Case("hf-torchrun-nnodes-numbers", (*TORCHRUN_2x8, "run_clm.py", "--deepspeed", "configs/ds_z2.json",
         "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2", *HF_TRAINER),
         files={"configs/ds_z2.json": _numbers(train_micro_batch_size_per_gpu=4, gradient_accumulation_steps=2)},
         model="llama2-7b"),
    Case("hf-deepspeed-equals-form", ("torchrun", "--nproc_per_node", "8", "run_clm.py", "--deepspeed=ds.json",
         "--per_device_train_batch_size", "8", *HF_TRAINER), files={"ds.json": HF_AUTO}, model="llama2-7b"),
    Case("hf-srun-slurm", ("srun", "python", "run_clm.py", "--deepspeed", "ds.json", "--per_device_train_batch_size",
         "2", "--gradient_accumulation_steps", "4", *HF_TRAINER), env=SLURM_4x8,
         files={"ds.json": HF_AUTO.replace('"stage": 3', '"stage": 1')}, model="llama2-7b"),
    # accelerate with its DeepSpeed plugin: batch keys given as numbers in the config file
    Case("accelerate-file-micro-and-gas", ("accelerate", "launch", "--use_deepspeed", "--num_processes", "8",
         "--deepspeed_config_file", "ds.json", "run_clm.py", "--per_device_train_batch_size", "4",
         "--gradient_accumulation_steps", "2", *HF_TRAINER),
         files={"ds.json": _numbers(train_micro_batch_size_per_gpu=4, gradient_accumulation_steps=2)},
         model="llama2-7b"),
    Case("accelerate-yaml-file-micro-only", ("accelerate", "launch", "--config_file", "acc.yaml", "run_clm.py",
         "--per_device_train_batch_size", "4", *HF_TRAINER),
         files={"ds.json": _numbers(train_micro_batch_size_per_gpu=4),
                "acc.yaml": _acc_yaml("deepspeed_config:\n  deepspeed_config_file: ds.json\n  zero3_init_flag: false\n")},
         model="llama2-7b"),
    Case("accelerate-file-train-and-micro", ("accelerate", "launch", "--use_deepspeed", "--num_processes", "8",
         "--num_machines", "1", "--deepspeed_config_file", "./ds.json", "run_clm.py", "--per_device_train_batch_size",
         "8", *HF_TRAINER),
         files={"ds.json": _numbers(train_batch_size=64, train_micro_batch_size_per_gpu=8)},
         model="llama2-7b"),
    Case("accelerate-plugin-options", ("accelerate", "launch", "--use_deepspeed", "--num_processes", "8",
         "--zero_stage", "2", "--gradient_accumulation_steps", "4", "--mixed_precision", "bf16", "run_clm.py",
         "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "4", *HF_TRAINER), model="llama2-7b"),
)
