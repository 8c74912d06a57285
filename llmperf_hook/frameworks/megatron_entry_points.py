"""Megatron's own entry points: the scripts of Megatron-LM and Megatron-DeepSpeed that parse their command line with
Megatron's `parse_args` (through `pretrain(...)` or `initialize_megatron(...)`) and build the framework's model.

One answer for every rule that depends on it: the unknown-flag refusal (argparse stops such a script at start-up on an
option neither Megatron nor the script's `extra_args_provider` defines) and Megatron-DeepSpeed's unfused-attention
default (its model code is the framework's ParallelAttention). A user's own script that only takes Megatron-style
flags is none of these: it may add options of its own and builds its own layers.

The entry points, read in the public sources (NVIDIA/Megatron-LM d98e8a6, deepspeedai/Megatron-DeepSpeed 4efb479 and
microsoft/Megatron-DeepSpeed, bigscience-workshop/Megatron-DeepSpeed 8387ae1), every one calling `pretrain(` or
`initialize_megatron(` under `if __name__ == "__main__"`:
- top-level `pretrain_*.py` (gpt, gpt_core, bert, t5, ict, retro, prefix_lm, vit, vision_*, hybrid, vlm, mamba) and
  examples/bert/pretrain_bert.py, examples/t5/pretrain_t5.py, examples/mimo/pretrain_mimo.py;
- `finetune*.py`: finetune_llama.py (Megatron-DeepSpeed), finetune_t0_non_causal_decoder.py (bigscience),
  examples/detxoify_lm/finetune_gpt.py and examples/post_training/modelopt/finetune.py (each with extra options);
- train_rl.py (Megatron-LM);
- tasks/main.py, tasks/vision/main.py, tasks/msdp/main.py (`initialize_megatron(extra_args_provider=get_tasks_args)`);
- `python -m megatron...` modules;
- epfLLM/Megatron-LLM's finetune.py (806a833; underscore option names, see MEGATRON_LLM_OPTIONS);
- alibaba/Pai-Megatron-Patch's examples/*/pretrain_*.py (a098ca5): Megatron-LM's `pretrain(...,
  extra_args_provider=get_patch_args)`, its options those of megatron_patch/arguments.py. They are known by
  `--patch-tokenizer-type`, which only that provider defines and every Pai-Megatron-Patch launch script passes.
The tools/ scripts that call initialize_megatron (text generation servers, checkpoint converters, preprocessing)
do not train and are not entry points of a training job.
"""

from __future__ import annotations

import os
import re
from typing import Sequence

_SCRIPT_NAME = re.compile(r"(pretrain_\w+|finetune\w*|train_rl)\.py")
_TASKS_SCRIPTS = ("tasks/main.py", "tasks/vision/main.py", "tasks/msdp/main.py")

_EXTRA_OPTIONS: dict[str, frozenset[str]] = {
    "finetune_gpt.py": frozenset({"data-path2", "eval-ppl", "stored_params"}),
    "finetune.py": frozenset({"offline-distillation-data"}),
    "tasks/main.py": frozenset({"task", "keep-last", "faiss-match", "faiss-topk-retrievals", "qa-data-dev",
                                "qa-data-test", "train-hard-neg", "train-with-neg", "val-av-rank-hard-neg",
                                "val-av-rank-other-neg"}),
    "tasks/vision/main.py": frozenset({"task", "keep-last", "pretrained-checkpoint-type", "seg-stride"}),
    "tasks/msdp/main.py": frozenset({"task", "answer-file", "api-prompt", "guess-file", "megatron-api-url",
                                     "num-prompt-examples", "prompt-type"}),
}
"""Options an entry point's extra_args_provider adds that megatron_known_flags (megatron/**.py and the top-level
scripts) lacks: every `'--name'` literal of examples/detxoify_lm/finetune_gpt.py add_validation_args (Megatron-DeepSpeed
4efb479), examples/post_training/modelopt/finetune.py add_finetune_args (Megatron-LM d98e8a6) and tasks/*main.py
get_tasks_args (union over the three Megatron-DeepSpeed forks), less the names the table already holds."""


