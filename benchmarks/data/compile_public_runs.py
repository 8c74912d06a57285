"""Write public_runs.csv (dev.csv's schema) from the public measurements transcribed below.

    python benchmarks/data/compile_public_runs.py      # rewrites benchmarks/data/public_runs.csv

Every figure in the tables below was read from the source named in its `Source` entry (public_run_sources.py,
with the networks the rows train: a file at a commit of a public repository); nothing is fitted or adjusted
here. A step time is derived from the reported throughput with the formula written into the row's
`iteration_time_method`:

    tokens/s/GPU reported:      t = GBS * seq_length / (tokens_per_s_per_gpu * num_gpus)
    aggregate tokens/s:         t = GBS * seq_length / tokens_per_s
    elapsed time per iteration: t = the logged value (reported)

What a source does not state is left blank (the CSV reader's documented default applies) and said in `notes`.
Architecture flags that dev.csv has no column for (SwiGLU, RMSNorm, RoPE, untied embeddings, MoE, head size)
are listed after "flags:" in `notes`, which `llmperf validate` reads as extra launch flags.
"""

from __future__ import annotations

import csv
from pathlib import Path

from public_run_sources import (ARCHS, BIGSCIENCE_PREQUEL, BLOOM, BRIDGE, LAUNCHER, LAUNCHER_2206, LONG_SEQ,
                                MEGATRON_LLAMA, NEMO_2407, NO_DROPOUT, Arch, Source)

HERE = Path(__file__).resolve().parent
OUT_CSV = HERE / "public_runs.csv"

COLUMNS = (
    "row_id,source_id,source,source_location,model,num_layers,hidden_size,num_attention_heads,num_query_groups,"
    "ffn_hidden_size,vocab_size,seq_length,micro_batch_size,global_batch_size,tp,pp,vpp,cp,dp,ep,"
    "sequence_parallel,recompute,zero_stage_or_dist_opt,precision,gpu_type,gpu_memory_gb,gpus_per_node,"
    "intra_node_interconnect,inter_node_network,num_gpus,framework,metric_name,metric_value,metric_unit,"
    "reported_mfu,iteration_time_s,iteration_time_method,confidence,notes"
).split(",")


def tokens_per_gpu_row(src: Source, arch: Arch, gpus: int, gbs: int, mbs: int, seq: int, tp: int, pp: int,
                       cp: int, vp: int, ep: int, tok_s_gpu: float, tflops: float | None, extra: str = "",
                       row_flags: str = "") -> dict:
    """A row whose step time is derived from tokens/s/GPU; `row_flags` as in `_row`."""
    t = gbs * seq / (tok_s_gpu * gpus)
    method = f"derived: t = GBS*seq/(tokens_per_s_per_gpu*GPUs) = {gbs}*{seq}/({tok_s_gpu:g}*{gpus})"
    metric = ("tokens/s/GPU", tok_s_gpu, "tokens/s/GPU")
    mfu = f"model TFLOP/s/GPU {tflops:g} (reported)" if tflops else ""
    return _row(src, arch, gpus, gbs, mbs, seq, tp, pp, cp, vp, ep, t, method, metric, mfu, extra,
                row_flags=row_flags)


