"""The public sources of public_runs.csv and the networks their rows train, as compile_public_runs.py cites them.

`Arch`: a network as its framework configures it (layers, widths, vocabulary, and the launch flags dev.csv has no
column for), with the file at a commit that says so. `Source`: one publication of measurements (P01-P08): where it
is, its framework, cluster, precision, optimizer sharding, recipe flags and what it leaves unsaid. Every value is read
from the named source; nothing here is fitted.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Arch:
    """A network as its framework configures it (source named in `where`)."""

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_query_groups: int | None
    """None = multi-head attention (the column stays blank)."""
    ffn_hidden_size: int
    vocab_size: int
    flags: str
    """Launch flags for what dev.csv has no column for (Megatron spelling)."""
    where: str


LLAMA = "--swiglu --normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear"
NEMOTRON = ("--squared-relu --position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear "
            "--apply-layernorm-1p")
# NeMo's Llama and Nemotron configs train without dropout (llama.py LlamaConfig / Llama3Config hidden_dropout = 0.0,
# attention_dropout = 0.0; nemotron.py NemotronConfig likewise, @8e3d65dcfe; the launcher's llama3_8b.yaml,
# llama3_1_405b.yaml and nemotron_340b.yaml @24c3d6bb say the same), where Megatron-LM defaults to 0.1: no dropout
# masks are kept (Megatron's GPT-3 configs keep 0.1). So do Megatron-Bridge's Llama and Qwen3-MoE models @067f987df
# (llama_bridge.py / qwen3_moe_bridge.py hidden_dropout = 0.0; attention_dropout from config.json, 0.0).
NO_DROPOUT = "--hidden-dropout 0 --attention-dropout 0"
NEMO_LLAMA = f"{LLAMA} {NO_DROPOUT}"
NEMO_NEMOTRON = f"{NEMOTRON} {NO_DROPOUT}"
# Megatron-Bridge H100 Qwen3 recipe (perf_recipes/qwen/h100/qwen3_moe.py): flex dispatcher with the HybridEP
# backend, routing force-balanced ('we force-balance the token distribution among experts').
QWEN3_MOE = (NEMO_LLAMA + " --qk-layernorm --kv-channels 128 --num-experts 128 --moe-router-topk 8 --moe-grouped-gemm "
             "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep --moe-router-force-load-balancing")
GPT3 = ""
NEMO_ARCH = "NVIDIA/NeMo nemo/collections/llm/gpt/model/{} @8e3d65dcfe"
LAUNCHER_ARCH = "NVIDIA/NeMo-Framework-Launcher launcher_scripts/conf/training/gpt3/{}.yaml @80353286"
ARCHS: dict[str, Arch] = {a.name: a for a in (
    # GPT-3 family of NeMo (GPT-2 BPE vocabulary, learned positions, GeLU, LayerNorm, tied embeddings).
    Arch("GPT3-5B", 24, 4096, 32, None, 16384, 50257, GPT3, LAUNCHER_ARCH.format("5b") + " (GPT2BPETokenizer)"),
    Arch("GPT3-20B", 44, 6144, 48, None, 24576, 50257, GPT3, LAUNCHER_ARCH.format("20b")),
    Arch("GPT3-175B", 96, 12288, 96, None, 49152, 50257, GPT3, LAUNCHER_ARCH.format("175b")),
    Arch("LLAMA2-7B", 32, 4096, 32, None, 11008, 32000, NEMO_LLAMA, NEMO_ARCH.format("llama.py Llama2Config7B")),
    Arch("LLAMA2-13B", 40, 5120, 40, None, 13824, 32000, NEMO_LLAMA, NEMO_ARCH.format("llama.py Llama2Config13B")),
    Arch("LLAMA2-70B", 80, 8192, 64, 8, 28672, 32000, NEMO_LLAMA, NEMO_ARCH.format("llama.py Llama2Config70B")),
    Arch("LLAMA3-8B", 32, 4096, 32, 8, 14336, 128256, NEMO_LLAMA, NEMO_ARCH.format("llama.py Llama3Config8B")),
    Arch("LLAMA3-70B", 80, 8192, 64, 8, 28672, 128256, NEMO_LLAMA, NEMO_ARCH.format("llama.py Llama3Config70B")),
    Arch("LLAMA3.1-405B", 126, 16384, 128, 8, 53248, 128256,
         f"{NEMO_LLAMA} --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split",
         NEMO_ARCH.format("llama.py Llama31Config405B") + "; 126 layers over PP8 x VP8 "
         "split with the embedding and the loss counted as layers (NVIDIA-NeMo/Megatron-Bridge "
         "src/megatron/bridge/recipes/llama/h100/llama3.py @067f987df, 405B recipe: account_for_embedding/loss_in_pipeline_split)"),
    Arch("Nemotron-8B", 32, 4096, 32, None, 16384, 256000, NEMO_NEMOTRON, NEMO_ARCH.format("nemotron.py Nemotron3Config8B")),
    Arch("Nemotron-22B", 40, 6144, 48, None, 24576, 256000, NEMO_NEMOTRON, NEMO_ARCH.format("nemotron.py Nemotron4Config22B")),
    Arch("Nemotron-340B", 96, 18432, 96, 8, 73728, 256000, NEMO_NEMOTRON, NEMO_ARCH.format("nemotron.py Nemotron4Config340B")),
    Arch("Qwen3-30B-A3B", 48, 2048, 32, 4, 6144, 151936, QWEN3_MOE + " --moe-ffn-hidden-size 768",
         "Qwen/Qwen3-30B-A3B config.json (48 layers, h 2048, 32 heads / 4 KV, head 128, 128 experts top-8, expert FFN 768)"),
    Arch("Qwen3-235B-A22B", 94, 4096, 64, 4, 12288, 151936, QWEN3_MOE + " --moe-ffn-hidden-size 1536",
         "Qwen/Qwen3-235B-A22B config.json (94 layers, h 4096, 64 heads / 4 KV, head 128, 128 experts top-8, expert FFN 1536)"),
    # BLOOM-176B (bigscience-workshop/bigscience train/tr11-176B-ml/README.md): ALiBi, embedding LayerNorm, GeLU.
    Arch("BLOOM-176B", 70, 14336, 112, None, 57344, 250880, "--position-embedding-type alibi",
         "bigscience-workshop/bigscience train/tr11-176B-ml/README.md (NLAYERS 70, NHIDDEN 14336, NHEADS 112; vocab 250,680 padded to 250,880)"),
)}

H100 = dict(gpu_type="H100-SXM5-80GB", gpu_memory_gb="80", gpus_per_node="8",
            intra_node_interconnect="NVLink4/NVSwitch (900 GB/s bidir per GPU)",
            inter_node_network="InfiniBand NDR 400Gb/s x8 per node (DGX H100)")
A100_SELENE = dict(gpu_type="A100-SXM4-80GB", gpu_memory_gb="80", gpus_per_node="8",
                   intra_node_interconnect="NVLink3/NVSwitch (600 GB/s bidir per GPU)",
                   inter_node_network="InfiniBand HDR 200Gb/s x8 per node (DGX A100 SuperPOD)")
A100_JEAN_ZAY = dict(gpu_type="A100-SXM4-80GB", gpu_memory_gb="80", gpus_per_node="8",
                     intra_node_interconnect="NVLink (README: 'NVLink 4 inter-gpu connects')",
                     inter_node_network="Omni-Path 100Gb/s x4 per node (Jean Zay; README: 4 OmniPath links)")


@dataclass(frozen=True)
class Source:
    source_id: str
    source: str
    location: str
    framework: str
    cluster: dict[str, str]
    precision: str
    zero: str
    flags: str
    """Recipe flags common to the source's rows (overlaps); added to each row's notes."""
    caveat: str
    """What the source does not say, for every row."""
    confidence: str


NEMO_2407 = Source(
    "P01", "NVIDIA NeMo 24.07 performance summary (pre-training, FP8, DGX-H100)",
    "github.com/NVIDIA/NeMo docs/source/performance/performance_summary.md @3a8081fef6 (2024-08-21, '24.07 vboost "
    "numbers'), Pretraining table",
    "Megatron-Core (NeMo 24.07)", H100, "fp8 (Transformer Engine, hybrid)", "distributed optimizer (NeMo mcore recipes)",
    "--overlap-grad-reduce --overlap-param-gather --tp-comm-overlap",
    "recompute not stated (blank = none); sequence parallelism assumed on where TP > 1 (NeMo recipes; required by "
    "--tp-comm-overlap); Nemotron's squared-ReLU MLP and LayerNorm1p as in nemotron.py",
    "high (table values); recipe details medium")
BRIDGE = Source(
    "P02", "NVIDIA Megatron-Bridge performance summary archive (pre-training, DGX-H100)",
    "github.com/NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md @067f987df (2026-08-22)",
    "Megatron-Core (Megatron-Bridge)", H100, "fp8 (current scaling, Transformer Engine)", "distributed optimizer (Megatron-Bridge recipes)",
    "--overlap-grad-reduce --overlap-param-gather --tp-comm-overlap",
    "recompute per the H100 recipe (src/megatron/bridge/perf_recipes/*/h100/*.py @067f987df): none for Qwen3; not set for "
    "Llama; Llama3-70B recipe uses an uneven pipeline layout (embedding and loss on stages of their own) priced as even",
    "high (table values); recipe flags medium (the recipe file is of the archive's commit, not of each release)")
MEGATRON_LLAMA = Source(
    "P03", "Megatron-LM examples/llama README 'FP8 Performance' (Llama 3 on H100, NeMo performance-script settings)",
    "github.com/NVIDIA/Megatron-LM examples/llama/README.md @bd32927e7e (2025-12-09), table 'FP8 Performance'",
    "Megatron-Core", H100, "fp8 (hybrid, Transformer Engine)", "distributed optimizer",
    "--overlap-grad-reduce --overlap-param-gather --tp-comm-overlap",
    "system not named in the table (the script is train_llama3_8b_h100_fp8.sh, so DGX H100 taken); recompute not stated",
    "medium (system inferred from the script name)")
BLOOM = Source(
    "P04", "BigScience BLOOM-176B training (tr11-176B-ml), Megatron-DeepSpeed on Jean Zay",
    "github.com/bigscience-workshop/bigscience train/tr11-176B-ml/README.md @e726b15982 ('Important checkpoints': iteration 85376 log line; 'Replica setup')",
    "Megatron-DeepSpeed (bigscience fork, DeepSpeed ZeRO-1)", A100_JEAN_ZAY, "bf16", "ZeRO-1 (DeepSpeed)", "",
    "full activation checkpointing per README ('we use activation check-pointing'); ALiBi and embedding LayerNorm; "
    "data-loader / checkpoint time inside the logged iteration time",
    "high (logged iteration time)")
LAUNCHER = Source(
    "P05", "NVIDIA NeMo Megatron Launcher README 'Training Performance Results' (GPT-3 5B and 175B on DGX A100)",
    "github.com/NVIDIA/NeMo-Framework-Launcher README.md @3579cdb3 (2022-09-07), section GPT-3 'Training Performance Results'; "
    "layout from conf/training/gpt3/5b.yaml and 175b.yaml at the same commit",
    "NeMo Megatron (2022)", A100_SELENE, "bf16 (megatron_amp_O2)", "distributed optimizer (distributed_fused_adam)", "",
    "the README does not restate the layout: it is the launcher's default training config at the same commit "
    "(5B: TP1 PP1 MBS2 GBS2048, activations_checkpoint_num_layers 0; 175B: TP8 PP8 MBS2 GBS2048, selective "
    "recompute + SP, so 8 nodes = one replica); throughput includes everything in the training loop",
    "medium (layout from the default config of the same commit)")

LAUNCHER_2206 = Source(
    "P08", "NVIDIA NeMo Megatron Launcher README 'Training Performance Results', release 22.06 (GPT-3 5B and 175B on DGX A100)",
    "github.com/NVIDIA/NeMo-Framework-Launcher README.md @d4317ddd (2022-07-14), section GPT-3 'Training Performance "
    "Results' (replaced by P05's table on 2022-09-07); layout from conf/training/gpt3/5b.yaml and 175b.yaml at the "
    "same commit",
    "NeMo Megatron 22.06 (NeMo 1.10.0+aadcd1c)", A100_SELENE, "bf16 (megatron_amp_O2)", "", "",
    "the README does not restate the layout: it is the launcher's default training config at the same commit "
    "(5B: TP2 PP1 MBS2 GBS1440, no recompute; 175B: TP8 PP8 MBS2 GBS1536, selective recompute + SP); optimizer "
    "fused_adam under NeMo's MainParamsOptimizerWrapper (no distributed optimizer); the container's NeMo "
    "1.10.0+aadcd1c (README support matrix) turns gradient-accumulation fusion off at PP 1 "
    "(megatron_base_model.py _validate_config), so the 5B's param hook adds each micro-batch's gradient into the "
    "fp32 main gradient (optimizer_with_main_params.py _make_param_hook), and keeps the 175b.yaml's fusion on at "
    "PP 8 (the fused wgrad accumulates into param.main_grad); the second table is headed '5B' in the "
    "README but is the 175B model (its text: 'from 16 nodes to 128 nodes with a 175B model')",
    "medium (layout from the default config of the same commit)")


BIGSCIENCE_PREQUEL = Source(
    "P06", "BigScience tr11 (BLOOM) 3D-topology benchmarks on Jean Zay, Megatron-DeepSpeed + ZeRO-1 (chronicles-prequel)",
    "github.com/bigscience-workshop/bigscience train/tr11-176B-ml/chronicles-prequel.md @e726b15982 (Feb 2022), "
    "sections 'Best TFLOPs' (bf16), '48 node contenders', 'Final round comparison', 'NHEADs comparison'",
    "Megatron-DeepSpeed (bigscience fork, DeepSpeed ZeRO-1)", A100_JEAN_ZAY, "bf16", "ZeRO-1 (DeepSpeed)", "",
    "Sec/it is one snapshot at iteration 2 ('the data isn't exact and can fluctuate a bit'); full activation "
    "checkpointing of the tr11 scripts (not restated; the reported TFLOPs use the recompute formula "
    "96*B*s*l*h^2*(1+s/6h+V/16lh) and match Sec/it with vocab 250,880); precision: the 'Best TFLOPs' rows are the "
    "page's bf16 section, the 02-20..02-24 tables ran the training script of those days, "
    "train/tr11-200B-ml/tr11-200B-ml.slurm (217dc6c 2022-02-17 .. 4b79668 2022-02-24): --fp16 with DeepSpeed fp16 "
    "and ZeRO stage 1 (--bf16 commented out, bf16 disabled in its ds_config; the page's 02-28 section: from now on "
    "BF16 optimizer 'compared to fp16 which grad accumulates in fp16'), and CUDA_LAUNCH_BLOCKING=1 commented out",
    "medium (single-iteration snapshots)")
LONG_SEQ = Source(
    "P07", "Megatron-DeepSpeed long-sequence support (DeepSpeed4Science): GPT 30B, TP 32 over 4 DGX A100-40GB nodes",
    "github.com/deepspeedai/Megatron-DeepSpeed examples_deepspeed/deepspeed4science/megatron_long_seq_support/README.md "
    "@cc3a94c6 (2023-09-18) table 'New Megatron-DeepSpeed (TFLOPS)'; layout from pretrain_gpt_30B_seq_parallel.sh "
    "at the same commit",
    "Megatron-DeepSpeed (2023, DeepSpeed ZeRO-0)", dict(A100_SELENE, gpu_type="A100-SXM4-40GB", gpu_memory_gb="40",
                                                      inter_node_network="InfiniBand HDR 200Gb/s x8 per node"),
    "fp16", "", "--no-pipeline-parallel --use-flash-attn-triton",
    "TFLOPS are integers (+-0.5); script: 64 layers, h 6144, 64 heads, TP 32 with sequence parallelism, MBS 1, "
    "GBS 2, --checkpoint-activations, Triton flash attention, fp16, ZeRO stage 0; GPT-2 vocabulary padded to "
    "53,248 (divisible by 128 x TP)",
    "medium (TFLOPS rounded; layout from the example script)")