PAI_PATCH_OPTIONS = frozenset("""
adaptive-seq-len allow-missing-vision-projection-checkpoint attention-head-type
convert-checkpoint-from-megatron-to-transformers cvcuda-image-processing data-dir dataloader-save dataset dataset-config
disable-bias-attn-fc disable-bias-linear-fc disable-parallel-output enable-shared-expert eval-dev eval-fp32
extra-vocab-size freeze-clip-vision-tower freeze-llm generation-length image-aspect-ratio image-folder image-size
image-tag-type input-len keep-last language-model-type max-num-tiles max-padding-length mm-projector-type
mm-use-im-patch-token mm-use-im-start-end mm-vision-select-layer moe moe-input-feature-slicing moe-topk n-head-kv
num-fewshot num-frames num-shared-experts online-evaluation-config optimizer-offload-auto-threshold
optimizer-offload-chunk-size optimizer-offload-policy patch-size patch-tokenizer-type position-encoding-2d prompt-path
qk-nope-head-dim qk-rope-head-dim repetition-penalty repetition_penalty rotary-scale-factor router-type
shared-moe-ffn-hidden-size sliding-window source-seq-len spatial-merge-size target-seq-len task-list
temporal-patch-size text-generate-gt-file text-generate-input-file text-generate-output-file time
tokenizer-prompt-format top-k top-p train-mode transformer-timers transformer-type tune-mm-mlp-adapter use-alibi-mask
use-llama2-rotary-position-embeddings use-mistral-rotary-position-embeddings use-normhead use-te use-thumbnail
use-tiling verbosity version vision-model-type vision-tower z-loss-weight
""".split())
"""Every `'--name'` literal of Pai-Megatron-Patch a098ca5 megatron_patch/arguments.py (get_patch_args) that
megatron_known_flags lacks."""
PAI_PATCH_MARK = "--patch-tokenizer-type"
MEGATRON_LLM_OPTIONS = frozenset("""
DDP_impl accumulate_allreduce_grads_in_fp32 adam_beta1 adam_beta2 adam_eps adlr_autoresume adlr_autoresume_interval
apply_residual_connection_post_layernorm attention_dropout attention_softmax_in_fp32 barrier_with_L1_time bert_load
biencoder_projection_dim biencoder_shared_query_context_model block_data_path classes_fraction clip_grad data_impl
data_parallel_random_init data_path data_per_class_fraction data_type dataloader_type decoder_num_layers
decoder_seq_length dino_bottleneck_size dino_freeze_last_layer dino_head_hidden_size dino_local_crops_number
dino_local_img_size dino_norm_last_layer dino_teacher_temp dino_warmup_teacher_temp dino_warmup_teacher_temp_epochs
distribute_saved_activations distributed_backend embedding_path empty_unused_memory_level encoder_num_layers
encoder_seq_length end_weight_decay eod_mask_loss eval_interval eval_iters eval_only evidence_data_path
exit_duration_in_mins exit_interval exit_signal_handler ffn_hidden_size fp16_lm_cross_entropy
fp32_residual_connection fp8_amax_compute_algo fp8_amax_history_len fp8_e4m3 fp8_hybrid fp8_interval fp8_margin
global_batch_size glu_activation head_lr_mult hidden_dropout hidden_size ict_head_size ict_load img_h img_w
indexer_batch_size indexer_log_interval inference_batch_times_seqlen_threshold init_method_std
init_method_xavier_uniform initial_loss_scale iter_per_epoch kv_channels layernorm_epsilon lima_dropout load_iters
log_batch_size_to_tensorboard log_interval log_learning_rate_to_tensorboard log_loss_scale_to_tensorboard
log_memory_to_tensorboard log_num_zeros_in_grad log_params_norm log_timers_to_tensorboard
log_validation_ppl_to_tensorboard log_world_size_to_tensorboard loss_scale loss_scale_window lr_decay_iters
lr_decay_samples lr_decay_style lr_warmup_fraction lr_warmup_iters lr_warmup_samples make_vocab_size_divisible_by
mask_prob max_position_embeddings max_tokens_to_oom merge_file metrics micro_batch_size min_loss_scale min_lr
mmap_warmup model_name model_type no_async_tensor_model_parallel_allreduce no_bias_dropout_fusion
no_bias_gelu_fusion no_contiguous_buffers_in_local_ddp no_data_sharding no_fp8_wgrad no_gradient_accumulation_fusion
no_initialization no_load_optim no_load_rng no_masked_softmax_fusion no_new_tokens no_persist_layer_norm
no_query_key_layer_scaling no_save_optim no_save_rng no_scatter_gather_tensors_in_pipeline no_tie_embed_logits
num_attention_heads num_attention_heads_kv num_channels num_classes num_layers num_layers_per_virtual_pipeline_stage
num_workers onnx_safe override_opt_param_scheduler parallel_attn parallel_layernorm patch_dim
pipeline_model_parallel_size pipeline_model_parallel_split_rank position_embedding_type query_in_block_prob
rampup_batch_size recompute_activations recompute_granularity recompute_method recompute_num_layers
reset_attention_mask reset_position_ids retriever_report_topk_accuracies retriever_score_scaling
retriever_seq_length rope_scaling_factor rope_theta sample_rate save_interval scalar_loss_mask seq_length
sequence_parallel sgd_momentum short_seq_prob skip_iters sliding_window_size standalone_embedding_stage
start_weight_decay tensor_model_parallel_size tensorboard_dir tensorboard_log_interval tensorboard_queue_size
test_data_path timing_log_level timing_log_option titles_data_path tokenizer_model tokenizer_type train_data_path
train_iters train_samples transformer_impl use_bias use_checkpoint_args use_checkpoint_opt_param_scheduler
use_cpu_initialization use_distributed_optimizer use_flash_attn use_one_sent_docs use_post_ln use_ring_exchange_p2p
use_rms_norm valid_data_path variable_seq_lengths vocab_extra_ids vocab_extra_ids_list vocab_file wandb_api_key
wandb_entity wandb_id wandb_logger wandb_name wandb_project wandb_resume weight_decay weight_decay_incr_style
""".split())
"""epfLLM/Megatron-LLM (806a833): every `'--name'` literal of megatron/arguments.py and finetune.py that
megatron_known_flags lacks. Its parser spells Megatron's options with underscores (--tensor_model_parallel_size,
--micro_batch_size) and adds its model switches (--use_rms_norm, --glu_activation, --no_tie_embed_logits,
--num_attention_heads_kv); finetune.py's extra_args_provider adds --model_name (gpt, llama, llama2, codellama,
falcon, mistral), by which such a job is known."""