def _row(src: Source, arch: Arch, gpus: int, gbs: int, mbs: int, seq: int, tp: int, pp: int, cp: int, vp: int,
         ep: int, t: float, method: str, metric: tuple, mfu: str, extra: str, recompute: str = "",
         row_flags: str = "") -> dict:
    """`row_flags`: launch flags of this row's own software settings (what its framework forced for its layout)."""
    dp = gpus // (tp * pp * cp)
    assert tp * pp * cp * dp == gpus, (arch.name, gpus)
    flags = " ".join(f for f in (arch.flags, src.flags, row_flags) if f)
    notes = "; ".join(x for x in (f"architecture: {arch.where}", src.caveat, extra) if x)
    if flags:
        notes += f"; flags: {flags}"
    sp = "yes (recipe: TP > 1)" if tp > 1 and src.source_id in ("P01", "P02", "P03") else ""
    return dict(
        source_id=src.source_id, source=src.source, source_location=src.location, model=arch.name,
        num_layers=arch.num_layers, hidden_size=arch.hidden_size, num_attention_heads=arch.num_attention_heads,
        num_query_groups=arch.num_query_groups or "", ffn_hidden_size=arch.ffn_hidden_size,
        vocab_size=arch.vocab_size, seq_length=seq, micro_batch_size=mbs, global_batch_size=gbs, tp=tp, pp=pp,
        vpp=vp if vp > 1 else "", cp=cp if cp > 1 else "", dp=dp, ep=ep if ep > 1 else "",
        sequence_parallel=sp, recompute=recompute, zero_stage_or_dist_opt=src.zero, precision=src.precision,
        **src.cluster, num_gpus=gpus, framework=src.framework, metric_name=metric[0], metric_value=metric[1],
        metric_unit=metric[2], reported_mfu=mfu, iteration_time_s=f"{t:.6g}", iteration_time_method=method,
        confidence=src.confidence, notes=notes,
    )


# NeMo 24.07 Pretraining table (FP8, DGX-H100): model, GPUs, GBS, MBS, seq, TP, PP, CP, VP, tokens/s/GPU, TFLOP/s/GPU.
NEMO_2407_TABLE = (
    ("GPT3-5B", 64, 2048, 4, 2048, 1, 1, 1, 1, 23574, 770),
    ("GPT3-20B", 64, 256, 2, 2048, 2, 1, 1, 1, 5894, 755),
    ("GPT3-175B", 128, 256, 1, 2048, 4, 8, 1, 6, 745, 802),
    ("GPT3-175B", 512, 2048, 2, 2048, 4, 8, 1, 6, 832, 895),
    ("LLAMA2-7B", 8, 128, 1, 4096, 1, 1, 1, 1, 16634, 767),
    ("LLAMA2-13B", 16, 128, 1, 4096, 1, 4, 1, 10, 8715, 760),
    ("LLAMA2-70B", 64, 128, 1, 4096, 4, 4, 1, 20, 1717, 763),
    ("Nemotron-8B", 64, 256, 4, 4096, 2, 1, 1, 1, 12507, 643),
    ("Nemotron-22B", 64, 256, 2, 4096, 2, 4, 1, 10, 4289, 559),
    ("Nemotron-340B", 128, 32, 1, 4096, 8, 8, 1, 12, 328, 691),
    ("LLAMA3-8B", 8, 128, 1, 8192, 1, 1, 2, 1, 11883, 688),
    ("LLAMA3-70B", 64, 128, 1, 8192, 4, 4, 2, 5, 1549, 746),
)

# Megatron-Bridge archive, DGX-H100 rows (one per distinct configuration, newest release that lists it):
# release, model, GPUs, GBS, MBS, seq, TP, PP, CP, VP, EP, tokens/s/GPU, TFLOP/s/GPU.
BRIDGE_TABLE = (
    ("26.04.01", "LLAMA3-70B", 64, 256, 1, 8192, 4, 8, 1, 5, 1, 1664, 731),
    ("26.06", "LLAMA3.1-405B", 1024, 1536, 1, 8192, 8, 8, 2, 8, 1, 326, 822),
    ("25.11", "LLAMA3-70B", 64, 128, 1, 8192, 4, 8, 1, 5, 1, 1602, 719),
    ("25.11", "LLAMA3.1-405B", 1024, 512, 1, 8192, 8, 8, 2, 8, 1, 292, 737),
    ("26.06", "Qwen3-30B-A3B", 16, 1024, 1, 4096, 1, 1, 1, 1, 16, 8826, 203),
    # Qwen3-235B-A22B (256 GPUs, TP2 PP8 VP4 EP32, 1712 tokens/s/GPU) left out: 94 layers do not split over
    # PP8 x VP4 and the H100 recipe's uneven split is not in the stored sources.
)

