"""Every option name Megatron-LM's argument parser has accepted, for telling a typo from a real flag.

Megatron-LM parses with `argparse.ArgumentParser(allow_abbrev=False).parse_args()` (megatron/training/arguments.py
parse_args, ignore_unknown_args=False for pretrain_gpt.py and the other entry scripts), so an option it does not
define stops the job at start-up with "unrecognized arguments". Names stored without their leading `--`.

Generated (not hand-written) from the public sources: for Megatron-LM HEAD (2026-08) and every core_v0.x /
core_r0.x / v1-v2.x tag and release branch, and for Megatron-DeepSpeed, every `'--name'` string literal in
megatron/**.py and the top-level entry scripts; `--no-name` for argparse.BooleanOptionalAction options; for the
releases that build options from config dataclasses (megatron/training/argument_utils.py ArgumentGroupFactory),
every field of those dataclasses and their parents as `--field-name`, `--no-field-name` and
`--disable-field-name`; and DeepSpeed's deepspeed.add_config_arguments (--deepspeed, --deepspeed_config,
--deepscale, --deepscale_config, --deepspeed_mpi); and the options only the bigscience-workshop fork of Megatron-DeepSpeed
(BLOOM's) adds (the second string: --embed-layernorm, --pp-partition-method, --pad-vocab-size-to, ...; its last
lines from megatron/arguments.py of the fork's other branches at 8387ae1's fetch: lumi_mtf, mtf-multival, t0loading,
scratchpad, ..., whose finetune_t0.py bigscience's train/tr13-mtf scripts run with --norm-target-loss and
--reset-progress), and those only
bigcode-project/Megatron-LM (7c325cd, StarCoder's and SantaCoder's) adds (the third: --attention-head-type,
--tokenizer-file, --fragment-fim-rate, ...).
A superset on purpose: a name any release accepted is accepted.
"""

from __future__ import annotations