BIGSCIENCE_OPTIONS = frozenset("""
DDP-impl abort-on-unmet-fused-kernel-constraints accumulate-allreduce-grads-in-fp32 adam-beta1 adam-beta2 adam-eps
adlr-autoresume adlr-autoresume-interval aml-data-download-path apply-query-key-layer-scaling
apply-residual-connection-post-layernorm attention-dropout attention-softmax-in-fp32 batch-size bert-load
bert-no-binary-head bf16 bias-dropout-fusion bias-gelu-fusion biencoder-projection-dim
biencoder-shared-query-context-model bitfit block-data-path checkpoint-activations checkpoint-in-cpu
checkpoint-num-layers clip-grad codecarbon-dir contigious-checkpointing cpu-optimizer cpu_torch_adam data-impl
data-path dataloader-type decoder-seq-length deepscale deepscale_config deepspeed deepspeed-activation-checkpointing
deepspeed_config deepspeed_mpi dist_backend dist_url distribute-checkpointed-activations distributed-backend
embed-layernorm embedding-path encoder-seq-length eod-mask-loss eval-first eval-interval eval-iters eval-only
evidence-data-path exit-duration-in-mins exit-interval faiss-use-gpu ffn-hidden-size finetune
force-sync-layer-norm-parameters fp16 fp16-lm-cross-entropy fp32-allreduce fp32-residual-connection from-weights
global-batch-size glu-activation hidden-dropout hidden-size hysteresis ict-head-size ict-load img-dim
indexer-batch-size indexer-log-interval inference init-method-std init-method-xavier-uniform initial-loss-scale
input-length kill-switch-path kv-channels layernorm-epsilon layernorm-tp-auto-sync lazy-mpu-init load local_rank
log-batch-size-to-tensorboard log-interval log-level log-level-replica log-num-zeros-in-grad log-params-norm log-path
log-timers-to-tensorboard log-validation-ppl-to-tensorboard loss-on-targets-only loss-scale loss-scale-window lr
lr-decay-iters lr-decay-samples lr-decay-style lr-decay-tokens lr-warmup-fraction lr-warmup-iters lr-warmup-samples
lr-warmup-style make-vocab-size-divisible-by mask-prob max-position-embeddings mean-noise-span-length
mean_noise_span_length memory-centric-tiled-linear merge-file micro-batch-size min-loss-scale min-lr min-scale
mmap-warmup model-parallel-size new-dataset no-add-mask-tokens no-bias-dropout-fusion no-bias-gelu-fusion
no-layer-norm-fusion no-load-optim no-load-rng no-log-learnig-rate-to-tensorboard no-log-loss-scale-to-tensorboard
no-masked-softmax-fusion no-optimizer-fusion no-query-key-layer-scaling no-save-optim no-save-rng
no-scaled-masked-softmax-fusion no-scatter-gather-tensors-in-pipeline no-shuffle noise-density noise_density
norm-target-loss num-attention-heads num-channels num-classes num-layers num-layers-per-virtual-pipeline-stage
num-unique-layers num-workers onnx-safe openai-gelu optimizer override-lr-scheduler pack-samples pad-vocab-size-to
param-sharing-style partition-activations patch-dim periodic-eval-data-path pipeline-model-parallel-size
position-embedding-type pp-partition-method prefixlm profile-backward query-in-block-prob rampup-batch-size rank relu
remote-device report-topk-accuracies reset-attention-mask reset-position-ids reset-progress
retriever-report-topk-accuracies retriever-score-scaling retriever-seq-length reweight-loss-based-on-position-frequency
sample-rate save save-interval scaled-upper-triang-masked-softmax-fusion scattered-embeddings seed seq-length
sgd-momentum short-seq-prob shuffle skip-train-iteration-range split split-transformers
stagger_checkpoint_save_load_group_size student-ffn-hidden-size student-hidden-size student-load
student-num-attention-heads student-num-layers student-pipeline-model-parallel-size student-tensor-model-parallel-size
sync-tp-duplicated-parameters synchronize-each-layer teacher-load tensor-model-parallel-size tensorboard-debug-dir
tensorboard-dir tensorboard-log-interval tensorboard-queue-size test-weighted-split-paths
test-weighted-split-paths-path tile-factor titles-data-path tokenizer-name-or-path tokenizer-type train-iters
train-samples train-tokens train-weighted-split-paths train-weighted-split-paths-path ul2-denoiser-ratios ul2-denoisers
ul2-like-ul2r ul2-mask-ratios ul2-mean-span-lengths ul2-model-type ul2-pack-any ul2-pack-no-repeat-prompt
ul2-r-denoiser-token ul2-s-denoiser-token ul2-scale-normal-std ul2-x-denoiser-token universal-checkpoint
use-bnb-optimizer use-checkpoint-lr-scheduler use-contiguous-buffers-in-ddp use-cpu-initialization use-flash-attn
use-one-sent-docs use-pin-memory valid-data valid-data-path valid-num-workers valid-weighted-split-paths
valid-weighted-split-paths-path vocab-extra-ids vocab-file warmup weight-decay world_size zero-allgather-bucket-size
zero-contigious-gradients zero-reduce-bucket-size zero-reduce-scatter zero-stage
""".split())
"""Every `--name` literal of megatron/arguments.py on any of bigscience-workshop/Megatron-DeepSpeed's 383 refs
(fetched mirror, main at 8387ae1: 68 branches and 9 tags, whose T0 / MTF branches add --norm-target-loss, and 306
pull-request heads, which alone add --ul2-*, --student-*, --use-flash-attn: counted too, so no option of any
version of the fork is refused), and DeepSpeed's deepspeed.add_config_arguments that its parse_args adds: the
options any version of the fork takes.
None of them has --sequence-parallel, --recompute-granularity / -method / -num-layers / -activations,
--use-distributed-optimizer, --no-pipeline-parallel or --vocab-size."""
BIGSCIENCE_MARKS = ("--pp-partition-method", "--embed-layernorm", "--pad-vocab-size-to", "--tokenizer-name-or-path",
                    "--sync-tp-duplicated-parameters", "--abort-on-unmet-fused-kernel-constraints", "--codecarbon-dir",
                    "--kill-switch-path", "--train-weighted-split-paths", "--train-weighted-split-paths-path",
                    "--reweight-loss-based-on-position-frequency", "--loss-on-targets-only", "--use-bnb-optimizer")