# Megatron-LM examples/llama FP8 Performance: model, GPUs, GBS, MBS, seq, TP, PP, CP, VP, tokens/s/GPU, TFLOP/s/GPU.
MEGATRON_LLAMA_TABLE = (
    ("LLAMA3-8B", 8, 128, 1, 8192, 1, 1, 2, 1, 13812, 800),
    ("LLAMA3-70B", 64, 128, 1, 8192, 4, 8, 1, 5, 1621, 780),
    ("LLAMA3.1-405B", 1024, 512, 1, 8192, 8, 8, 2, 8, 315, 834),
)

# Gradient dtype of the H100 recipes. Megatron-LM keeps fp32 main gradients under --bf16 unless told otherwise
# (arguments.py: accumulate_allreduce_grads_in_fp32 = True for bf16), 4 bytes per parameter on every rank; these
# recipes reduce them in bf16, 2 bytes: --grad-reduce-in-bf16 (DistributedDataParallelConfig grad_reduce_in_fp32 False).
#   P01: NeMo-Framework-Launcher @24c3d6bb (2024-09-06), every H100 FP8 example of GPT-3 and Llama
#        (examples/training/{gpt,llama}/h100/*fp8*.sh: +training.model.optim.grad_sync_dtype=bf16) and
#        launcher_scripts/conf/training/nemotron/nemotron_340b.yaml (optim grad_sync_dtype: bf16, dtype: bf16; the
#        Nemotron-8B/22B FP8 examples leave the fp32 default). NeMo 24.07 passes it on: megatron_gpt_model.py
#        setup_mcore_distributed_parallel grad_reduce_in_fp32 = (grad_sync_dtype == 'fp32') (NVIDIA/NeMo 6f9f731e70),
#        and apex's DistributedFusedAdam (its optim name) allocates its contiguous gradient buffer in grad_sync_dtype
#        (apex 23c1f865 distributed_fused_adam.py _init_grad_buffer). The 340B's dtype bf16 keeps Adam's moments in
#        bf16 with no master copy (NeMo megatron_base_model.py: store_params False when the optimizer dtype is the
#        model's): Megatron-LM's nearest spelling is the precision-aware optimizer with bf16 moments, which keeps
#        a 2-byte master remainder more (6 bytes per parameter, against 4).
#   P02: NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/llama/llama3_llm_pretrain.py (2a0d46e2),
#        llama31_llm_pretrain.py (0013c9a8) set_llama3{,1}_common_configs and qwen/qwen3_llm_pretrain.py
#        set_qwen3_common_configs (2a0d46e2): mixed_precision / ddp grad_reduce_in_fp32 = False; the same at
#        tag 26.04-alpha.rc2 and on branch r0.2.0 (25.11: configs/llama3/, configs/llama31/), and in
#        perf_recipes/_common.py _benchmark_common at 067f987df, which every H100 Llama and Qwen3 recipe calls.
#   P03: the README's table 'follows those defined in NeMo Framework's performance scripts' (NVIDIA/NeMo cf17ca0d40
#        scripts/performance/helpers.py set_precision_configs: recipe.trainer.plugins.grad_reduce_in_fp32 = False),
#        and its train_llama3_8b_h100_fp8.sh @bd32927e7e passes --grad-reduce-in-bf16.
BF16_GRADS = "--grad-reduce-in-bf16"
# P02's FP8 is per-tensor current scaling (the archive's 25.11 H100 rows say FP8-CS): NVIDIA-NeMo/Megatron-Bridge
# @067f987df scripts/performance/utils/precision.py get_precision_config('fp8_cs') =
# bf16_with_fp8_current_scaling_mixed() (fp8 'hybrid', fp8_recipe 'tensorwise') with first_last_layers_bf16 set False
# ('Disable BF16 Transformer layers in the performance config'; the same from v0.2.0, 2025-11, on), and
# perf_recipes/_common.py _perf_precision('fp8_cs') the same: Megatron's --fp8-recipe tensorwise. That config also
# sets fp8_param_gather = True, which the Llama / Qwen3 H100 recipes do not undo; the rows do not carry
# --fp8-param-gather yet (R43 review: open, not measured).
BRIDGE_FP8_CS = "--fp8-recipe tensorwise"
NEMO_2407_OPTIMIZER_FLAGS = {
    "Nemotron-8B": "", "Nemotron-22B": "",
    "Nemotron-340B": f"{BF16_GRADS} --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16",
}
"""P01 rows' optimizer flags by model (BF16_GRADS where not listed)."""
# P01's 512-GPU GPT-3 175B row (64 nodes, MBS 2, GBS 2048, TP4 PP8 VP6, FP8 with TP overlap) is the launcher's
# 175b_mlperf.yaml @24c3d6bb, not 175b.yaml (128 nodes, MBS 1, fp8 False): hidden_dropout and attention_dropout 0.0,
# normalization layernorm1p, grad_sync_dtype bf16.
NEMO_2407_CONFIGS = {("GPT3-175B", 512): (f"{NO_DROPOUT} --apply-layernorm-1p", "recipe: NeMo-Framework-Launcher "
                                            "launcher_scripts/conf/training/gpt3/175b_mlperf.yaml @24c3d6bb")}
