"""Megatron-LM commands that `validate_args` (megatron/training/arguments.py, core_v0.16.1 and HEAD d98e8a6) and the
TransformerConfig / Transformer Engine checks it leads to accept or refuse, assertion by assertion.

Every row is the base command of tests/frameworks/helpers.py (8 GPUs, 32 layers, hidden 4096, 32 heads, seq 2048,
max positions 2048, micro-batch 1) plus the row's flags; `None` means Megatron accepts it, a string is a fragment of
the refusal llmperf must give (ConfigError, exit 2). Most refusal rows have an accepted neighbour that differs only
in what the rule reads, so a rule that refused too much fails the table. The cases after it: warnings for rules
only recent releases enforce, and Megatron-DeepSpeed's own validate_args.
"""

from __future__ import annotations

import re

import pytest

from llmperf_hook.errors import ConfigError
from tests.frameworks.helpers import BASE, megatron
from tests.frameworks.megatron_oracle import megatron_oracle
from tests.launch.cli_run import llmperf

_PP4 = ("--pipeline-model-parallel-size", "4")
_FSDP2 = ("--use-torch-fsdp2", "--untie-embeddings-and-output-weights")

ROWS: list[tuple[str, tuple[str, ...], str | None]] = [
    # world size: world % (TP*PP*CP) == 0
    ("tp-pp-cp divide world", ("--tensor-model-parallel-size", "2", "--context-parallel-size", "2"), None),
    ("tp x pp does not divide 8", ("--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "3"),
     "not divisible by tensor-model-parallel-size"),
    # heads % TP (TransformerConfig), query groups: heads % groups (TE), groups a multiple or divisor of TP
    ("tp 3 does not divide heads", ("--tensor-model-parallel-size", "3"), "not divisible"),
    ("gqa 8 groups", ("--group-query-attention", "--num-query-groups", "8"), None),
    ("gqa groups do not divide heads", ("--group-query-attention", "--num-query-groups", "6"), "is not a multiple of num-query-groups 6"),
    ("gqa groups divisor of tp", ("--group-query-attention", "--num-query-groups", "2", "--tensor-model-parallel-size", "4"), None),
    # virtual pipeline: one of the two flags, layers per stage divisible
    ("vpp by layers per stage", (*_PP4, "--num-layers-per-virtual-pipeline-stage", "2", "--global-batch-size", "8"), None),
    ("vpp by stages per rank", (*_PP4, "--num-virtual-stages-per-pipeline-rank", "4", "--global-batch-size", "8"), None),
    ("vpp both flags", (*_PP4, "--num-layers-per-virtual-pipeline-stage", "2", "--num-virtual-stages-per-pipeline-rank", "4"),
     "cannot both be set"),
    ("vpp 3 layers per stage of 8", (*_PP4, "--num-layers-per-virtual-pipeline-stage", "3"), "must divide"),
    ("vpp with uneven stages needs stages per rank",
     (*_PP4, "--decoder-first-pipeline-num-layers", "4", "--num-layers-per-virtual-pipeline-stage", "2"),
     "--num-virtual-stages-per-pipeline-rank"),
    # layers % PP, or the uneven first/last stages
    ("layers not divisible by pp 3", ("--pipeline-model-parallel-size", "2", "--num-layers", "33"), "not divisible by"),
    ("uneven first stage", (*_PP4, "--decoder-first-pipeline-num-layers", "5", "--decoder-last-pipeline-num-layers", "7"), None),
    ("uneven first stage leaves a ragged middle", (*_PP4, "--decoder-first-pipeline-num-layers", "6"), "does not add up"),
    # sequence parallelism is dropped at TP 1 (a warning), kept at TP > 1
    ("sequence parallel at tp 1", ("--sequence-parallel",), None),
    # batch: GBS % (MBS * DP)
    ("gbs multiple of mbs x dp", ("--micro-batch-size", "2", "--global-batch-size", "32"), None),
    ("gbs not a multiple of mbs x dp", ("--micro-batch-size", "2", "--global-batch-size", "20"), "not divisible by micro batch"),
    ("rampup batch size", ("--global-batch-size", "64", "--rampup-batch-size", "16", "16", "1000"), None),
    ("rampup with iteration-based training", ("--global-batch-size", "64", "--rampup-batch-size", "16", "16", "1000",
                                              "--train-iters", "100"), "no batch-size rampup for iteration-based"),
    ("rampup increment does not reach gbs", ("--global-batch-size", "64", "--rampup-batch-size", "16", "10", "1000"),
     "multiple of the increment"),
    ("rampup start not a multiple of mbs x dp", ("--global-batch-size", "64", "--rampup-batch-size", "4", "4", "1000"),
     "greatest common divisor is 4"),
    # every step's batch, not only the first: 32 8 reaches 40 (micro-batch 2 x DP 8 = 16)
    ("rampup increment not a multiple of mbs x dp", ("--micro-batch-size", "2", "--global-batch-size", "256",
                                                     "--rampup-batch-size", "32", "8", "1000"), "greatest common divisor is 8"),
    ("rampup increments all multiples of mbs x dp", ("--micro-batch-size", "2", "--global-batch-size", "256",
                                                     "--rampup-batch-size", "32", "16", "1000"), None),
    ("rampup too short to reach 192", ("--micro-batch-size", "2", "--global-batch-size", "256",
                                       "--rampup-batch-size", "128", "64", "32"), None),
    ("rampup start equals gbs", ("--global-batch-size", "64", "--rampup-batch-size", "64", "16", "1000"),
     "has no increments"),
    ("rampup of 0 samples", ("--global-batch-size", "64", "--rampup-batch-size", "16", "16", "0"), "lasts 0 samples"),
    ("rampup start rounded down by request", ("--global-batch-size", "64", "--rampup-batch-size", "4", "4", "1000",
                                              "--decrease-batch-size-if-needed"), None),
    # precision
    ("fp16 and bf16", ("--fp16", "--bf16"), "both set"),
    ("fp8 format needs a choice", ("--bf16", "--fp8-format", "e5m2"), "not a choice"),
    ("fp8 hybrid", ("--bf16", "--fp8-format", "hybrid"), None),
    ("fp4 with fp8", ("--bf16", "--fp8-format", "hybrid", "--fp4-format", "e2m1"), "cannot be used simultaneously"),
    ("fp4 alone", ("--bf16", "--fp4-format", "e2m1"), None),
    ("fp4 param gather without fp4", ("--bf16", "--fp4-param-gather"), "must be used together with --fp4-format"),
    ("fp8 param gather without a sharded optimizer", ("--bf16", "--fp8-format", "hybrid", "--fp8-param-gather"),
     "only supported with distributed optimizer"),
    ("fp8 param gather with the distributed optimizer",
     ("--bf16", "--fp8-format", "hybrid", "--fp8-param-gather", "--use-distributed-optimizer"), None),
    ("fp16 lm cross entropy without fp16", ("--bf16", "--fp16-lm-cross-entropy"), "only support in fp16 mode"),
    ("fp16 lm cross entropy with fp16", ("--fp16", "--fp16-lm-cross-entropy"), None),
    ("fp32 residual without fp16/bf16", ("--fp32-residual-connection",), "only supported when using fp16 or bf16"),
    ("fp32 residual with bf16", ("--bf16", "--fp32-residual-connection"), None),
    # MoE
    ("moe ep needs experts", ("--expert-model-parallel-size", "2"), "needs --num-experts"),
    ("moe experts % ep", ("--num-experts", "6", "--expert-model-parallel-size", "4"), "not a multiple of expert-model-parallel-size"),
    ("moe grouped gemm", ("--num-experts", "8", "--expert-model-parallel-size", "8", "--moe-grouped-gemm"), None),
    ("moe expert tp does not fit the world", ("--num-experts", "8", "--expert-model-parallel-size", "8",
                                               "--expert-tensor-parallel-size", "2"), "not divisible by expert-tensor"),
    ("expert bias with softmax scores", ("--num-experts", "8", "--moe-router-enable-expert-bias"), "only supports sigmoid"),
    ("expert bias with sigmoid scores", ("--num-experts", "8", "--moe-router-enable-expert-bias",
                                         "--moe-router-score-function", "sigmoid"), None),
    ("expert bias with sqrtsoftplus scores", ("--num-experts", "8", "--moe-router-enable-expert-bias",
                                              "--moe-router-score-function", "sqrtsoftplus"), None),
    ("group routing without groups", ("--num-experts", "8", "--moe-router-group-topk", "2"), "moe_router_num_groups must"),
    ("group routing, groups do not split experts", ("--num-experts", "8", "--moe-router-num-groups", "3",
                                                    "--moe-router-group-topk", "2"), "split evenly"),
    ("group routing", ("--num-experts", "8", "--moe-router-num-groups", "4", "--moe-router-group-topk", "2"), None),
    # shape: kv-channels derived only when hidden % heads == 0; positions cover the sequence
    ("hidden not divisible by heads", ("--hidden-size", "4100"), "not divisible by num-attention-heads"),
    ("hidden not divisible by heads, kv-channels given", ("--hidden-size", "4100", "--kv-channels", "128"), None),
    ("seq longer than positions", ("--seq-length", "4096"), "max_position_embeddings >= seq_length"),
    ("no position embedding beside rope", ("--position-embedding-type", "rope", "--no-position-embedding"), None),
    ("no position embedding without rope", ("--no-position-embedding",), "--position-embedding-type none"),
    ("no position embedding, legacy rope flag", ("--use-rotary-position-embeddings", "--no-position-embedding"), None),
    # deprecated flags
    ("batch-size", ("--batch-size", "4"), "--micro-batch-size"),
    ("model-parallel-size", ("--model-parallel-size", "2"), "--tensor-model-parallel-size"),
    ("warmup", ("--warmup", "100"), "--lr-warmup-fraction"),
    # training length, learning rate, checkpoints
    ("iteration-based run", ("--train-iters", "1000", "--lr-decay-iters", "900", "--lr-warmup-iters", "10"), None),
    ("iterations with sample decay", ("--train-iters", "1000", "--lr-decay-samples", "9000"), "expected iteration-based"),
    ("iterations and samples", ("--train-iters", "1000", "--train-samples", "8000"), "expected iteration-based"),
    ("samples with iteration warmup", ("--train-samples", "8000", "--lr-warmup-iters", "10"), "expected sample-based"),
    ("warmup fraction and iterations", ("--train-iters", "1000", "--lr-warmup-fraction", "0.01", "--lr-warmup-iters", "10"),
     "one of lr-warmup-fraction and lr-warmup-iters"),
    ("warmup fraction alone", ("--train-iters", "1000", "--lr-warmup-fraction", "0.01"), None),
    ("skip-train skips the length rules", ("--skip-train", "--train-iters", "10", "--train-samples", "80"), None),
    ("min lr above lr", ("--lr", "1e-5", "--min-lr", "1e-4"), "min_lr <= lr"),
    ("min lr below lr", ("--lr=1e-4", "--min-lr=1e-5"), None),
    ("save without interval", ("--save", "/ckpt"), "--save-interval"),
    ("save with interval", ("--save", "/ckpt", "--save-interval", "1000"), None),
    ("save with the persistent alias", ("--save", "/ckpt", "--persistent-save-interval", "1000"), None),
    ("weight decay ramp without its ends", ("--weight-decay-incr-style", "linear", "--start-weight-decay", "0.0"),
     "needs both"),
    ("weight decay ends without a ramp", ("--start-weight-decay", "0.0", "--end-weight-decay", "0.1"), "takes neither"),
    ("weight decay ramp", ("--weight-decay-incr-style", "cosine", "--start-weight-decay", "0.0", "--end-weight-decay",
                           "0.1"), None),
    # kernels
    ("local attention backend without the local spec", ("--attention-backend", "local"), "--spec local"),
    ("local attention backend with the local spec", ("--attention-backend", "local", "--spec", "local"), None),
    ("fine-grained offloading with local layers", ("--fine-grained-activation-offloading", "--transformer-impl", "local"),
     "only supported with transformer_engine"),
    # context parallelism
    ("cp seq multiple of 2cp", ("--context-parallel-size", "4"), None),
    ("cp seq not a multiple of 2cp", ("--context-parallel-size", "2", "--seq-length", "1026", "--max-position-embeddings", "2048"),
     "multiple of 2 x context-parallel-size"),
    ("hierarchical cp sizes multiply to cp", ("--context-parallel-size", "4", "--cp-comm-type", "a2a+p2p",
                                              "--hierarchical-context-parallel-sizes", "2", "2"), None),
    ("hierarchical cp sizes do not multiply to cp", ("--context-parallel-size", "4", "--cp-comm-type", "a2a+p2p",
                                                     "--hierarchical-context-parallel-sizes", "2", "4"), "multiply to 8"),
    # FSDP: torch FSDP2 refuses gradient accumulation fusion (on by default); Megatron FSDP needs fsdp_dtensor
    ("fsdp2 with fused grad accumulation", _FSDP2, "gradient accumulation fusion"),
    ("fsdp2", (*_FSDP2, "--no-gradient-accumulation-fusion"), None),
    ("megatron fsdp with torch_dist", ("--use-megatron-fsdp",), "fsdp_dtensor"),
    ("megatron fsdp", ("--use-megatron-fsdp", "--ckpt-format", "fsdp_dtensor"), None),
    # optimizer offload, CUDA graphs
    ("optimizer cpu offload alone", ("--bf16", "--use-distributed-optimizer", "--optimizer-cpu-offload"),
     "--use-precision-aware-optimizer"),
    ("optimizer cpu offload", ("--bf16", "--use-distributed-optimizer", "--optimizer-cpu-offload",
                               "--use-precision-aware-optimizer"), None),
    # precision-aware optimizer: Adam on the distributed optimizer (OptimizerConfig, with the flag, 47a175b4c4)
    ("precision-aware optimizer without the distributed optimizer", ("--bf16", "--use-precision-aware-optimizer"),
     "only supported with distributed optimizer"),
    ("precision-aware optimizer with sgd", ("--bf16", "--use-distributed-optimizer", "--use-precision-aware-optimizer",
                                            "--optimizer", "sgd"), "only supported with adam"),
    ("optimizer cpu offload with sgd", ("--bf16", "--use-distributed-optimizer", "--optimizer-cpu-offload",
                                        "--use-precision-aware-optimizer", "--optimizer", "sgd"), "only supported with adam"),
    ("sgd", ("--bf16", "--use-distributed-optimizer", "--optimizer", "sgd"), None),
    # partial distributed optimizer (DistributedDataParallel, with the flag, bb84eb93fa)
    ("optimizer instances without the distributed optimizer", ("--num-distributed-optimizer-instances", "2"),
     "Partial DistOpt cannot be used without DistOpt"),
    ("optimizer instances", ("--num-distributed-optimizer-instances", "2", "--use-distributed-optimizer"), None),
    ("enable cuda graph with impl", ("--enable-cuda-graph", "--cuda-graph-impl", "local"), "with --cuda-graph-impl"),
    ("enable cuda graph with impl none", ("--enable-cuda-graph", "--cuda-graph-impl", "none"), None),
    ("cuda graph impl alone", ("--cuda-graph-impl", "local"), None),
    # recompute
    ("selective recompute with a method", ("--recompute-granularity", "selective", "--recompute-method", "uniform"),
     "takes neither"),
    ("full recompute", ("--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"), None),
    ("block recompute of no layers", ("--recompute-granularity", "full", "--recompute-method", "block",
                                      "--recompute-num-layers", "0"), None),
    ("uniform recompute of no layers", ("--recompute-granularity", "full", "--recompute-method", "uniform",
                                        "--recompute-num-layers", "0"), "must be at least 1"),
    ("distribute saved activations at tp 1", ("--recompute-granularity", "full", "--recompute-method", "uniform",
                                              "--recompute-num-layers", "1", "--distribute-saved-activations"), "tensor-model-parallel-size > 1"),
    ("tp comm overlap without sp", ("--tensor-model-parallel-size", "2", "--tp-comm-overlap"), "--sequence-parallel"),
    # edge values of the differential audit (test_rows_agree_with_megatron_itself runs Megatron's own checks on all)
    ("tp 0", ("--tensor-model-parallel-size", "0"), "at least 1"),
    ("tp 16 beyond the world", ("--tensor-model-parallel-size", "16"), "not divisible"),
    ("cp 3 does not divide the world", ("--context-parallel-size", "3"), "not divisible"),
    ("micro batch 0", ("--micro-batch-size", "0"), "at least 1"),
    ("negative global batch", ("--global-batch-size", "-8"), "at least 1"),
    ("negative hidden size", ("--hidden-size", "-4096"), "at least 1"),
    ("heads 0", ("--num-attention-heads", "0"), "at least 1"),
    ("layers as a word", ("--num-layers", "thirty-two"), "expects an integer"),
    ("tp as a float", ("--tensor-model-parallel-size", "2.0"), "expects an integer"),
    ("gbs not a multiple of mbs x dp by 3", ("--micro-batch-size", "3", "--global-batch-size", "32"), "not divisible by micro batch"),
    ("sp with tp 2", ("--tensor-model-parallel-size", "2", "--sequence-parallel"), None),
    ("vpp layers per stage do not divide the stage", ("--pipeline-model-parallel-size", "2",
                                                      "--num-layers-per-virtual-pipeline-stage", "3"), "must divide"),
    ("vpp with pp 2 and p2p overlap", ("--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage",
                                       "4", "--global-batch-size", "8"), None),
    ("moe ep 16 beyond the world", ("--num-experts", "16", "--expert-model-parallel-size", "16"), "not divisible"),
    ("moe topk beyond the experts", ("--num-experts", "4", "--moe-router-topk", "8"), "exceeds"),
    ("full recompute without a method", ("--recompute-granularity", "full"), "recompute-method"),
    ("selective recompute with layers", ("--recompute-granularity", "selective", "--recompute-num-layers", "2"),
     "takes neither"),
    ("overlap param gather without the distributed optimizer", ("--overlap-param-gather",), "distributed optimizer"),
    ("overlap param gather", ("--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather"), None),
    ("recompute module moe_layer", ("--recompute-granularity", "selective", "--recompute-modules", "moe_layer"),
     "moe_layer is not a module"),
    ("recompute module moe_layer under full", ("--recompute-granularity", "full", "--recompute-method", "block",
                                               "--recompute-num-layers", "2", "--recompute-modules", "moe_layer"), None),
    ("recompute mla_up_proj without mla", ("--recompute-activations", "--recompute-modules", "mla_up_proj"),
     "only supported with multi_latent_attention"),
    ("recompute core_attn and mlp", ("--recompute-activations", "--recompute-modules", "core_attn", "mlp"), None),
    ("recompute moe_act without grouped gemm", ("--recompute-granularity", "selective", "--recompute-modules", "moe_act",
                                                "--num-experts", "8"), "moe_grouped_gemm"),
    ("rampup with two values", ("--global-batch-size", "64", "--rampup-batch-size", "16", "16"), "needs 3 value"),
    ("lr as a word", ("--lr", "abc"), "not a number"),
    ("min lr above a negative lr", ("--lr", "-1"), "min_lr <= lr"),
    ("pp 0", ("--pipeline-model-parallel-size", "0"), "at least 1"),
    ("layers 0", ("--num-layers", "0"), "at least 1"),
    ("micro batch as a float", ("--micro-batch-size", "2.5"), "expects an integer"),
    ("global batch in scientific notation", ("--global-batch-size", "1e3"), "expects an integer"),
    ("cp seq 2047", ("--context-parallel-size", "2", "--seq-length", "2047"), "multiple of 2 x context-parallel-size"),
    ("sp with tp and cp", ("--tensor-model-parallel-size", "2", "--sequence-parallel", "--context-parallel-size", "2"), None),
    ("vpp at pp 1", ("--num-layers-per-virtual-pipeline-stage", "2"), "pipeline-model-parallel-size > 1"),
    ("virtual stages do not split the rank's layers", ("--pipeline-model-parallel-size", "2",
                                                       "--num-virtual-stages-per-pipeline-rank", "3"), "not divisible by 3"),
    ("interleaving with one micro-batch", ("--pipeline-model-parallel-size", "2",
                                           "--num-layers-per-virtual-pipeline-stage", "8"), "multiple of pipeline"),
    ("fsdp2 with the distributed optimizer", ("--use-distributed-optimizer", *_FSDP2, "--no-gradient-accumulation-fusion"),
     "--use-distributed-optimizer"),
    ("recompute granularity partial", ("--recompute-granularity", "partial"), "must be full or selective"),
    ("block recompute beyond the stage", ("--recompute-granularity", "full", "--recompute-method", "block",
                                          "--recompute-num-layers", "64"), None),
    ("gqa 4 groups at tp 8", ("--tensor-model-parallel-size", "8", "--group-query-attention", "--num-query-groups", "4"),
     None),
    ("fp16 and bf16 at tp 2", ("--fp16", "--bf16", "--tensor-model-parallel-size", "2"), "both set"),
    ("overlap param gather without grad reduce", ("--overlap-param-gather", "--use-distributed-optimizer"),
     "--overlap-grad-reduce"),
    ("normalization in lower case", ("--normalization", "rmsnorm"), None),
    ("normalization in mixed case", ("--normalization", "RMSnorm"), "not a choice"),
    ("train iterations and samples", ("--train-iters", "100", "--train-samples", "100"), "expected iteration-based"),
    ("cp comm type per layer, too few", ("--context-parallel-size", "2", "--cp-comm-type", "p2p", "a2a"),
     "should equal to the total number of transformer layers"),
    ("cp comm type for all layers", ("--context-parallel-size", "2", "--cp-comm-type", "a2a"), None),
    ("cp comm type list without cp", ("--cp-comm-type", "p2p", "a2a"), None),
    ("layernorm recompute under fp8 tensorwise", ("--bf16", "--recompute-granularity", "selective", "--recompute-modules",
                                                  "layernorm", "--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"),
     None),
    ("layernorm recompute under fp8 delayed", ("--bf16", "--recompute-granularity", "selective", "--recompute-modules",
                                               "layernorm", "--fp8-format", "hybrid"), "Delayed scaling"),
    ("shared expert recompute with its overlap", ("--recompute-granularity", "selective", "--recompute-modules",
                                                  "shared_experts", "--num-experts", "8", "--disable-bias-linear",
                                                  "--moe-shared-expert-intermediate-size", "4096",
                                                  "--moe-shared-expert-overlap", "--moe-token-dispatcher-type", "alltoall"),
     "cannot work with --moe-shared-expert-overlap"),
    ("moe layer recompute with full", ("--moe-layer-recompute", "--num-experts", "8", "--recompute-granularity", "full",
                                       "--recompute-method", "uniform", "--recompute-num-layers", "1"), "moe-layer-recompute"),
    ("moe layer recompute over recompute activations", ("--moe-layer-recompute", "--num-experts", "8",
                                                        "--recompute-activations", "--recompute-modules", "moe_layer"),
     "moe_layer is not a module"),
    ("moe layer recompute alone", ("--moe-layer-recompute", "--num-experts", "8", "--recompute-modules", "moe_layer"),
     None),
    ("mla with gqa", ("--multi-latent-attention", "--group-query-attention", "--num-query-groups", "8"), "group"),
    ("legacy models with torch_dist", ("--use-legacy-models",), None),
    ("legacy models with torch checkpoints", ("--use-legacy-models", "--ckpt-format", "torch"), None),
]


@pytest.mark.parametrize(("flags", "refusal"), [pytest.param(f, r, id=i) for i, f, r in ROWS])
def test_megatron_accepts_or_refuses(flags: tuple[str, ...], refusal: str | None) -> None:
    if refusal is None:
        megatron(*flags)
        return
    with pytest.raises(ConfigError, match=re.escape(refusal)):
        megatron(*flags)


@pytest.fixture(scope="module")
def oracle():
    yield from megatron_oracle()


_BUILT = "refused after the checks the oracle runs, "
ORACLE_DIFFERENCES: dict[str, str] = {
    # refused later than start-up, still before or at the first step
    "gqa groups do not divide heads": _BUILT + "when Transformer Engine's DotProductAttention is built ('The number "
                                      "of attention heads must be divisible by the number of GQA groups!')",
    "rampup start not a multiple of mbs x dp": _BUILT + "at the step whose batch it is: RampupBatchsizeNumMicroBatches"
                                               "Calculator.update asserts the divisibility (num_microbatches_calculator.py)",
    "rampup increment not a multiple of mbs x dp": _BUILT + "at the step whose batch it is (the calculator's update)",
    "optimizer instances without the distributed optimizer": _BUILT + "in DistributedDataParallel.__init__ ('Partial "
                                                             "DistOpt cannot be used without DistOpt'), which needs "
                                                             "process groups",
    "negative hidden size": _BUILT + "when the first layer allocates a weight of negative size (torch.empty)",
    "moe ep 16 beyond the world": _BUILT + "in parallel_state.initialize_model_parallel (world % (ETP x EP x PP)), "
                                  "which needs process groups",
    "moe topk beyond the experts": _BUILT + "at the first step (torch.topk over fewer experts than k)",
    "uniform recompute of no layers": "never refused: the first step hangs (transformer_block.py "
                                      "_checkpointed_forward's uniform loop adds 0 to its layer index)",
    "virtual stages do not split the rank's layers": _BUILT + "when the model is built (transformer_block.py "
                                                     "get_num_layers_to_build asserts num_layers_per_pipeline_rank % "
                                                     "vp_size == 0)",
    "interleaving with one micro-batch": _BUILT + "at the first step (pipeline_parallel/schedules.py: the group of "
                                         "contiguous micro-batches must lie in [PP, M])",
    "legacy models with torch_dist": "validate_args asserted --ckpt-format torch with --use-legacy-models from "
                                     "2025-01 to 2026-05 only: a warning (test_legacy_models_warn_...)",
    # Megatron-DeepSpeed's spelling (its arguments.py: choices layernorm / rmsnorm) on the shared entry point
    "normalization in lower case": "Megatron-DeepSpeed's choices; Megatron-LM's are LayerNorm / RMSNorm",
    # llmperf reads the union of Megatron-LM's releases (megatron_rules.CHOICES); 0.16.1 is older
    "expert bias with sqrtsoftplus scores": "sqrtsoftplus is a choice of releases after 0.16.1 (HEAD d98e8a6)",
    "skip-train skips the length rules": "validate_args skips the learning-rate length rules under --skip-train since "
                                         "after 0.16.1 (HEAD arguments.py:1275)",
}
"""Rows whose answer is not what megatron-core 0.16.1's start-up checks give, and why."""


@pytest.mark.parametrize(("name", "flags", "refusal"), [pytest.param(i, f, r, id=i) for i, f, r in ROWS])
def test_rows_agree_with_megatron_itself(oracle, name: str, flags: tuple[str, ...], refusal: str | None) -> None:
    """The differential audit: each row's answer (checked against llmperf above) is Megatron's own, run on this CPU
    (tests/frameworks/megatron_oracle.py: core_v0.16.1's parse_args, validate_args, micro-batch calculator and
    TransformerConfig, 8 ranks)."""
    real = oracle([*BASE, *flags], 8)
    if name in ORACLE_DIFFERENCES:
        assert (real is None) != (refusal is None), f"{name} now agrees with Megatron: {real}"
        return
    assert (real is None) == (refusal is None), f"Megatron core_v0.16.1: {real}; llmperf row: {refusal}"


def test_block_recompute_of_no_layers_is_priced_as_no_recompute() -> None:
    """Megatron's block method checkpoints layer i only while i < --recompute-num-layers: 0 recomputes nothing."""
    cfg = megatron("--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "0")
    assert (cfg.recompute.granularity, cfg.recompute.num_layers) == ("none", None)
    assert any("recomputes no layer" in w for w in cfg.warnings), cfg.warnings


def test_legacy_models_warn_where_2025_releases_refuse_them() -> None:
    assert any("legacy model format only supports" in w for w in megatron("--use-legacy-models").warnings)
    assert not any("legacy" in w for w in megatron("--use-legacy-models", "--ckpt-format", "torch").warnings)


def test_a_refusal_exits_2_with_the_rule_and_no_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    done = llmperf(capsys, "explain", "--", "torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", *BASE,
                   "--lr", "1e-5", "--min-lr", "1e-4")
    assert done.code == 2 and "min_lr <= lr" in done.err and "Traceback" not in done.err


def test_unparsable_numbers_are_refused_as_argparse_refuses_them() -> None:
    with pytest.raises(ConfigError, match="unexpanded shell variable"):
        megatron("--lr", "$LR")


def test_a_save_interval_of_zero_warns() -> None:
    """validate_args asserts save_interval > 0 since 78af90cb77 (2025-07); older releases never save."""
    assert any("save_interval > 0" in w for w in megatron("--save", "/ckpt", "--save-interval", "0").warnings)
    assert not any("save_interval" in w for w in megatron("--save", "/ckpt", "--save-interval", "10").warnings)


def test_megatron_deepspeed_keeps_the_rules_it_forked_with(tmp_path) -> None:
    """Megatron-DeepSpeed's megatron/arguments.py validate_args asserts --warmup unset, one training unit, min_lr <= lr,
    --save-interval with --save and the fp16/fp32 switches' precision, as Megatron-LM does."""
    from tests.frameworks.helpers import script

    ds = tmp_path / "ds.json"
    ds.write_text('{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 1}}')
    run = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *BASE, "--deepspeed", "--deepspeed_config", str(ds)]
    assert script(run).framework == "megatron-deepspeed"
    for flags, refusal in ((("--warmup", "10"), "--lr-warmup-fraction"), (("--save", "/ckpt"), "--save-interval"),
                           (("--lr", "1e-5", "--min-lr", "1e-4"), "min_lr <= lr"),
                           (("--train-iters", "10", "--train-samples", "80"), "expected iteration-based")):
        with pytest.raises(ConfigError, match=re.escape(refusal)):
            script([*run, *flags])


def test_megatron_deepspeed_lowers_model_parallel_sizes_to_the_world(tmp_path) -> None:
    """Megatron-DeepSpeed's validate_args: TP = min(TP, world), PP = min(PP, world // TP) before its checks;
    Megatron-LM (since 8af3dae72a, 2024-08) refuses the same command."""
    from tests.frameworks.helpers import script

    ds = tmp_path / "ds.json"
    ds.write_text('{"train_batch_size": 2, "train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 1}}')
    sizes = ("--tensor-model-parallel-size", "8", "--pipeline-model-parallel-size", "2")
    run = ["deepspeed", "--num_gpus", "4", "pretrain_gpt.py", *BASE, "--global-batch-size", "2", "--deepspeed",
           "--deepspeed_config", str(ds), *sizes]
    cfg = script(run)
    assert (cfg.parallel.tp, cfg.parallel.pp, cfg.parallel.dp) == (4, 1, 1)
    assert any("runs TP 4, PP 1" in w for w in cfg.warnings) and "lowered" in str(cfg.sources["tp"])
    with pytest.raises(ConfigError, match="not divisible by tensor-model-parallel-size"):
        megatron(*sizes, gpus=4)


def test_both_old_cuda_graph_switches_warn() -> None:
    """Refused since 2b6b46b796 (2025-08); the releases of 2025-03 to then accept both."""
    cfg = megatron("--enable-cuda-graph", "--external-cuda-graph")
    assert any("cannot be enabled at the same time" in w for w in cfg.warnings)


def test_fp8_param_gather_without_an_fp8_format_warns() -> None:
    """TransformerConfig refuses it since 2025-04 ('fp8_param must be used together with fp8 mode'); older releases
    ignore the flag."""
    plain = megatron("--bf16", "--fp8-param-gather", "--use-distributed-optimizer")
    assert any("fp8_param must be used together with fp8 mode" in w for w in plain.warnings)
    fp8 = megatron("--bf16", "--fp8-format", "hybrid", "--fp8-param-gather", "--use-distributed-optimizer")
    assert not any("fp8_param must" in w for w in fp8.warnings)


def test_fp8_param_gather_with_optimizer_cpu_offload_warns_off_the_delayed_recipe() -> None:
    """validate_args asserts --fp8-recipe delayed for --fp8-param-gather with --optimizer-cpu-offload since e38ba9e8dc
    (2025-07); the flags are older."""
    offload = ("--bf16", "--fp8-format", "hybrid", "--fp8-param-gather", "--use-distributed-optimizer",
               "--optimizer-cpu-offload", "--use-precision-aware-optimizer")
    rule = "in conjunction with `--fp8-recipe delayed`"
    assert any(rule in w for w in megatron(*offload, "--fp8-recipe", "tensorwise").warnings)
    assert not any(rule in w for w in megatron(*offload).warnings)


def test_checkpoint_activations_warns_that_megatron_lm_exits_on_it() -> None:
    """Megatron-LM's validate_args exits on --checkpoint-activations since c1e0689d92 (2021-08); older releases and
    Megatron-DeepSpeed recompute every layer, as priced."""
    cfg = megatron("--checkpoint-activations")
    assert cfg.recompute.granularity == "full"
    assert any(w.startswith("--checkpoint-activations: Megatron-LM since 2021-08") for w in cfg.warnings)


def test_megatron_deepspeed_sequence_parallel_needs_one_device_connection(tmp_path) -> None:
    """Megatron-DeepSpeed's validate_args raises on CUDA when sequence parallelism (TP > 1) runs without
    CUDA_DEVICE_MAX_CONNECTIONS=1; a value the job states is checked, unset is taken as the 1 the launch exports."""
    from tests.frameworks.helpers import script

    ds = tmp_path / "ds.json"
    ds.write_text('{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 1}}')
    run = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *BASE, "--deepspeed", "--deepspeed_config", str(ds),
           "--tensor-model-parallel-size", "2", "--sequence-parallel", "--global-batch-size", "4"]
    with pytest.raises(ConfigError, match="requires setting the environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1"):
        script(run, env={"CUDA_DEVICE_MAX_CONNECTIONS": "8"})
    for env in ({"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, {}):
        assert script(run, env=env).parallel.sequence_parallel
    assert not script([w for w in run if w != "--sequence-parallel"], env={"CUDA_DEVICE_MAX_CONNECTIONS": "8"}).parallel.sequence_parallel


def test_expert_data_parallel_size_not_divisible_by_optimizer_instances_warns() -> None:
    """parallel_state.py asserts expert_data_parallel_size % num_distributed_optimizer_instances == 0 since
    8c1e094afe (2025-04, core_v0.13); core_v0.10 and v0.11, which have the flag, start the job."""
    moe = ("--num-experts", "8", "--expert-model-parallel-size", "8", "--use-distributed-optimizer", "--bf16",
           "--num-distributed-optimizer-instances")
    cfg = megatron(*moe, "4", gpus=16)  # expert dp = 16 / (EP 8 x expert TP 1 x PP 1) = 2
    assert any("expert data-parallel size 2" in w and "--num-distributed-optimizer-instances 4" in w
               for w in cfg.warnings)
    assert not any("expert data-parallel size" in w for w in megatron(*moe, "2", gpus=16).warnings)


def test_megatron_deepspeed_ulysses_needs_heads_for_each_sequence_rank(tmp_path) -> None:
    """Megatron-DeepSpeed's ParallelAttention asserts num_attention_heads % ds_sequence_parallel_size == 0
    (megatron/model/transformer.py); DeepSpeed's single_all_to_all (deepspeed/sequence/layer.py) scatters the heads of
    one tensor-parallel rank over the sequence ranks: divisible by them or, uneven, more than them."""
    from tests.frameworks.helpers import script

    ds = tmp_path / "ds.json"
    ds.write_text('{"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 1}}')
    run = ["torchrun", "--nnodes", "8", "--nproc-per-node", "8", "pretrain_gpt.py", *BASE, "--global-batch-size", "1",
           "--deepspeed", "--deepspeed_config", str(ds), "--ds-sequence-parallel-size", "8"]
    with pytest.raises(ConfigError, match="4 heads per tensor-parallel rank"):
        script([*run, "--tensor-model-parallel-size", "8"])
    assert script([*run, "--tensor-model-parallel-size", "4", "--pipeline-model-parallel-size", "2"]).parallel.cp == 8