"""Options only the bigscience fork defines (megatron_known_flags' second list), which its BLOOM scripts pass
(train/tr11-176B-ml: --pad-vocab-size-to, --embed-layernorm, --tokenizer-name-or-path, --kill-switch-path, ...): a
Megatron entry point given one is that fork's (bigscience_job). None is an option on any branch or tag of
NVIDIA/Megatron-LM, microsoft/ or deepspeedai/Megatron-DeepSpeed (`git log --all -S` and `git grep` over their
mirrors): --tokenizer-name-or-path, --kill-switch-path and --train-weighted-split-paths appear there only in unmerged
pull requests (microsoft's merged option is --kill-switch-file), so no job of those parsers is taken for the fork."""


def pai_patch_job(script: str, script_args: Sequence[str]) -> bool:
    """A Pai-Megatron-Patch entry point: a Megatron entry-point name given `--patch-tokenizer-type`."""
    return bool(_entry_key(script)) and _given(script_args, PAI_PATCH_MARK)


def _given(script_args: Sequence[str], flag: str) -> bool:
    """`flag` is among `script_args`, alone (`--flag V`) or with its value attached (`--flag=V`)."""
    return any(w == flag or w.startswith(flag + "=") for w in script_args)


def _entry_key(script: str) -> str:
    """The entry point a script path names: a tasks main.py keeps its folder (`tasks/vision/main.py`), any other its
    file name; "" when it is none of Megatron's."""
    path = script.replace("\\", "/")
    for tasks in _TASKS_SCRIPTS:
        if path == tasks or path.endswith("/" + tasks):
            return tasks
    name = os.path.basename(path)
    return name if _SCRIPT_NAME.fullmatch(name) else ""