"""P01 rows whose recipe config differs from their model's default config, by (model, GPUs): (flags, note)."""

# NeMo Megatron Launcher README: aggregate tokens/s by node count (8 A100-80GB per node).
LAUNCHER_5B = ((1, 40345), (2, 79815), (4, 161754), (8, 312774), (16, 659481), (32, 1159288))
LAUNCHER_175B = ((8, 7500), (16, 14950), (32, 29537), (64, 58211), (128, 109684))


# NeMo v1.11.0 (the NeMo of NeMo Megatron 22.08; github.com/NVIDIA/NeMo tag v1.11.0, 2022-09-08)
# megatron_base_model.py _validate_config: "Gradient accumulation fusion can only be used with pipeline parallel
# size > 1" sets gradient_accumulation_fusion False at PP 1. Each micro-batch's 16-bit weight gradients are then
# added into distributed_fused_adam's fp32 gradient buffer by a hook on every parameter (apex 8cea0b43
# distributed_fused_adam.py _grad_copy: grad_out.add_(grad_in)), as Megatron's DDP does without the fusion.
# At PP 1 without SP NeMo keeps the optimizer's overlap_grad_sync (apex default True) and runs all micro-batches but
# the last under no_sync(greedy_grad_copy=True) (megatron_gpt_model.py training_step), so the last backward
# overlaps the buckets' reduce-scatter.
NEMO_2208_PP1_FLAGS = "--no-gradient-accumulation-fusion --overlap-grad-reduce"
NEMO_2208_PP1_NOTE = ("gradient-accumulation fusion off: NeMo v1.11.0 megatron_base_model.py _validate_config turns "
                      "it off at PP 1, so each micro-batch's gradients are added into distributed_fused_adam's fp32 "
                      "buffer (apex distributed_fused_adam.py _grad_copy); its reduce-scatter overlaps the last "
                      "micro-batch's backward (overlap_grad_sync, kept at PP 1 without SP)")