# One string split once: cheaper to load than a tuple of 2,500 string constants.
MEGATRON_OPTION_NAMES: frozenset[str] = frozenset("""
DDP-impl account-for-embedding-in-pipeline-split account-for-loss-in-pipeline-split
accumulate-allreduce-grads-in-fp32 activation-func activation-func-clamp-value activation-func-fp8-input-store
activation-offload-fraction activations-checkpoint-method activations-checkpoint-num-layers adam-beta1 adam-beta2
adam-eps add-bias-linear add-qkv-bias add-skipping adlr-autoresume adlr-autoresume-interval align-grad-reduce
align-param-gather all allow-ambiguous-pad-tokens aml-data-download-path ammo-convert-te-to-local-spec
ammo-load-classic-megatron-to-mcore ammo-quant-cfg app-tag-run-name app-tag-run-version apply-layernorm-1p
apply-query-key-layer-scaling apply-residual-connection-post-layernorm apply-rope-fusion apply-wd-to-qk-layernorm
async-ckpt-cpu-priority async-ckpt-io-priority async-ckpt-use-cpu-shm async-save async-strategy
async-tensor-model-parallel-allreduce attention-backend attention-dropout attention-output-gate
attention-softmax-in-fp32 auto-detect-ckpt-format autocast-dtype basemodel-type batch-boundaries
batch-invariant-backend batch-invariant-mode batch-p2p-comm batch-p2p-sync batch-size bert-embedder-type bert-load
bert-no-binary-head bf16 bias-activation-fusion bias-dropout-fusion bias-gelu-fusion biencoder-projection-dim
biencoder-shared-query-context-model binary-mask block-data-path bpe-kv-cache bpe-max-buffer bpe-params
bpe-ssm-cache budget-list budget-probs budget-type bulk_reload cache-dir cache-mla-latents calc-ft-timeouts
calculate-per-token-loss chat-template check-for-large-grads check-for-nan-in-loss check-for-spiky-loss
check-weight-hash-across-dp-replicas-interval checkpoint-activations checkpoint-in-cpu checkpoint-num-layers
choices ckpt-assume-constant-structure ckpt-convert-format ckpt-convert-save
ckpt-convert-update-legacy-dist-opt-format ckpt-drop-redundant-extra-state ckpt-format ckpt-fully-parallel-load
ckpt-fully-parallel-load-exchange-algo ckpt-fully-parallel-load-per-rank-objects
ckpt-fully-parallel-load-process-group ckpt-fully-parallel-save ckpt-fully-parallel-save-process-group
ckpt-load-validate-sharding-integrity ckpt-pg-tensors-cache-create ckpt-pg-tensors-cache-path ckpt-step
classes-fraction clip-grad clone-scatter-output-in-embedding cloze-eval config-logger-dir context-parallel-size
contigious-checkpointing coordinator-schedule-output-path count cp-comm-type cpp_ext cpu-offloading
cpu-offloading-activations cpu-offloading-double-buffering cpu-offloading-num-layers
cpu-offloading-retain-pinned-cpu-buffers cpu-offloading-weights cpu-optimizer cpu_torch_adam
create-all-gather-group create-moe-param-group cross-entropy-fusion-impl cross-entropy-loss-fusion cuda-graph-impl
cuda-graph-modules cuda-graph-retain-backward-graph cuda-graph-scope cuda-graph-use-single-mempool
cuda-graph-warmup-steps curr-iteration data data-args-path data-cache-path data-efficiency-curriculum-learning
data-impl data-parallel-random-init data-parallel-sharding-strategy data-path data-per-class-fraction
dataloader-defer-npy-index-mmap dataloader-fast-cache-load dataloader-inter-document-masking dataloader-seq-length
dataloader-type dataset-impl ddp-average-in-collective ddp-bucket-size ddp-num-buckets
ddp-pad-buckets-for-high-nccl-busbw ddp-param-name-patterns-for-fp32-local-accumulation
ddp-reduce-scatter-with-fp32-accumulation deallocate-pipeline-outputs decode-only-cuda-graphs
decoder-first-pipeline-num-layers decoder-last-pipeline-num-layers decoder-num-layers decoder-seq-length
decoder-tp-comm-overlap decoupled-lr decoupled-min-lr decrease-batch-size-if-needed deep-init deepscale
deepscale_config deepspeed deepspeed-activation-checkpointing deepspeed_config deepspeed_mpi default
default-dynamic-cp defer-embedding-wgrad-compute delay-offload-until-cuda-graph delay-param-gather
delay-wgrad-compute delim delta-offload-bytes-across-pp-ranks dense-grouped-gemm deterministic-mode
dino-bottleneck-size dino-freeze-last-layer dino-head-hidden-size dino-local-crops-number dino-local-img-size
dino-norm-last-layer dino-teacher-temp dino-warmup-teacher-temp dino-warmup-teacher-temp-epochs
disable-account-for-embedding-in-pipeline-split disable-account-for-loss-in-pipeline-split disable-activation-func
disable-activation-func-clamp-value disable-activation-func-fp8-input-store disable-activation-offload-fraction
disable-add-bias-linear disable-add-qkv-bias disable-align-grad-reduce disable-all
disable-apply-query-key-layer-scaling disable-apply-residual-connection-post-layernorm disable-apply-rope-fusion
disable-async-ckpt-cpu-priority disable-async-ckpt-io-priority disable-async-ckpt-use-cpu-shm disable-async-save
disable-async-strategy disable-async-tensor-model-parallel-allreduce disable-attention-backend
disable-attention-dropout disable-attention-output-gate disable-attention-softmax-in-fp32
disable-auto-detect-ckpt-format disable-autocast-dtype disable-batch-invariant-backend disable-batch-invariant-mode
disable-batch-p2p-comm disable-batch-p2p-sync disable-bf16 disable-bf16-reduced-precision-matmul
disable-bias-activation-fusion disable-bias-dropout-fusion disable-bias-linear disable-budget
disable-calculate-per-token-loss disable-chat-template disable-check-for-nan-in-loss disable-check-for-spiky-loss
disable-check-weight-hash-across-dp-replicas-interval disable-choices disable-chunked-prefill
disable-ckpt-assume-constant-structure disable-ckpt-convert-format disable-ckpt-convert-save
disable-ckpt-convert-update-legacy-dist-opt-format disable-ckpt-format disable-ckpt-fully-parallel-load
disable-ckpt-fully-parallel-load-exchange-algo disable-ckpt-fully-parallel-load-per-rank-objects
disable-ckpt-fully-parallel-load-process-group disable-ckpt-fully-parallel-save
disable-ckpt-fully-parallel-save-process-group disable-ckpt-load-validate-sharding-integrity
disable-ckpt-pg-tensors-cache-create disable-ckpt-pg-tensors-cache-path disable-ckpt-step
disable-clone-scatter-output-in-embedding disable-config-logger-dir disable-context-parallel-size
disable-cp-comm-type disable-cpu-offloading disable-cpu-offloading-activations
disable-cpu-offloading-double-buffering disable-cpu-offloading-num-layers
disable-cpu-offloading-retain-pinned-cpu-buffers disable-cpu-offloading-weights disable-cross-entropy-fusion-impl
disable-cross-entropy-loss-fusion disable-cuda-graph-impl disable-cuda-graph-modules
disable-cuda-graph-retain-backward-graph disable-cuda-graph-scope disable-cuda-graph-use-single-mempool
disable-cuda-graph-warmup-steps disable-data-parallel-random-init disable-deallocate-pipeline-outputs
disable-decrease-batch-size-if-needed disable-default disable-default-dynamic-cp
disable-defer-embedding-wgrad-compute disable-delay-offload-until-cuda-graph disable-delay-wgrad-compute
disable-delta-offload-bytes-across-pp-ranks disable-dense-grouped-gemm disable-deterministic-mode
disable-disable-bf16-reduced-precision-matmul disable-disable-jit-fuser disable-disable-parameter-transpose-cache
disable-disable-straggler-on-startup disable-dist-ckpt-optim-fully-reshardable disable-dist-ckpt-save-pre-mcore-014
disable-dist-ckpt-strictness disable-distrib-optim-fully-reshardable-mem-efficient
disable-distribute-saved-activations disable-distributed-backend disable-distributed-timeout-minutes
disable-distributed-timeout-seconds-after-init disable-dp-balanced disable-dsa-indexer-head-dim
disable-dsa-indexer-k-norm-epsilon disable-dsa-indexer-k-norm-fp32 disable-dsa-indexer-loss-coeff
disable-dsa-indexer-n-heads disable-dsa-indexer-rope-interleaved disable-dsa-indexer-rotate-activation
disable-dsa-indexer-scoring-relu disable-dsa-indexer-skip-topk-offset disable-dsa-indexer-topk
disable-dsa-indexer-topk-freq disable-dsa-indexer-use-sparse-loss disable-dsa-kernel-backend
disable-dynamic-context-parallel disable-embedding-init-method disable-embedding-init-method-std
disable-empty-unused-memory-level disable-enable-autocast disable-enable-cuda-graph
disable-enable-hyper-connections disable-enable-mhc-connections disable-enabled disable-end-weight-decay
disable-ep-overlap-early-attn-memory-release disable-error-injection-rate disable-error-injection-type
disable-eval-global-batch-size disable-eval-interval disable-eval-iters disable-eval-micro-batch-size
disable-exit-duration-in-mins disable-exit-interval disable-exit-on-missing-checkpoint disable-exit-signal
disable-exit-signal-handler disable-exit-signal-handler-for-dataloader disable-exit-signal-handler-for-training
disable-experimental-attention-variant disable-experimental-attention-variant-loss-scale-func
disable-expert-gtp-weight-remat-size disable-expert-model-parallel-size
disable-expert-tensor-parallel-num-weight-shards disable-expert-tensor-parallel-size disable-external-cuda-graph
disable-fallback-to-eager-attn disable-fault-injector-delay-start-iteration disable-fault-injector-fault-delay
disable-fault-injector-fault-probabilities disable-fault-injector-fault-types disable-fault-injector-mtti-seconds
disable-fault-injector-num-ranks disable-fault-injector-offset-seconds disable-fault-injector-ranks
disable-fault-injector-seed disable-ffn-hidden-size disable-filter-warnings disable-finalize-model-grads-func
disable-fine-grained-activation-offloading disable-fine-grained-offloading-max-inflight-offloads disable-finetune
disable-first-last-layers-bf16 disable-flash-attention-version disable-flash-decode
disable-flight-recorder-dump-on-timeout disable-flight-recorder-dump-path
disable-flight-recorder-extra-dump-on-exec disable-flight-recorder-include-only-active
disable-flight-recorder-include-stack-trace disable-flight-recorder-trace-buffer-size disable-fp16
disable-fp32-residual-connection disable-fp4 disable-fp4-param disable-fp4-quantizer-factory disable-fp4-recipe
disable-fp8 disable-fp8-amax-compute-algo disable-fp8-amax-history-len disable-fp8-dot-product-attention
disable-fp8-interval disable-fp8-margin disable-fp8-multi-head-attention disable-fp8-output-proj disable-fp8-param
disable-fp8-quantizer-factory disable-fp8-recipe disable-fp8-wgrad disable-full-validation
disable-fully-parallel-load disable-fully-parallel-save disable-fused-residual-rmsnorm
disable-fused-single-qkv-rope disable-gated-linear-unit disable-gdp-cutedsl-kernel
disable-gdp-num-chunk-states-to-recompute disable-gdp-num-householder disable-global-batch-size
disable-gloo-process-groups disable-glu-linear-offset disable-gpu-sniff-test-interval disable-grad-scale-func
disable-grad-sync-func disable-gradient-accumulation-fusion disable-gtp-remat-opt-in-modules
disable-gtp-weight-remat-size disable-hetereogenous-dist-checkpoint disable-heterogeneous-block-specs
disable-hidden-dropout disable-hidden-size disable-hierarchical-context-parallel-sizes
disable-high-priority-a2a-comm-stream disable-high-priority-stream-groups disable-https
disable-hybrid-context-parallel disable-inference-cuda-graph-scope disable-inference-disable-triton-nvls-kernels
disable-inference-fuse-tp-communication disable-inference-grouped-gemm-backend
disable-inference-moe-disable-fused-quant-kernels disable-inference-moe-token-dispatcher-type
disable-inference-rng-tracker disable-inference-sampling-seed disable-init-method disable-init-method-std
disable-init-model-with-meta-device disable-is-hybrid-model disable-iterations-to-skip disable-jit-fuser
disable-kitchen-attention-backend disable-kv-channels disable-layernorm-epsilon
disable-layernorm-zero-centered-gamma disable-lazy-mpu-init disable-linear-attention-freq
disable-linear-attention-type disable-linear-conv-kernel-dim disable-linear-key-head-dim
disable-linear-num-key-heads disable-linear-num-value-heads disable-linear-value-head-dim disable-load
disable-load-main-params-from-ckpt disable-load-optim disable-load-rng disable-local-rank
disable-log-device-memory-used disable-log-energy disable-log-interval disable-log-l2-norm-grad-to-tensorboard
disable-log-loss-scale-to-tensorboard disable-log-max-attention-logit disable-log-memory-interval
disable-log-memory-to-tensorboard disable-log-moe-overload-factor disable-log-num-zeros-in-grad
disable-log-params-norm disable-log-progress disable-log-runtime-to-tensorboard disable-log-straggler
disable-log-throughput disable-log-throughput-to-tensorboard disable-log-timers-to-tensorboard
disable-log-validation-ppl-to-tensorboard disable-log-world-size-to-tensorboard disable-logging-level
disable-lr-decay-iters disable-lr-decay-samples disable-lr-decay-steps disable-lr-decay-style
disable-lr-warmup-fraction disable-lr-warmup-init disable-lr-warmup-iters disable-lr-warmup-samples
disable-lr-warmup-steps disable-lr-wsd-decay-iters disable-lr-wsd-decay-samples disable-lr-wsd-decay-style
disable-mamba-head-dim disable-mamba-mem-eff-path disable-mamba-num-groups disable-mamba-num-heads
disable-mamba-state-dim disable-mamba-training-ssm-states-dtype disable-manual-gc disable-manual-gc-eval
disable-manual-gc-interval disable-masked-softmax-fusion disable-max disable-max-seqlen-per-dp-cp-rank
disable-mem-efficient-ln disable-memory-efficient-layer-norm disable-memory-keys disable-memory-snapshot-path
disable-merge-file disable-metadata-path disable-mhc-init-gating-factor disable-mhc-num-residual-streams
disable-mhc-recompute-layer-num disable-mhc-sinkhorn-iterations disable-micro-batch-size
disable-microbatch-group-size-per-vp-stage disable-min-dynamic-context-parallel-size
disable-min-offloaded-tensor-size disable-minmax disable-mlp-chunks-for-prefill disable-mlp-chunks-for-training
disable-modules-to-filter disable-moe-apply-probs-on-input disable-moe-aux-loss-coeff disable-moe-combine-bwd-dtype
disable-moe-deepep-num-sms disable-moe-dispatch-fwd-dtype disable-moe-enable-deepep
disable-moe-enable-routing-replay disable-moe-expert-capacity-factor disable-moe-expert-rank-capacity-factor
disable-moe-extended-tp disable-moe-ffn-hidden-size disable-moe-flex-dispatcher-backend
disable-moe-flex-dispatcher-num-sms disable-moe-grad-scale-func disable-moe-grouped-gemm
disable-moe-hybridep-num-blocks-permute disable-moe-hybridep-num-blocks-unpermute disable-moe-hybridep-num-sms
disable-moe-hybridep-num-sms-preprocessing disable-moe-hybridep-pad-uneven-dispatch-inputs
disable-moe-input-jitter-eps disable-moe-latent-size disable-moe-layer-freq disable-moe-layer-recompute
disable-moe-mlp-glu-interleave-size disable-moe-ncclep-static-shape disable-moe-ncclep-zero-copy
disable-moe-pad-expert-input-to-capacity disable-moe-pad-experts-for-cuda-graph-inference disable-moe-paged-stash
disable-moe-paged-stash-buffer-size-factor-cpu disable-moe-paged-stash-buffer-size-factor-cuda
disable-moe-paged-stash-page-size disable-moe-per-layer-logging disable-moe-permute-fusion
disable-moe-permute-fusion-into-hybridep disable-moe-router-bias-update-rate disable-moe-router-dtype
disable-moe-router-enable-expert-bias disable-moe-router-force-biased disable-moe-router-force-load-balancing
disable-moe-router-fusion disable-moe-router-group-topk disable-moe-router-load-balancing-type
disable-moe-router-num-groups disable-moe-router-padding-for-fp8 disable-moe-router-padding-for-quantization
disable-moe-router-pre-softmax disable-moe-router-quantile-balancing-ema disable-moe-router-score-function
disable-moe-router-topk disable-moe-router-topk-limited-devices disable-moe-router-topk-scaling-factor
disable-moe-routing-trace-capture-hidden-states disable-moe-routing-trace-capture-logits
disable-moe-routing-trace-dump-weights disable-moe-routing-trace-max-training-iters disable-moe-routing-trace-path
disable-moe-shared-expert-gate disable-moe-shared-expert-glu-interleave-size
disable-moe-shared-expert-intermediate-size disable-moe-shared-expert-overlap disable-moe-single-grouped-bias
disable-moe-single-grouped-weight disable-moe-token-dispatcher-type disable-moe-token-drop-policy
disable-moe-token-dropping disable-moe-top2-2nd-expert-sampling disable-moe-use-grouped-tensor
disable-moe-use-legacy-grouped-gemm disable-moe-z-loss-coeff disable-most-recent-k disable-mrope-section
disable-msc disable-mtp-detach-heads disable-mtp-grad-scale-func disable-mtp-hsm
disable-mtp-hybrid-override-pattern disable-mtp-loss-scaling-factor disable-mtp-num-layers disable-mtp-standalone
disable-mtp-use-repeated-layer disable-multi-latent-attention disable-multiple-validation-sets
disable-mup-attn-scale-power disable-mup-base-head-dim disable-mup-base-hidden-size disable-mup-embedding-mult
disable-mup-output-mult disable-mup-width-mult disable-nccl-all-reduce-for-prefill
disable-nccl-communicator-config-path disable-no-rope-freq disable-no-sync-func disable-no-weight-decay-cond-type
disable-non-persistent-ckpt-type disable-non-persistent-global-ckpt-dir disable-non-persistent-local-ckpt-algo
disable-non-persistent-local-ckpt-dir disable-non-persistent-save-interval disable-normalization
disable-null-tokenizer-eod-id disable-null-tokenizer-pad-id disable-num-attention-heads disable-num-layers
disable-num-layers-at-end-in-bf16 disable-num-layers-at-start-in-bf16 disable-num-layers-in-first-pipeline-stage
disable-num-layers-in-last-pipeline-stage disable-num-microbatches-with-partial-activation-checkpoints
disable-num-moe-experts disable-num-query-groups disable-num-residual-streams disable-nvtx-ranges
disable-offload-modules disable-output-layer-init-method disable-overlap-dispatch-backward-with-experts-wgrad
disable-overlap-moe-expert-parallel-comm disable-overlap-p2p-comm disable-overlap-p2p-comm-warmup-flush
disable-override-opt-param-scheduler disable-pad-vocab-size disable-padded-vocab-size disable-param-sync-func
disable-parameter-transpose-cache disable-params-dtype disable-perform-initialization disable-persist-layer-norm
disable-pipeline-dtype disable-pipeline-model-parallel-comm-backend disable-pipeline-model-parallel-layout
disable-pipeline-model-parallel-size disable-pretrained-checkpoint disable-profile-ranks disable-profile-step-end
disable-profile-step-start disable-pytorch-profiler-collect-callstack disable-pytorch-profiler-collect-chakra
disable-pytorch-profiler-collect-shapes disable-qk-clip disable-qk-clip-alpha disable-qk-clip-threshold
disable-qk-l2-norm disable-qk-layernorm disable-quant-recipe disable-rampup-batch-size
disable-recompute-granularity disable-recompute-method disable-recompute-modules disable-recompute-num-layers
disable-record-memory-history disable-record-shapes disable-replication disable-replication-factor
disable-replication-jump disable-rerun-mode disable-rotary-interleaved disable-runtime-time-unit disable-save
disable-save-activations-interval disable-save-config-filepath disable-save-dgrads-interval disable-save-interval
disable-save-optim disable-save-params-interval disable-save-retain-interval disable-save-rng
disable-save-tokenizer-assets disable-save-tokens-per-expert-interval disable-save-wgrads-interval disable-seed
disable-sequence-packing-scheduler disable-sequence-parallel disable-set-level-for-all-loggers
disable-sharp-enabled-group disable-skip-train disable-softmax-scale disable-softmax-type disable-special-tokens
disable-start-eval-at-iter disable-start-weight-decay disable-step-batch-size-schedule disable-str
disable-straggler-ctrlr-port disable-straggler-minmax-count disable-straggler-on-startup
disable-stream-ckpt-dequant disable-strict-fsdp-dtensor-load disable-symmetric-ar-type
disable-symmetric-registration disable-te-rng-tracker disable-tensor-model-parallel-size
disable-tensor-parallel-num-weight-shards disable-tensorboard-dir disable-tensorboard-log-interval
disable-tensorboard-queue-size disable-test-mode disable-throughput-window-size disable-tiktoken-num-special-tokens
disable-tiktoken-pattern disable-timers disable-timing-log-level disable-timing-log-option
disable-tokenizer-hf-no-include-special-tokens disable-tokenizer-hf-no-use-fast disable-tokenizer-model
disable-tokenizer-sentencepiece-ignore-extra-whitespaces disable-tokenizer-sentencepiece-legacy
disable-tokenizer-type disable-tp-comm-atomic-ag disable-tp-comm-atomic-rs disable-tp-comm-bootstrap-backend
disable-tp-comm-bulk-dgrad disable-tp-comm-bulk-wgrad disable-tp-comm-overlap disable-tp-comm-overlap-ag
disable-tp-comm-overlap-disable-fc1 disable-tp-comm-overlap-disable-qkv disable-tp-comm-overlap-rs
disable-tp-comm-overlap-rs-dgrad disable-tp-comm-split-ag disable-tp-comm-split-rs disable-tp-only-amax-red
disable-train-iters disable-train-samples disable-train-sync-interval disable-transformer-impl
disable-trust-remote-code disable-use-checkpoint-args disable-use-checkpoint-opt-param-scheduler
disable-use-cpu-initialization disable-use-fused-mhc disable-use-fused-weighted-squared-relu disable-use-gigatoken
disable-use-gloo-process-groups disable-use-grouped-gemm-for-dense-mlp disable-use-grouped-gemm-for-shared-expert
disable-use-inference-optimized-layers disable-use-kitchen disable-use-kitchen-attention
disable-use-mamba-mem-eff-path disable-use-megatron-fsdp disable-use-mp-args-from-checkpoint-args disable-use-mup
disable-use-nsys-profiler disable-use-persistent-ckpt-worker disable-use-pytorch-profiler
disable-use-ring-exchange-p2p disable-use-sharp disable-use-te-activation-func disable-use-te-rng-tracker
disable-use-tokenizer-model-from-checkpoint-args disable-use-torch-fsdp2 disable-use-tp-pp-dp-mapping
disable-use-transformer-engine-op-fuser disable-validation-set-names disable-variable-seq-lengths
disable-verify-integrity disable-virtual-pipeline-model-parallel-size disable-vision-class-token
disable-vocab-extra-ids disable-vocab-file disable-vocab-size disable-wandb-entity disable-wandb-exp-name
disable-wandb-project disable-wandb-save-dir disable-wd-incr-steps disable-weight-decay-incr-style
disable-wgrad-deferral-limit disable-window-attn-skip-freq disable-window-size disable-wsd-decay-steps
dist-ckpt-format dist-ckpt-optim-fully-reshardable dist-ckpt-save-pre-mcore-014 dist-ckpt-strictness
dist-ckpt-workers distill-coeff distill-only distillation distrib-optim-fully-reshardable-mem-efficient
distribute-checkpointed-activations distribute-saved-activations distributed-backend distributed-timeout-minutes
distributed-timeout-seconds-after-init dp-balanced drain-between-batches drop-vision-class-token ds-inference
ds-sequence-parallel-fpdt ds-sequence-parallel-fpdt-chunk-size ds-sequence-parallel-fpdt-offloading
ds-sequence-parallel-size ds_fused_adam dsa-indexer-head-dim dsa-indexer-k-norm-epsilon dsa-indexer-k-norm-fp32
dsa-indexer-loss-coeff dsa-indexer-n-heads dsa-indexer-rope-interleaved dsa-indexer-rotate-activation
dsa-indexer-scoring-relu dsa-indexer-skip-topk-offset dsa-indexer-topk dsa-indexer-topk-freq
dsa-indexer-use-sparse-loss dsa-kernel-backend dump-param-to-param-group-map dynamic-context-parallel elements
emb-int-list emb-per-list embedding-init-method embedding-init-method-std embedding-path embedding-weights-in-fp32
empty-unused-memory-level enable-autocast enable-chunked-prefill enable-cuda-graph enable-experimental
enable-expert-tensor-parallelism enable-ft-package enable-full-sharding-in-hsdp enable-gpt-oss
enable-hyper-connections enable-mhc-connections enable-msc enable-one-logger enable-router
enable-zbh1-exact-semantics enable-zbh1-pipeline enabled encoder-num-layers encoder-pipeline-model-parallel-size
encoder-seq-length encoder-tensor-model-parallel-size end-weight-decay env-config eod-mask-loss
ep-overlap-early-attn-memory-release ep-size epochs error-injection-rate error-injection-type eval-batch-size
eval-global-batch-size eval-hf eval-interval eval-iters eval-max-preds-per-seq eval-micro-batch-size
eval-seq-length eval-text-key evidence-data-path exit-duration-in-mins exit-interval exit-on-missing-checkpoint
exit-signal exit-signal-handler exit-signal-handler-for-dataloader exit-signal-handler-for-training exp-avg-dtype
exp-avg-sq-dtype experimental-attention-variant experimental-attention-variant-loss-scale-func
expert-gtp-weight-remat-size expert-interval expert-model-parallel-size expert-tensor-parallel-num-weight-shards
expert-tensor-parallel-size export-default-te-spec export-draft-vocab-size export-eagle-algorithm
export-force-local-attention export-freeze-mtp export-kd-cfg export-kd-finalize export-kd-teacher-ckpt-format
export-kd-teacher-load export-kd-teacher-model-config export-kv-cache-quant export-legacy-megatron
export-model-type export-moe-apply-probs-on-input export-num-eagle-layers export-num-medusa-heads export-num-mtp
export-offline-model export-qk-l2-norm export-quant-cfg export-real-quant-cfg export-te-mcore-model
expt-extended-lambda expt-relaxed-constexpr external-cuda-graph faiss-use-gpu fake-process-group
fallback-to-eager-attn fault-injector-delay-start-iteration fault-injector-fault-delay
fault-injector-fault-probabilities fault-injector-fault-types fault-injector-mtti-seconds fault-injector-num-ranks
fault-injector-offset-seconds fault-injector-ranks fault-injector-seed ffn-hidden-size filter-warnings fim-data
fim-eod-token fim-fragment-rate fim-middle-token fim-no-prefix fim-pad-token fim-prefix-token fim-rate
fim-split-sample fim-spm-rate fim-suffix-token finalize-model-grads-func fine-grained-activation-offloading
fine-grained-offloading-max-inflight-offloads finetune finetune-data-files finetune-data-split finetune-hf-dataset
first-last-layers-bf16 flash-attention-version flash-decode flex-hetero-ffn flex-hetero-mamba
flex-hetero-moe-expert flex-strict flextron flextron-config-file flight-recorder-dump-on-timeout
flight-recorder-dump-path flight-recorder-extra-dump-on-exec flight-recorder-include-only-active
flight-recorder-include-stack-trace flight-recorder-trace-buffer-size force-ds-sequence-parallel force-emb
force-mamba force-mlp force-router-skip fp16 fp16-lm-cross-entropy fp32-allreduce fp32-embedding fp32-layernorm
fp32-residual-connection fp32-tokentypes fp4 fp4-format fp4-param fp4-param-gather fp4-quantizer-factory fp4-recipe
fp8 fp8-amax-compute-algo fp8-amax-history-len fp8-dot-product-attention fp8-e4m3 fp8-format fp8-hybrid
fp8-interval fp8-margin fp8-multi-head-attention fp8-output-proj fp8-param fp8-param-gather fp8-quantizer-factory
fp8-recipe fp8-wgrad freeze-LM freeze-ViT freeze-all-layers freeze-base-for-mtp freeze-model freeze-router
fsdp-db-use-persist-buf-on-alloc-fail fsdp-double-buffer fsdp-manual-registration ft-num-warmup-iters
full-validation fully-parallel-load fully-parallel-save fused-residual-rmsnorm fused-single-qkv-rope
gated-linear-unit gdp-cutedsl-kernel gdp-num-chunk-states-to-recompute gdp-num-householder gemm-shapes genfile
global-batch-size glu-linear-offset gpu-sniff-test-interval grad-reduce-in-bf16 grad-scale-func grad-sync-func
gradient-accumulation-fusion greedy group-query-attention grpo-clamp-eps-lower grpo-clamp-eps-upper
grpo-default-temperature grpo-default-top-p grpo-entropy-term-weight grpo-filter-groups-with-same-reward
grpo-group-size grpo-iterations grpo-kl-beta grpo-prompts-per-step gtp-expert-remat-nccl-ub gtp-remat-nccl-ub
gtp-remat-opt-in-modules gtp-remat-reduce-scatter-with-fp32-accumulation gtp-weight-remat-size hard-sample-th
head-lr-mult hetereogenous-dist-checkpoint heterogeneous-block-specs heterogeneous-layers-config-encoded-json
heterogeneous-layers-config-path hidden-dropout hidden-size hidden-size-teacher hierarchical-context-parallel-sizes
high-priority-a2a-comm-stream high-priority-stream-groups https hybrid-attention-ratio hybrid-context-parallel
hybrid-layer-pattern hybrid-mlp-ratio hybrid-override-pattern hysteresis ict-head-size ict-load img-dim img-h img-w
includes incoming-requests-duration incoming-requests-per-sec incoming-requests-per-step indexer-batch-size
indexer-log-interval inference inference-batch-times-seqlen-threshold inference-ckpt-non-strict
inference-coordinator-port inference-cuda-graph-all-prefills inference-cuda-graph-max-tokens
inference-cuda-graph-scope inference-disable-ep-consensus inference-disable-triton-nvls-kernels
inference-dynamic-batching inference-dynamic-batching-async-sched-mode inference-dynamic-batching-block-size
inference-dynamic-batching-buffer-guaranteed-fraction inference-dynamic-batching-buffer-overflow-factor
inference-dynamic-batching-buffer-size-gb inference-dynamic-batching-chunk-size
inference-dynamic-batching-cuda-graph-max-tokens inference-dynamic-batching-cuda-graph-mixed-prefill-count
inference-dynamic-batching-cuda-graph-sizing-distribution inference-dynamic-batching-logprobs-mode
inference-dynamic-batching-mamba-memory-ratio inference-dynamic-batching-max-requests
inference-dynamic-batching-max-requests-override inference-dynamic-batching-max-tokens
inference-dynamic-batching-max-tokens-override inference-dynamic-batching-num-cuda-graphs
inference-dynamic-batching-paused-buffer-size-gb inference-dynamic-batching-prefix-caching
inference-dynamic-batching-prefix-caching-coordinator-policy
inference-dynamic-batching-prefix-caching-eviction-policy inference-dynamic-batching-prefix-caching-mamba-gb
inference-dynamic-batching-prefix-caching-routing-alpha inference-dynamic-batching-sampling-backend
inference-dynamic-batching-track-generated-token-events inference-dynamic-batching-track-paused-request-events
inference-dynamic-batching-unified-memory-level inference-fuse-tp-communication inference-grouped-gemm-backend
inference-logging-step-interval inference-max-batch-size inference-max-requests inference-max-seq-length
inference-moe-disable-fused-quant-kernels inference-moe-token-dispatcher-type inference-repeat-n
inference-rng-tracker inference-sampling-seed inference-shards inference-text-gen-server-logging
inference-use-synchronous-zmq-collectives inference-wandb-logging init-method init-method-std
init-method-xavier-uniform init-model-with-meta-device initial-loss-scale initialize-socket-comms
inprocess-active-world-size inprocess-barrier-timeout inprocess-completion-timeout inprocess-empty-cuda-cache
inprocess-granularity inprocess-hard-timeout inprocess-heartbeat-interval inprocess-heartbeat-timeout
inprocess-last-call-wait inprocess-max-iterations inprocess-monitor-process-interval
inprocess-monitor-thread-interval inprocess-progress-watchdog-interval inprocess-restart inprocess-soft-timeout
inprocess-termination-grace-time input-data-sizes-file input-image-path input-prompts-json input_files
intermediate-size is-flex-eval is-hybrid-model iter-per-epoch iterations-to-skip kd kd-alpha-ce kd-beta-ce kd-temp
keep-fp8-transpose-cache keep-fp8-transpose-cache-when-using-custom-fsdp kill-switch-file kitchen-attention-backend
kitchen-config-file kitchen-recipe-number kv-channels kv-lora-rank langrl-env-config langrl-external-server
langrl-inference-server-conversation-template langrl-inference-server-type last layer-ranking-list
layernorm-epsilon layernorm-zero-centered-gamma lazy-loader lazy-mpu-init legacy-tokenizer linear-attention-freq
linear-attention-type linear-conv-kernel-dim linear-key-head-dim linear-num-key-heads linear-num-value-heads
linear-scaler-end linear-scaler-start linear-value-head-dim lion-beta1 lion-beta2 load load-all-rng
load-main-params-from-ckpt load-model-opt-format load-openai load-optim load-rng load-tag load-teacher local-rank
local_rank log-batch-size-to-tensorboard log-budgets log-device-memory-used log-energy log-interval
log-l2-norm-grad-to-tensorboard log-loss-scale-to-tensorboard log-max-attention-logit log-memory-interval
log-memory-to-tensorboard log-moe-overload-factor log-num-zeros-in-grad log-optimizer-states-to-tensorboard
log-params-norm log-progress log-runtime-to-tensorboard log-straggler log-throughput log-throughput-to-tensorboard
log-timers-to-tensorboard log-validation-ppl-to-tensorboard log-world-size-to-tensorboard logging-level
logits-load-decode-threads logits-load-dir logits-load-ignore-errors logits-load-kd-loss-alpha
logits-load-msc-prefetch-depth logits-load-prefetch-factor logits-save-dir logits-save-dtype logits-save-top-k
logits-save-top-p logits-save-top-p-min-k loose-json loss-alpha loss-scale loss-scale-window lr lr-decay-iters
lr-decay-samples lr-decay-steps lr-decay-style lr-decay-tokens lr-mult-router lr-warmup-fraction lr-warmup-init
lr-warmup-iters lr-warmup-samples lr-warmup-steps lr-warmup-tokens lr-wsd-decay-iters lr-wsd-decay-samples
lr-wsd-decay-style main-grads-dtype main-params-dtype make-vocab-size-divisible-by mamba-head-dim
mamba-inference-conv-states-dtype mamba-inference-ssm-states-dtype mamba-int-list mamba-num-groups mamba-num-heads
mamba-per-list mamba-state-dim mamba-training-ssm-states-dtype manual-gc manual-gc-eval manual-gc-interval
mask-factor mask-prob mask-type masked-lm-prob masked-softmax-fusion max max-num-samples max-position-embeddings
max-preds-per-seq max-seqlen-per-dp-cp-rank max-tokens-to-oom megatron-fsdp-enable-fine-grained-param-gather
megatron-fsdp-grad-comm-dtype megatron-fsdp-main-grads-dtype megatron-fsdp-main-params-dtype
megatron-fsdp-max-pool-double-buffer megatron-fsdp-version mem-batch-size mem-infer-seq-len
memory-centric-tiled-linear memory-efficient-layer-norm memory-keys memory-profile memory-profile-path
memory-snapshot-path merge-file metadata-path mhc-init-gating-factor mhc-num-residual-streams
mhc-recompute-layer-num mhc-sinkhorn-iterations micro-batch-size microbatch-group-size-per-virtual-pipeline-stage
microbatch-group-size-per-vp-stage mid-level-dataset-surplus min-dynamic-context-parallel-size min-loss-scale
min-lr min-offloaded-tensor-size min-scale minmax mla-down-proj-fusion mlp-chunks-for-prefill
mlp-chunks-for-training mlp-int-list mlp-per-list mlp-type mmap-warmup mock-data model-parallel-size model-provider
modelopt-enabled modules-to-filter moe-apply-probs-on-input moe-aux-loss-coeff moe-combine-bwd-dtype
moe-deepep-num-sms moe-dispatch-fwd-dtype moe-enable-deepep moe-enable-routing-replay moe-eval-capacity-factor
moe-expert-capacity-factor moe-expert-int-list moe-expert-parallel-size moe-expert-per-list
moe-expert-rank-capacity-factor moe-extended-tp moe-ffn-hidden-size moe-flex-dispatcher-backend
moe-flex-dispatcher-num-sms moe-grad-scale-func moe-grouped-gemm moe-hybridep-num-blocks-permute
moe-hybridep-num-blocks-unpermute moe-hybridep-num-sms moe-hybridep-num-sms-preprocessing
moe-hybridep-pad-uneven-dispatch-inputs moe-input-jitter-eps moe-latent-size moe-layer-freq moe-layer-recompute
moe-loss-coeff moe-min-capacity moe-mlp-glu-interleave-size moe-ncclep-static-shape moe-ncclep-zero-copy
moe-pad-expert-input-to-capacity moe-pad-experts-for-cuda-graph-inference moe-paged-stash
moe-paged-stash-buffer-size-factor-cpu moe-paged-stash-buffer-size-factor-cuda moe-paged-stash-page-size
moe-per-layer-logging moe-permute-fusion moe-permute-fusion-into-hybridep moe-router-bias-update-rate
moe-router-dtype moe-router-enable-expert-bias moe-router-force-biased moe-router-force-load-balancing
moe-router-fusion moe-router-group-topk moe-router-load-balancing-type moe-router-num-groups
moe-router-padding-for-fp8 moe-router-padding-for-quantization moe-router-pre-softmax
moe-router-quantile-balancing-ema moe-router-score-function moe-router-topk moe-router-topk-limited-devices
moe-router-topk-scaling-factor moe-routing-trace-capture-hidden-states moe-routing-trace-capture-logits
moe-routing-trace-dump-weights moe-routing-trace-max-inference-steps moe-routing-trace-max-training-iters
moe-routing-trace-path moe-shared-expert-gate moe-shared-expert-glu-interleave-size
moe-shared-expert-intermediate-size moe-shared-expert-overlap moe-single-grouped-bias moe-single-grouped-weight
moe-token-dispatcher-type moe-token-drop-policy moe-token-dropping moe-train-capacity-factor
moe-upcycling-granularity moe-use-grouped-tensor moe-use-legacy-grouped-gemm moe-use-upcycling moe-z-loss-coeff mos
most-recent-k mrope-section mscale mscale-all-dim mtp-detach-heads mtp-grad-scale-func mtp-hsm
mtp-hybrid-override-pattern mtp-loss-scaling-factor mtp-num-layers mtp-standalone mtp-use-repeated-layer
multi-latent-attention multiple-validation-sets muon-coefficient-type muon-extra-scale-factor muon-fp32-matmul-prec
muon-momentum muon-nesterov muon-no-split-qkv muon-num-ns-steps muon-scalar-optimizer muon-scale-mode muon-tp-mode
muon-use-nesterov muon-use-syrk mup-attn-scale-power mup-base-head-dim mup-base-hidden-size mup-embedding-mult
mup-output-mult mup-width-mult names nccl-all-reduce-for-prefill nccl-communicator-config-path
no-account-for-embedding-in-pipeline-split no-account-for-loss-in-pipeline-split no-activation-func
no-activation-func-clamp-value no-activation-func-fp8-input-store no-activation-offload-fraction no-add-bias-linear
no-add-qkv-bias no-align-grad-reduce no-align-param-gather no-all no-apply-query-key-layer-scaling
no-apply-residual-connection-post-layernorm no-apply-rope-fusion no-async-ckpt-cpu-priority
no-async-ckpt-io-priority no-async-ckpt-use-cpu-shm no-async-save no-async-strategy
no-async-tensor-model-parallel-allreduce no-attention-backend no-attention-dropout no-attention-output-gate
no-attention-softmax-in-fp32 no-attn-skip no-auto-detect-ckpt-format no-autocast-dtype
no-barrier-with-level-1-timing no-batch-invariant-backend no-batch-invariant-mode no-batch-p2p-comm
no-batch-p2p-sync no-bf16 no-bias-activation-fusion no-bias-dropout-fusion no-bias-gelu-fusion
no-bias-swiglu-fusion no-calculate-per-token-loss no-chat-template no-check-for-nan-in-loss
no-check-for-nan-in-loss-and-grad no-check-for-spiky-loss no-check-weight-hash-across-dp-replicas-interval
no-choices no-ckpt-assume-constant-structure no-ckpt-convert-format no-ckpt-convert-save
no-ckpt-convert-update-legacy-dist-opt-format no-ckpt-format no-ckpt-fully-parallel-load
no-ckpt-fully-parallel-load-exchange-algo no-ckpt-fully-parallel-load-per-rank-objects
no-ckpt-fully-parallel-load-process-group no-ckpt-fully-parallel-save no-ckpt-fully-parallel-save-process-group
no-ckpt-load-validate-sharding-integrity no-ckpt-pg-tensors-cache-create no-ckpt-pg-tensors-cache-path no-ckpt-step
no-clone-scatter-output-in-embedding no-config-logger-dir no-context-parallel-size
no-contiguous-buffers-in-local-ddp no-cp-comm-type no-cpu-offloading no-cpu-offloading-activations
no-cpu-offloading-double-buffering no-cpu-offloading-num-layers no-cpu-offloading-retain-pinned-cpu-buffers
no-cpu-offloading-weights no-create-attention-mask-in-dataloader no-cross-entropy-fusion-impl
no-cross-entropy-loss-fusion no-cuda-graph-impl no-cuda-graph-modules no-cuda-graph-retain-backward-graph
no-cuda-graph-scope no-cuda-graph-use-single-mempool no-cuda-graph-warmup-steps no-data-parallel-random-init
no-data-sharding no-deallocate-pipeline-outputs no-decrease-batch-size-if-needed no-default no-default-dynamic-cp
no-defer-embedding-wgrad-compute no-delay-grad-reduce no-delay-offload-until-cuda-graph no-delay-wgrad-compute
no-delta-offload-bytes-across-pp-ranks no-dense-grouped-gemm no-deterministic-mode
no-disable-bf16-reduced-precision-matmul no-disable-jit-fuser no-disable-parameter-transpose-cache
no-disable-straggler-on-startup no-dist-ckpt-optim-fully-reshardable no-dist-ckpt-save-pre-mcore-014
no-dist-ckpt-strictness no-distrib-optim-fully-reshardable-mem-efficient no-distribute-saved-activations
no-distributed-backend no-distributed-timeout-minutes no-distributed-timeout-seconds-after-init no-dp-balanced
no-dsa-indexer-head-dim no-dsa-indexer-k-norm-epsilon no-dsa-indexer-k-norm-fp32 no-dsa-indexer-loss-coeff
no-dsa-indexer-n-heads no-dsa-indexer-rope-interleaved no-dsa-indexer-rotate-activation no-dsa-indexer-scoring-relu
no-dsa-indexer-skip-topk-offset no-dsa-indexer-topk no-dsa-indexer-topk-freq no-dsa-indexer-use-sparse-loss
no-dsa-kernel-backend no-dynamic-context-parallel no-embedding-init-method no-embedding-init-method-std
no-empty-unused-memory-level no-enable-autocast no-enable-cuda-graph no-enable-hyper-connections
no-enable-mhc-connections no-enabled no-end-weight-decay no-ep-overlap-early-attn-memory-release
no-error-injection-rate no-error-injection-type no-eval-global-batch-size no-eval-interval no-eval-iters
no-eval-micro-batch-size no-exit-duration-in-mins no-exit-interval no-exit-on-missing-checkpoint no-exit-signal
no-exit-signal-handler no-exit-signal-handler-for-dataloader no-exit-signal-handler-for-training
no-experimental-attention-variant no-experimental-attention-variant-loss-scale-func no-expert-gtp-weight-remat-size
no-expert-model-parallel-size no-expert-tensor-parallel-num-weight-shards no-expert-tensor-parallel-size
no-external-cuda-graph no-fallback-to-eager-attn no-fault-injector-delay-start-iteration
no-fault-injector-fault-delay no-fault-injector-fault-probabilities no-fault-injector-fault-types
no-fault-injector-mtti-seconds no-fault-injector-num-ranks no-fault-injector-offset-seconds no-fault-injector-ranks
no-fault-injector-seed no-ffn-hidden-size no-filter-warnings no-finalize-model-grads-func
no-fine-grained-activation-offloading no-fine-grained-offloading-max-inflight-offloads no-finetune
no-first-last-layers-bf16 no-flash-attention-version no-flash-decode no-flight-recorder-dump-on-timeout
no-flight-recorder-dump-path no-flight-recorder-extra-dump-on-exec no-flight-recorder-include-only-active
no-flight-recorder-include-stack-trace no-flight-recorder-trace-buffer-size no-fp16 no-fp32-residual-connection
no-fp4 no-fp4-param no-fp4-quantizer-factory no-fp4-recipe no-fp8 no-fp8-amax-compute-algo no-fp8-amax-history-len
no-fp8-dot-product-attention no-fp8-interval no-fp8-margin no-fp8-multi-head-attention no-fp8-output-proj
no-fp8-param no-fp8-quantizer-factory no-fp8-recipe no-fp8-wgrad no-full-validation no-fully-parallel-load
no-fully-parallel-save no-fused-residual-rmsnorm no-fused-single-qkv-rope no-gated-linear-unit
no-gdp-cutedsl-kernel no-gdp-num-chunk-states-to-recompute no-gdp-num-householder no-global-batch-size
no-glu-linear-offset no-gpu-sniff-test-interval no-grad-scale-func no-grad-sync-func
no-gradient-accumulation-fusion no-gradient-reduce-div-fusion no-gtp-remat-opt-in-modules no-gtp-weight-remat-size
no-hetereogenous-dist-checkpoint no-heterogeneous-block-specs no-hidden-dropout no-hidden-size
no-hierarchical-context-parallel-sizes no-high-priority-a2a-comm-stream no-high-priority-stream-groups no-https
no-hybrid-context-parallel no-inference-cuda-graph-scope no-inference-disable-ep-consensus
no-inference-disable-triton-nvls-kernels no-inference-dynamic-batching-prefix-caching
no-inference-fuse-tp-communication no-inference-grouped-gemm-backend no-inference-logging-step-interval
no-inference-moe-disable-fused-quant-kernels no-inference-moe-token-dispatcher-type no-inference-rng-tracker
no-inference-sampling-seed no-inference-text-gen-server-logging no-inference-use-synchronous-zmq-collectives
no-inference-wandb-logging no-init-method no-init-method-std no-init-model-with-meta-device no-initialization
no-is-hybrid-model no-iterations-to-skip no-kitchen-attention-backend no-kv-channels no-langrl-external-server
no-langrl-inference-server-conversation-template no-layernorm-epsilon no-layernorm-zero-centered-gamma
no-lazy-mpu-init no-linear-attention-freq no-linear-attention-type no-linear-conv-kernel-dim no-linear-key-head-dim
no-linear-num-key-heads no-linear-num-value-heads no-linear-value-head-dim no-load no-load-lr-state
no-load-main-params-from-ckpt no-load-optim no-load-rng no-local-rank no-log-device-memory-used no-log-energy
no-log-interval no-log-l2-norm-grad-to-tensorboard no-log-learnig-rate-to-tensorboard
no-log-loss-scale-to-tensorboard no-log-max-attention-logit no-log-memory-interval no-log-memory-to-tensorboard
no-log-moe-overload-factor no-log-num-zeros-in-grad no-log-params-norm no-log-progress
no-log-runtime-to-tensorboard no-log-straggler no-log-throughput no-log-throughput-to-tensorboard
no-log-timers-to-tensorboard no-log-validation-ppl-to-tensorboard no-log-world-size-to-tensorboard no-logging-level
no-lr-decay-iters no-lr-decay-samples no-lr-decay-steps no-lr-decay-style no-lr-warmup-fraction no-lr-warmup-init
no-lr-warmup-iters no-lr-warmup-samples no-lr-warmup-steps no-lr-wsd-decay-iters no-lr-wsd-decay-samples
no-lr-wsd-decay-style no-mamba-head-dim no-mamba-inference-ssm-states-dtype no-mamba-num-groups no-mamba-num-heads
no-mamba-state-dim no-mamba-training-ssm-states-dtype no-manual-gc no-manual-gc-eval no-manual-gc-interval
no-masked-softmax-fusion no-max no-max-seqlen-per-dp-cp-rank no-memory-efficient-layer-norm no-memory-keys
no-memory-snapshot-path no-merge-file no-metadata-path no-mhc-init-gating-factor no-mhc-num-residual-streams
no-mhc-recompute-layer-num no-mhc-sinkhorn-iterations no-micro-batch-size no-microbatch-group-size-per-vp-stage
no-min-dynamic-context-parallel-size no-min-offloaded-tensor-size no-minmax no-mlp-chunks-for-prefill
no-mlp-chunks-for-training no-mmap-bin-files no-modules-to-filter no-moe-apply-probs-on-input no-moe-aux-loss-coeff
no-moe-combine-bwd-dtype no-moe-deepep-num-sms no-moe-dispatch-fwd-dtype no-moe-enable-deepep
no-moe-enable-routing-replay no-moe-expert-capacity-factor no-moe-expert-rank-capacity-factor no-moe-extended-tp
no-moe-ffn-hidden-size no-moe-flex-dispatcher-backend no-moe-flex-dispatcher-num-sms no-moe-grad-scale-func
no-moe-grouped-gemm no-moe-hybridep-num-blocks-permute no-moe-hybridep-num-blocks-unpermute no-moe-hybridep-num-sms
no-moe-hybridep-num-sms-preprocessing no-moe-hybridep-pad-uneven-dispatch-inputs no-moe-input-jitter-eps
no-moe-latent-size no-moe-layer-freq no-moe-layer-recompute no-moe-mlp-glu-interleave-size
no-moe-ncclep-static-shape no-moe-ncclep-zero-copy no-moe-pad-expert-input-to-capacity
no-moe-pad-experts-for-cuda-graph-inference no-moe-paged-stash no-moe-paged-stash-buffer-size-factor-cpu
no-moe-paged-stash-buffer-size-factor-cuda no-moe-paged-stash-page-size no-moe-per-layer-logging
no-moe-permute-fusion no-moe-permute-fusion-into-hybridep no-moe-router-bias-update-rate no-moe-router-dtype
no-moe-router-enable-expert-bias no-moe-router-force-biased no-moe-router-force-load-balancing no-moe-router-fusion
no-moe-router-group-topk no-moe-router-load-balancing-type no-moe-router-num-groups no-moe-router-padding-for-fp8
no-moe-router-padding-for-quantization no-moe-router-pre-softmax no-moe-router-quantile-balancing-ema
no-moe-router-score-function no-moe-router-topk no-moe-router-topk-limited-devices
no-moe-router-topk-scaling-factor no-moe-routing-trace-capture-hidden-states no-moe-routing-trace-capture-logits
no-moe-routing-trace-dump-weights no-moe-routing-trace-max-training-iters no-moe-routing-trace-path
no-moe-shared-expert-gate no-moe-shared-expert-glu-interleave-size no-moe-shared-expert-intermediate-size
no-moe-shared-expert-overlap no-moe-single-grouped-bias no-moe-single-grouped-weight no-moe-token-dispatcher-type
no-moe-token-drop-policy no-moe-token-dropping no-moe-use-grouped-tensor no-moe-use-legacy-grouped-gemm
no-moe-z-loss-coeff no-most-recent-k no-mrope-section no-mtp-detach-heads no-mtp-grad-scale-func no-mtp-hsm
no-mtp-hybrid-override-pattern no-mtp-loss-scaling-factor no-mtp-num-layers no-mtp-standalone
no-mtp-use-repeated-layer no-multi-latent-attention no-multiple-validation-sets no-mup-attn-scale-power
no-mup-base-head-dim no-mup-base-hidden-size no-mup-embedding-mult no-mup-output-mult no-mup-width-mult
no-nccl-all-reduce-for-prefill no-nccl-communicator-config-path no-no-rope-freq no-no-sync-func
no-no-weight-decay-cond-type no-non-persistent-ckpt-type no-non-persistent-global-ckpt-dir
no-non-persistent-local-ckpt-algo no-non-persistent-local-ckpt-dir no-non-persistent-save-interval no-normalization
no-null-tokenizer-eod-id no-null-tokenizer-pad-id no-num-attention-heads no-num-layers no-num-layers-at-end-in-bf16
no-num-layers-at-start-in-bf16 no-num-layers-in-first-pipeline-stage no-num-layers-in-last-pipeline-stage
no-num-microbatches-with-partial-activation-checkpoints no-num-moe-experts no-num-query-groups
no-num-residual-streams no-nvtx-ranges no-offload-modules no-one-logger no-output-layer-init-method
no-overlap-dispatch-backward-with-experts-wgrad no-overlap-moe-expert-parallel-comm no-overlap-p2p-comm
no-overlap-p2p-comm-warmup-flush no-overlap-p2p-communication no-override-opt-param-scheduler no-pad-vocab-size
no-padded-vocab-size no-param-sync-func no-params-dtype no-perform-initialization no-persist-layer-norm
no-pin-cpu-grads no-pin-cpu-params no-pipeline-dtype no-pipeline-model-parallel-comm-backend
no-pipeline-model-parallel-layout no-pipeline-model-parallel-size no-pipeline-parallel no-position-embedding
no-pretrained-checkpoint no-profile-ranks no-profile-step-end no-profile-step-start
no-pytorch-profiler-collect-callstack no-pytorch-profiler-collect-chakra no-pytorch-profiler-collect-shapes
no-qk-clip no-qk-clip-alpha no-qk-clip-threshold no-qk-l2-norm no-qk-layernorm no-quant-recipe
no-query-key-layer-scaling no-rampup-batch-size no-recompute-granularity no-recompute-method no-recompute-modules
no-recompute-num-layers no-record-memory-history no-record-shapes no-record-throughput no-replication
no-replication-factor no-replication-jump no-rerun-mode no-rl-importance-sampling-truncation-coef
no-rl-inference-logprobs-is-correction no-rl-offload-inference-model-weights-when-idle
no-rl-offload-kv-cache-during-training no-rl-offload-optimizer-during-inference no-rl-parallel-generation-tasks
no-rl-partial-rollouts no-rl-persist-cuda-graphs no-rl-remove-kv-cache-during-training no-rl-reset-cuda-graphs
no-rl-skip-bos-token no-rl-training-cuda-graphs no-rl-use-sequence-packing no-rl-verify-model-weights-swap
no-rope-freq no-rope-fusion no-rotary-interleaved no-runtime-time-unit no-save no-save-activations-interval
no-save-config-filepath no-save-dgrads-interval no-save-interval no-save-optim no-save-params-interval
no-save-retain-interval no-save-rng no-save-tokenizer-assets no-save-tokens-per-expert-interval
no-save-wgrads-interval no-scaled-masked-softmax-fusion no-scatter-gather-tensors-in-pipeline no-seed
no-sequence-packing-scheduler no-sequence-parallel no-set-level-for-all-loggers no-sharp-enabled-group
no-skip-train no-softmax-scale no-softmax-type no-special-tokens no-start-eval-at-iter no-start-weight-decay
no-step-batch-size-schedule no-str no-straggler-ctrlr-port no-straggler-minmax-count no-stream-ckpt-dequant
no-strict-fsdp-dtensor-load no-symmetric-ar-type no-sync-func no-te-rng-tracker no-tensor-model-parallel-size
no-tensor-parallel-num-weight-shards no-tensorboard-dir no-tensorboard-log-interval no-tensorboard-queue-size
no-test-mode no-throughput-window-size no-tiktoken-num-special-tokens no-tiktoken-pattern no-timers
no-timing-log-level no-timing-log-option no-tokenizer-hf-no-include-special-tokens no-tokenizer-hf-no-use-fast
no-tokenizer-model no-tokenizer-sentencepiece-ignore-extra-whitespaces no-tokenizer-sentencepiece-legacy
no-tokenizer-type no-tp-comm-atomic-ag no-tp-comm-atomic-rs no-tp-comm-bootstrap-backend no-tp-comm-bulk-dgrad
no-tp-comm-bulk-wgrad no-tp-comm-overlap no-tp-comm-overlap-ag no-tp-comm-overlap-disable-fc1
no-tp-comm-overlap-disable-qkv no-tp-comm-overlap-rs no-tp-comm-overlap-rs-dgrad no-tp-comm-split-ag
no-tp-comm-split-rs no-tp-only-amax-red no-train-iters no-train-samples no-train-sync-interval no-transformer-impl
no-trust-remote-code no-use-checkpoint-args no-use-checkpoint-opt-param-scheduler no-use-cpu-initialization
no-use-fused-mhc no-use-fused-weighted-squared-relu no-use-gigatoken no-use-gloo-process-groups
no-use-grouped-gemm-for-dense-mlp no-use-grouped-gemm-for-shared-expert no-use-inference-optimized-layers
no-use-kitchen no-use-kitchen-attention no-use-layer-wise-param-layout no-use-mamba-mem-eff-path
no-use-megatron-fsdp no-use-mp-args-from-checkpoint-args no-use-mup no-use-nsys-profiler
no-use-persistent-ckpt-worker no-use-pytorch-profiler no-use-ring-exchange-p2p no-use-sharp
no-use-te-activation-func no-use-te-rng-tracker no-use-tokenizer-model-from-checkpoint-args no-use-torch-fsdp2
no-use-tp-pp-dp-mapping no-use-transformer-engine-op-fuser no-validation-set-names no-variable-seq-lengths
no-verify-integrity no-virtual-pipeline-model-parallel-size no-vocab-extra-ids no-vocab-file no-vocab-size
no-wandb-entity no-wandb-exp-name no-wandb-project no-wandb-save-dir no-wd-incr-steps no-weight-decay-cond-type
no-weight-decay-incr-style no-wgrad-deferral-limit no-window-attn-skip-freq no-window-size no-wsd-decay-steps
no-yarn-correction-range-round-to-int non-persistent-ckpt-type non-persistent-global-ckpt-dir
non-persistent-local-ckpt-algo non-persistent-local-ckpt-dir non-persistent-save-interval norm-epsilon
normalization normalize-router-logits null-tokenizer-eod-id null-tokenizer-pad-id num-attention-heads
num-attention-heads-teacher num-channels num-classes num-dataset-builder-threads
num-distributed-optimizer-instances num-experts num-experts-switch num-experts-teacher num-key-value-heads
num-layers num-layers-at-end-in-bf16 num-layers-at-start-in-bf16 num-layers-in-first-pipeline-stage
num-layers-in-last-pipeline-stage num-layers-per-virtual-pipeline-stage num-layers-teacher
num-microbatches-with-partial-activation-checkpoints num-moe-experts num-query-groups num-residual-streams
num-samples num-speculative-tokens num-tokens-from-file num-tokens-to-generate num-tokens-to-prompt
num-unique-layers num-virtual-stages-per-pipeline-rank num-workers nvtx-ranges object-storage-cache-path
offload-modules offload-optimizer-states on_group_commit_backward on_group_commit_forward one-logger-async
one-logger-entity one-logger-project one-logger-run-name onnx-safe openai-gelu optimizer optimizer-cpu-offload
optimizer-cuda-graph optimizer-offload-fraction original-model-sample-prob otel-enabled otel-service-name
otel-span-groups out-seq-length outer-dp-sharding-strategy output output-bert-embeddings output-every-n-results
output-layer-init-method output-logit-dtype output-path output-request-events output_dir
overlap-cpu-optimizer-d2h-h2d overlap-dispatch-backward-with-experts-wgrad overlap-grad-reduce
overlap-moe-expert-parallel-comm overlap-p2p-comm overlap-p2p-comm-warmup-flush overlap-p2p-communication
overlap-p2p-communication-warmup-flush overlap-param-gather overlap-param-gather-with-optimizer-step
overlapping-eval override-ckpt-iteration override-lr-scheduler override-opt-param-scheduler
override-opt_param-scheduler override-selected-budget pad-vocab-size padded-vocab-size param-budget-target
param-sharing-style param-sync-func params-dtype partition-activations patch-dim per-dataset-sequences-path
per-split-data-args-path perform-initialization perform-rl-step persist-layer-norm persistent-save-interval
phase-transition-iterations pipeline-dtype pipeline-model-parallel-comm-backend pipeline-model-parallel-layout
pipeline-model-parallel-size pipeline-model-parallel-split-rank port position-embedding-type prefill-chunk-size
presplit-sentences pretrained-bert pretrained-checkpoint profile profile-backward profile-ranks profile-step-end
profile-step-start profile_steps prompt-file prompt-file-num-truncate prompts pytorch-profiler-collect-callstack
pytorch-profiler-collect-chakra pytorch-profiler-collect-shapes q-lora-rank qad-train-target qk-clip qk-clip-alpha
qk-clip-threshold qk-head-dim qk-l2-norm qk-layernorm qk-pos-emb-head-dim quant-recipe query-in-block-prob
quick-geglu rampup-batch-size random-ltd recompute recompute-activations recompute-granularity recompute-method
recompute-modules recompute-num-layers record-memory-history record-shapes refit-method
relative-attention-max-distance relative-attention-num-buckets remote-device renormalize-blend-weights
repeated-dataloader replication replication-factor replication-jump report-topk-accuracies rerun-mode
reset-attention-mask reset-iteration reset-position-ids result-rejected-tracker-filename resume-dataloader
retriever-report-topk-accuracies retriever-score-scaling retriever-seq-length retro-add-retriever
retro-attention-gate retro-cyclic-train-iters retro-encoder-attention-dropout retro-encoder-hidden-dropout
retro-encoder-layers retro-index-ty retro-no-verify-neighbor-count retro-num-neighbors retro-num-retrieved-chunks
retro-project-dir retro-return-doc-ids retro-workdir return-data-index return-log-probs
reuse-grad-buf-for-mxfp8-param-ag rl-calculate-intra-group-similarity rl-consumption-granularity
rl-default-temperature rl-default-top-k rl-default-top-p rl-durable-rollout-bank rl-generation-batch-size
rl-generation-lag rl-importance-sampling-truncation-coef rl-inference-expert-model-parallel-size
rl-inference-expert-tensor-model-parallel-size rl-inference-logprobs-is-correction
rl-inference-model-unified-memory-level rl-inference-parsers rl-inference-pipeline-model-parallel-size
rl-inference-tensor-model-parallel-size rl-kv-cache-management-mode rl-max-inflight-requests
rl-num-parallel-generation-batches rl-num-parallel-generations rl-offload-inference-model-weights-when-idle
rl-offload-kv-cache-during-training rl-offload-optimizer-during-inference rl-parallel-generation-tasks
rl-partial-rollouts rl-persist-cuda-graphs rl-profile rl-profile-dir rl-prompts-per-eval
rl-remove-kv-cache-during-training rl-reset-cuda-graphs rl-rollout-bank-dir rl-rollout-bank-max-bytes
rl-sequence-packing-algo rl-sequence-packing-bin-size rl-sequence-packing-max-sequences-per-bin rl-skip-bos-token
rl-submission-granularity rl-training-cuda-graphs rl-use-sequence-packing rl-verify-model-weights-swap
rope-scaling-factor rope-type rotary-base rotary-interleaved rotary-percent rotary-position-embeddings-theta
rotary-scaling-factor rotary-seq-len-interpolation-factor router-beta router-gbs router-inter-dim router-std
run-workload-inspector-server runtime-time-unit s3-cache-path sample-input-file sample-output-file sample-rate save
save-activations-interval save-all-rng save-config-filepath save-dgrads-interval save-interval save-iters
save-optim save-params-interval save-retain-interval save-rng save-tokenizer-assets save-tokens-per-expert-interval
save-wgrads-interval scaled-upper-triang-masked-softmax-fusion scattered-embeddings seed seq-length
sequence-packing-scheduler sequence-parallel set-level-for-all-loggers sft sft-mock-dataset-config-json
sft-tokenizer-prompt-format sgd-momentum sharp-enabled-group short short-seq-prob shuffle skip-allreduce
skip-alltoall skip-gemm skip-num-attn-layer-constraint skip-prompt-log-probs skip-reducescatter skip-sendrecv
skip-total-layer-constraint skip-train slice soft-mask softmax-scale softmax-type spec special-tokens split
split-transformers squared-relu standalone-embedding-stage start-eval-at-iter start-weight-decay
step-batch-size-schedule stop-words str straggler-ctrlr-port straggler-minmax-count stream-ckpt-dequant
strict-fsdp-dtensor-load strict-lambada suggested-communication-unit-size suspend-resume-interval suspend-timeout
swiglu swin-backbone-type symmetric-ar-type synchronize-each-layer tau-decay tau-init te-precision-config-file
te-rng-tracker teacher-model-config temperature tensor-model-parallel-size tensor-parallel-num-weight-shards
tensorboard-dir tensorboard-log-interval tensorboard-queue-size termination-id test-data test-data-path test-mode
test_percent text-key throughput-check-only throughput-window-size tiktoken-num-special-tokens tiktoken-pattern
tiktoken-special-tokens tile-factor timers timing-log-level timing-log-option titles-data-path
tokenizer-hf-include-special-tokens tokenizer-hf-no-include-special-tokens tokenizer-hf-no-use-fast
tokenizer-hf-use-fast tokenizer-metadata tokenizer-model tokenizer-model-type tokenizer-path
tokenizer-sentencepiece-ignore-extra-whitespaces tokenizer-sentencepiece-legacy tokenizer-special-tokens
tokenizer-type top top-n-logprobs top_k top_p topk torch-fsdp2-no-reshard-after-forward tp-comm-atomic-ag
tp-comm-atomic-rs tp-comm-bootstrap-backend tp-comm-bulk-dgrad tp-comm-bulk-wgrad tp-comm-overlap
tp-comm-overlap-ag tp-comm-overlap-cfg tp-comm-overlap-disable-fc1 tp-comm-overlap-disable-qkv tp-comm-overlap-rs
tp-comm-overlap-rs-dgrad tp-comm-split-ag tp-comm-split-rs tp-only-amax-red tp-size train-data
train-data-exact-num-epochs train-data-path train-desc-path train-doc-idx-path train-idx-path train-iters
train-sample-idx-path train-samples train-shuffle-idx-path train-sync-interval train-tokens transformer-impl
trust-remote-code universal-checkpoint untie-embeddings-and-output-weights use-checkpoint-args
use-checkpoint-lr-scheduler use-checkpoint-opt-param-scheduler use-checkpoint-opt_param-scheduler
use-contiguous-buffers-in-ddp use-cpu-initialization use-custom-fsdp use-dataset-only use-dist-ckpt
use-distributed-optimizer use-flash-attn use-flash-attn-builder use-flash-attn-triton use-flash-attn-v1
use-flash-attn-v2 use-flashinfer-fused-rope use-fused-mhc use-fused-weighted-squared-relu use-gigatoken
use-gloo-process-groups use-grouped-gemm-for-dense-mlp use-grouped-gemm-for-shared-expert
use-inference-optimized-layers use-kitchen use-kitchen-attention use-legacy-models use-legacy-static-engine
use-mamba-mem-eff-path use-mcore-models use-megatron-fsdp use-mp-args-from-checkpoint-args use-mup use-nccl-ub
use-npy-data-loader use-nsys-profiler use-one-sent-docs use-packed-sequence use-persistent-ckpt-worker
use-pin-memory use-precision-aware-optimizer use-pytorch-profiler use-ring-exchange-p2p use-rope-scaling
use-rotary-position-embeddings use-same-sampling-seed-across-dp-ranks use-sharp use-te-activation-func
use-te-rng-tracker use-tfrecords use-tokenizer-model-from-checkpoint-args use-torch-fsdp2
use-torch-optimizer-for-cpu-offload use-tp-pp-dp-mapping use-transformer-engine-op-fuser use-tutel use_fast_math
v-head-dim val-data-path valid-data valid-data-path validation-set-names variable-seq-lengths verify-integrity
virtual-pipeline-model-parallel-size vision-backbone-type vision-pretraining vision-pretraining-type
vocab-extra-ids vocab-file vocab-size wandb-entity wandb-exp-name wandb-project wandb-save-dir warmup wd-incr-steps
weight-decay weight-decay-incr-style wgrad-deferral-limit window-attn-skip-freq window-size wsd-decay-steps
yaml-cfg yarn-beta-fast yarn-beta-slow yarn-correction-range-round-to-int yarn-original-max-position-embeddings
your-arg-name1 your-arg-name2 zero-allgather-bucket-size zero-contigious-gradients zero-reduce-bucket-size
zero-reduce-scatter zero-stage
""".split() + """
abort-on-unmet-fused-kernel-constraints codecarbon-dir embed-layernorm eval-only glu-activation kill-switch-path
log-level log-level-replica log-path loss-on-targets-only mean-noise-span-length noise-density pad-vocab-size-to
pp-partition-method reweight-loss-based-on-position-frequency skip-train-iteration-range
sync-tp-duplicated-parameters test-weighted-split-paths test-weighted-split-paths-path tokenizer-name-or-path
train-weighted-split-paths train-weighted-split-paths-path use-bnb-optimizer valid-num-workers
valid-weighted-split-paths valid-weighted-split-paths-path
bitfit eval-first force-sync-layer-norm-parameters mean_noise_span_length new-dataset no-layer-norm-fusion
no-optimizer-fusion no-shuffle noise_density norm-target-loss periodic-eval-data-path prefixlm relu reset-progress
stagger_checkpoint_save_load_group_size tensorboard-debug-dir
""".split() + """
attention-head-type distributed-timeout fragment-fim-rate rotary-theta sanity-check-dataloader-interval structured-logs
structured-logs-dir tokenizer-file transformer-timers wandb-entity-name wandb-project-name
""".split())