def megatron_entry_point(script: str) -> bool:
    """A Megatron(-LM / -DeepSpeed) entry point of the repositories themselves (see the module docstring), whose
    arguments are Megatron's parser's and whose model code is the framework's; not a user's script taking its flags."""
    return script.startswith("-m megatron") or bool(_entry_key(script))


def tasks_entry_point(script: str) -> str:
    """`tasks/main.py` (or tasks/vision/main.py, tasks/msdp/main.py) when the script is one of those, else ""."""
    key = _entry_key(script)
    return key if key in _TASKS_SCRIPTS else ""


def megatron_llm_job(script: str, script_args: Sequence[str]) -> bool:
    """epfLLM/Megatron-LLM's finetune.py, known by its --model_name option."""
    return _entry_key(script) == "finetune.py" and _given(script_args, "--model_name")


def bigscience_job(script: str, script_args: Sequence[str]) -> bool:
    """BLOOM's fork (bigscience-workshop/Megatron-DeepSpeed): a Megatron entry point given one of BIGSCIENCE_MARKS."""
    return megatron_entry_point(script) and any(w.split("=", 1)[0] in BIGSCIENCE_MARKS for w in script_args)


def fork_parser_options(script: str, script_args: Sequence[str]) -> tuple[str, frozenset[str]] | None:
    """(the fork, every option its parser defines) for a fork whose parser is known in full and lacks options of
    Megatron-LM's: BLOOM's fork (its megatron/arguments.py with DeepSpeed's config arguments, and the entry point's
    own extra_args_provider options); None elsewhere, where Megatron-LM's options of every release count."""
    if bigscience_job(script, script_args):
        return "bigscience-workshop/Megatron-DeepSpeed", BIGSCIENCE_OPTIONS | _EXTRA_OPTIONS.get(_entry_key(script),
                                                                                                  frozenset())
    return None


def entry_point_options(script: str, script_args: Sequence[str] = ()) -> frozenset[str]:
    """Option names (without `--`) the entry point defines beyond Megatron's own parser."""
    own = _EXTRA_OPTIONS.get(_entry_key(script), frozenset())
    if megatron_llm_job(script, script_args):
        return MEGATRON_LLM_OPTIONS
    return own | PAI_PATCH_OPTIONS if pai_patch_job(script, script_args) else own