# The README's training-time text for the same 175B config disagrees with its table, in the direction no other
# model of the two releases does: "It can be trained in about 27 days using 128 nodes" (same commit; 175b.yaml
# max_steps 75000 x GBS 2048 x 2048 = 314.6e9 tokens) is 134,900 tokens/s, 1.23x the table's 109,684 at 128 nodes,
# where the table gives 33.2 days. The texts are projections, not measurements: 22.06's say 7 days (5B, 20 nodes)
# and 35 days (175B, 128 nodes) against 4.9 and 25.8 days from its own tables; 22.08's 5B says about 5 (5.5 at 16
# nodes from the table). 22.06's 175B table (P08, same layout) ran 1.29-1.38x these tokens/s. Kept as measured.
NEMO_2208_175B_NOTE = ("the README's projection for the same config, 'trained in about 27 days using 128 nodes' "
                       "(75000 steps x 2048 x 2048 tokens), is 134,900 tokens/s, 1.23x this table's 109,684 (every other "
                       "such text of 22.06 / 22.08 is slower than or equal to its table); 22.06's table (P08, same "
                       "layout) ran 1.29-1.38x these tokens/s")

# The same README at the 22.06 release (d4317ddd): aggregate tokens/s by node count, and each model's layout
# (TP, PP, GBS, recompute, SP) from that commit's training configs.
LAUNCHER_2206_5B = ((1, 39543), (2, 79128), (5, 195047), (9, 344523), (10, 383500), (18, 670254), (20, 731791))
LAUNCHER_2206_175B = ((16, 20642), (32, 38025), (128, 141306))
# The 22.06 container ran NeMo 1.10.0+aadcd1c (the README's support matrix at d4317ddd; github.com/NVIDIA/NeMo commit
# aadcd1cae4, 2022-07-13, on the branch of PR #4380 'Add sequence parallelism and selective activation checkpointing',
# squashed into main as f1bf6c2731 on 2022-07-26: it has sequence parallelism, selective recompute and
# gradient-accumulation fusion, which the v1.10.0 tag of 2022-07-01 does not). Its megatron_base_model.py
# _validate_config turns the fusion off at PP 1 only; at PP 8 the 175b.yaml's gradient_accumulation_fusion: True
# stays, and the fused wgrad GEMM accumulates into param.main_grad, which MainParamsOptimizerWrapper points at the
# fp32 main gradient (optimizer_with_main_params.py: param.main_grad = main_param.grad), so nothing is added per
# micro-batch. It overlaps the data-parallel all-reduce with the backward at PP 1 without SP or the fusion only
# (async_grad_allreduce in configure_optimizers; the 22.05 changelog: 'Asynchronous gradient all-reduce for GPT-3 ...
# with pipeline parallel size equal to 1'); at PP > 1 it all-reduces the main gradients after the pipeline
# (allreduce_main_grads).
NEMO_2206_FLAGS = {1: "--no-gradient-accumulation-fusion --overlap-grad-reduce", 8: ""}


def launcher_2206_rows() -> list[dict]:
    rows = []
    for arch, table, tp, pp, gbs, recompute, sp in (("GPT3-5B", LAUNCHER_2206_5B, 2, 1, 1440, "", ""),
                                                   ("GPT3-175B", LAUNCHER_2206_175B, 8, 8, 1536, "selective",
                                                    "yes (175b.yaml)")):
        for nodes, tok_s in table:
            seq = 2048
            t = gbs * seq / tok_s
            method = f"derived: t = GBS*seq/tokens_per_s = {gbs}*{seq}/{tok_s}"
            row = _row(LAUNCHER_2206, ARCHS[arch], 8 * nodes, gbs, 2, seq, tp, pp, 1, 1, 1, t, method,
                       ("aggregate tokens/s", tok_s, "tokens/s"), "", f"{nodes} DGX A100 nodes", recompute,
                       NEMO_2206_FLAGS[pp])
            row["sequence_parallel"] = sp
            rows.append(row)
    return rows


def launcher_rows() -> list[dict]:
    rows = []
    for arch, table, tp, pp, recompute, sp in (("GPT3-5B", LAUNCHER_5B, 1, 1, "", ""),
                                              ("GPT3-175B", LAUNCHER_175B, 8, 8, "selective", "yes (175b.yaml)")):
        pp1 = pp == 1
        for nodes, tok_s in table:
            gpus, gbs, seq = 8 * nodes, 2048, 2048
            t = gbs * seq / tok_s
            method = f"derived: t = GBS*seq/tokens_per_s = {gbs}*{seq}/{tok_s}"
            extra = f"{nodes} DGX A100 nodes; " + (NEMO_2208_PP1_NOTE if pp1 else NEMO_2208_175B_NOTE)
            row = _row(LAUNCHER, ARCHS[arch], gpus, gbs, 2, seq, tp, pp, 1, 1, 1, t, method,
                       ("aggregate tokens/s", tok_s, "tokens/s"), "", extra, recompute,
                       NEMO_2208_PP1_FLAGS if pp1 else "")
            row["sequence_parallel"] = sp
            rows.append(row)
    return rows


def bloom_rows() -> list[dict]:
    # iteration 85376: 'elapsed time per iteration (s): 104.70 | global batch size: 2048 | ... TFLOPs: 149.77'
    # tr11-176B-ml.slurm at the same commit: --pp-partition-method 'type:transformer|embedding' (70 layers and the
    # two embeddings, 72 entries, split 6 per stage over PP 12).
    return [_row(BLOOM, ARCHS["BLOOM-176B"], 384, 2048, 2, 2048, 4, 12, 1, 1, 1, 104.70, "reported",
                 ("elapsed time per iteration", 104.70, "s"), "149.77 TFLOPs (BigScience HFU-style, incl. recompute)",
                 "TP=4 PP=12 DP=8 MBS=2 from 'Replica setup'; pipeline split of tr11-176B-ml.slurm "
                 "(--pp-partition-method 'type:transformer|embedding')", "full",
                 "--pp-partition-method type:transformer|embedding")]


# chronicles-prequel: (hidden, layers, heads, GPUs, TP, PP, MBS, GBS, Sec/it, table). Rows repeated in a later
# table with the same configuration (02-23 re-runs of 14336/72) are left out; so is the ZeRO-0 row the page says
# must be re-tested, and the 1-node 18B rows whose header and table disagree on GBS.
PREQUEL_TABLE = (
    (14400, 8, 32, 8, 8, 1, 1, 2048, 777.09, "Best TFLOPs / bf16, 1 node"),
    (14400, 80, 96, 80, 8, 10, 1, 2048, 853.81, "Best TFLOPs / bf16, 10 nodes"),
    (14400, 80, 96, 160, 8, 10, 1, 2048, 434.14, "Best TFLOPs / bf16, 20 nodes"),
    (14336, 72, 64, 384, 8, 12, 1, 2048, 143.31, "48 node contenders, NHIDDEN=14336 / NLAYERS=72"),
    (14336, 72, 64, 384, 8, 12, 2, 2048, 134.02, "48 node contenders, NHIDDEN=14336 / NLAYERS=72"),
    (14336, 72, 64, 384, 8, 12, 4, 2048, 123.69, "48 node contenders, NHIDDEN=14336 / NLAYERS=72"),
    (14336, 72, 64, 384, 8, 12, 8, 2048, 129.26, "48 node contenders, NHIDDEN=14336 / NLAYERS=72"),
    (14336, 72, 64, 384, 8, 6, 1, 2048, 139.82, "48 node contenders, NHIDDEN=14336 / NLAYERS=72"),
    (14336, 72, 64, 384, 8, 6, 2, 2048, 131.02, "48 node contenders, NHIDDEN=14336 / NLAYERS=72"),
    (14336, 72, 64, 384, 8, 6, 4, 2048, 121.48, "48 node contenders, NHIDDEN=14336 / NLAYERS=72"),
    (13824, 84, 64, 384, 8, 12, 2, 2048, 143.89, "48 node contenders, NHIDDEN=13824 / NLAYERS=84"),
    (13824, 84, 64, 384, 8, 12, 4, 2048, 133.12, "48 node contenders, NHIDDEN=13824 / NLAYERS=84"),
    (13824, 84, 64, 384, 8, 6, 2, 2048, 141.41, "48 node contenders, NHIDDEN=13824 / NLAYERS=84"),
    (13824, 84, 64, 384, 8, 6, 4, 2048, 130.31, "48 node contenders, NHIDDEN=13824 / NLAYERS=84"),
    (13824, 80, 64, 320, 8, 10, 4, 2048, 147.04, "48 node contenders, NHIDDEN=13824 / NLAYERS=80 (40 nodes)"),
    (12288, 96, 64, 384, 8, 6, 2, 2048, 136.73, "Final round comparison, NHIDDEN=12288 / NLAYERS=96"),
    (12288, 96, 64, 384, 8, 6, 4, 2048, 122.96, "Final round comparison, NHIDDEN=12288 / NLAYERS=96"),
    (13312, 84, 64, 384, 8, 12, 4, 2048, 125.52, "Final round comparison, NHIDDEN=13312 / NLAYERS=84"),
    (13312, 84, 64, 384, 8, 6, 2, 2048, 135.55, "Final round comparison, NHIDDEN=13312 / NLAYERS=84"),
    (13312, 84, 64, 384, 8, 6, 4, 2048, 122.93, "Final round comparison, NHIDDEN=13312 / NLAYERS=84"),
    (13824, 78, 64, 384, 8, 6, 4, 2048, 121.28, "Final round comparison, NHIDDEN=13824 / NLAYERS=78"),
    (14336, 72, 16, 384, 8, 6, 4, 2048, 121.03, "NHEADs comparison, NHIDDEN=14336 / NLAYERS=72"),
    (14336, 72, 32, 384, 8, 6, 4, 2048, 124.01, "NHEADs comparison, NHIDDEN=14336 / NLAYERS=72"),
    (14336, 72, 112, 384, 8, 6, 4, 2048, 138.72, "NHEADs comparison, NHIDDEN=14336 / NLAYERS=72"),
    (14336, 72, 128, 384, 8, 6, 4, 2048, 124.89, "NHEADs comparison, NHIDDEN=14336 / NLAYERS=72"),
    (14336, 72, 256, 384, 8, 6, 4, 2048, 132.85, "NHEADs comparison, NHIDDEN=14336 / NLAYERS=72"),
    (13824, 78, 96, 384, 8, 6, 4, 2048, 124.75, "NHEADs comparison, NHIDDEN=13824 / NLAYERS=78"),
    (13824, 78, 128, 384, 8, 6, 4, 2048, 162.72, "NHEADs comparison, NHIDDEN=13824 / NLAYERS=78"),
    (13312, 84, 128, 384, 8, 6, 4, 2048, 129.17, "NHEADs comparison, NHIDDEN=13312 / NLAYERS=84"),
    (12288, 96, 96, 384, 8, 6, 4, 2048, 145.40, "NHEADs comparison, NHIDDEN=12288 / NLAYERS=96"),
)

# Long-sequence table: sequence length (k = 1024 tokens) -> TFLOPS per GPU, 'New Megatron-DeepSpeed' column.
LONG_SEQ_TABLE = ((2, 68), (4, 80), (8, 86), (16, 92), (32, 100), (64, 106), (128, 119), (256, 94))


def prequel_rows() -> list[dict]:
    rows = []
    for hidden, layers, heads, gpus, tp, pp, mbs, gbs, sec_it, table in PREQUEL_TABLE:
        # tr11-200B-ml.slurm of those days (217dc6c 2022-02-17 .. 4b79668 2022-02-24): --position-embedding-type alibi
        arch = Arch(f"BigScience {hidden}x{layers} ({heads} heads)", layers, hidden, heads, None, 4 * hidden,
                    250880, "--position-embedding-type alibi",
                    "the table's NHIDDEN / NLAYERS / NHEADS; 4h MLP, 250,880 vocabulary (tr11); ALiBi "
                    "(tr11-200B-ml.slurm 2022-02-17..24)")
        row = _row(BIGSCIENCE_PREQUEL, arch, gpus, gbs, mbs, 2048, tp, pp, 1, 1, 1, sec_it, "reported",
                   ("Sec/it at iteration 2", sec_it, "s"), "", f"table: {table}", "full")
        # The bf16 section's rows are bf16; the topology tables ran tr11-200B-ml.slurm of 02-17..02-24 (fp16).
        row["precision"] = "bf16" if "/ bf16" in table else "fp16 (tr11-200B-ml.slurm, 2022-02-17..24)"
        rows.append(row)
    return rows


def long_seq_rows() -> list[dict]:
    arch = Arch("GPT 30B (Megatron-DeepSpeed example)", 64, 6144, 64, None, 24576, 53248, "",
                "pretrain_gpt_30B_seq_parallel.sh @cc3a94c6")
    rows = []
    for k, tflops in LONG_SEQ_TABLE:
        seq, gbs, gpus = 1024 * k, 2, 32
        # Megatron-DeepSpeed throughput_calculator at cc3a94c6 (megatron/utils.py), checkpoint factor 4:
        flops = 24 * 4 * gbs * seq * 64 * 6144**2 * (1 + seq / (6 * 6144) + 53248 / (16 * 64 * 6144))
        t = flops / (tflops * 1e12 * gpus)
        method = ("derived: t = 96*B*s*l*h^2*(1+s/(6h)+V/(16*l*h)) / (TFLOPS*1e12*GPUs) with B=2 s=" f"{seq} l=64 "
                  "h=6144 V=53248 GPUs=32 (Megatron-DeepSpeed throughput_calculator, checkpoint factor 4)")
        row = _row(LONG_SEQ, arch, gpus, gbs, 1, seq, 32, 1, 1, 1, 1, t, method,
                   ("TFLOPS per GPU", tflops, "TFLOP/s/GPU"), "", f"sequence length {k}k", "full")
        row["sequence_parallel"] = "yes (--sequence-parallel)"
        row["zero_stage_or_dist_opt"] = "ZeRO-0 (DeepSpeed)"
        rows.append(row)
    return rows


def nemo_2407_rows() -> list[dict]:
    rows = []
    for m, g, gbs, mbs, seq, tp, pp, cp, vp, tok, tf in NEMO_2407_TABLE:
        config_flags, note = NEMO_2407_CONFIGS.get((m, g), ("", ""))
        flags = " ".join(f for f in (config_flags, NEMO_2407_OPTIMIZER_FLAGS.get(m, BF16_GRADS)) if f)
        rows.append(tokens_per_gpu_row(NEMO_2407, ARCHS[m], g, gbs, mbs, seq, tp, pp, cp, vp, 1, tok, tf, note, flags))
    return rows


def all_rows() -> list[dict]:
    rows = nemo_2407_rows()
    rows += [tokens_per_gpu_row(BRIDGE, ARCHS[m], g, gbs, mbs, s, tp, pp, cp, vp, ep, tok, tf, f"release {rel}",
                                row_flags=f"{BF16_GRADS} {BRIDGE_FP8_CS}")
             for rel, m, g, gbs, mbs, s, tp, pp, cp, vp, ep, tok, tf in BRIDGE_TABLE]
    rows += [tokens_per_gpu_row(MEGATRON_LLAMA, ARCHS[m], g, gbs, mbs, s, tp, pp, cp, vp, 1, tok, tf,
                                row_flags=BF16_GRADS)
             for m, g, gbs, mbs, s, tp, pp, cp, vp, tok, tf in MEGATRON_LLAMA_TABLE]
    rows += bloom_rows() + launcher_rows() + prequel_rows() + long_seq_rows() + launcher_2206_rows()
    for i, row in enumerate(rows, start=1):
        row["row_id"] = f"p{i}"
    return rows


def main() -> None:
    rows = all_rows()
    with OUT_CSV.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {len(rows)} rows to {OUT_CSV}")


if __name__ == "__main__":
    main()
