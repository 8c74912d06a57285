"""GPU optimizer bytes by optimizer and dtype (schedule/optimizer_state.py): Megatron-LM's precision-aware optimizer
(--use-precision-aware-optimizer with --main-params-dtype, --exp-avg-dtype, --exp-avg-sq-dtype, --main-grads-dtype):
Transformer Engine's FusedAdam state by dtype and the fp32 copies its step makes (before, every dtype was priced as
fp32, 12 B, with a warning); the fp32 copies of 16-bit main gradients Megatron's step makes."""

from __future__ import annotations

import pytest

from llmperf_hook.api import build_graph, predict_command
from llmperf_hook.errors import ConfigError
from llmperf_hook.schedule.memory import stage_memory

GPN = 8
SHAPE = ["--num-layers", "8", "--hidden-size", "2048", "--num-attention-heads", "16", "--seq-length", "2048",
         "--max-position-embeddings", "2048", "--micro-batch-size", "1", "--global-batch-size", "64",
         "--vocab-size", "32000", "--bf16", "--use-distributed-optimizer"]
AWARE = ["--use-precision-aware-optimizer"]


def _megatron(*flags: str):
    return predict_command(["torchrun", "--nproc-per-node", str(GPN), "pretrain_gpt.py", *SHAPE, *flags], {},
                           cluster="dgx-a100")


def _shard(pred) -> float:
    """Parameters of one rank's distributed-optimizer shard (dp = 8, tp = pp = 1)."""
    return build_graph(pred.config, pred.cluster).stages[0].num_params / GPN


def _short_one_gpu(argv: list[str]) -> None:
    """Sequence 256 and global batch 1 in place: on one GPU the optimizer step's working set becomes the peak."""
    argv[argv.index("--seq-length") + 1] = argv[argv.index("--max-position-embeddings") + 1] = "256"
    argv[argv.index("--global-batch-size") + 1] = "1"


def _step_working_set(argv: list[str]) -> tuple[float, int, float]:
    """(the first stage's optimizer_step_working_set, its parameters, the transient memory the step reuses: the
    backward's allocated transients; the allocator's reserve is not allocated memory the step could reuse)."""
    pred = predict_command(argv, {}, cluster="dgx-a100")
    stage = build_graph(pred.config, pred.cluster).stages[0]
    parts = stage_memory(pred.config, stage, 1, pred.cluster.gpu)
    transient = sum(v for k, v in parts.items() if k in ("activations", "embedding_activations", "logits_and_loss"))
    return parts["optimizer_step_working_set"], stage.num_params, transient


def test_default_dtypes_keep_the_master_as_int16_remainders() -> None:
    """fp32 main params with bf16 parameters and the default delayed recipe: FusedAdam holds the master
    (use_precision_aware_optimizer_no_fp8_or_ds_fp8) as 16-bit remainders (store_param_remainders, default True):
    4 + 4 + 2 = 10 B per shard parameter, not 12; and no 'priced as fp32' warning."""
    pred = _megatron(*AWARE)
    assert pred.estimate.memory.components["optimizer_states"] == pytest.approx(10 * _shard(pred), rel=1e-6)
    assert _megatron().estimate.memory.components["optimizer_states"] == pytest.approx(12 * _shard(pred), rel=1e-6)
    assert not [w for w in pred.warnings if "precision-aware" in w or "priced as fp32" in w]


@pytest.mark.parametrize(("flags", "per_param"), [
    (("--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"), 2 + 2 + 2),
    (("--exp-avg-dtype", "fp16", "--exp-avg-sq-dtype", "fp32", "--main-params-dtype", "fp16"), 2 + 4 + 2),
    # fp8 moments: a Float8Tensor with data and transpose (Float8Quantizer's default usages), 2 B each
    (("--exp-avg-dtype", "fp8", "--exp-avg-sq-dtype", "fp8"), 2 + 2 + 2),
    # a tensorwise recipe with fp32 main params: Megatron keeps its own fp32 main shard, no remainders
    (("--fp8-recipe", "tensorwise"), 4 + 4 + 4),
    # Megatron FSDP keeps its own fp32 main parameters; the moments follow the flags
    (("--use-megatron-fsdp", "--ckpt-format", "fsdp_dtensor", "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"),
     2 + 2 + 4),
])
def test_state_bytes_follow_the_dtype_flags(flags: tuple[str, ...], per_param: int) -> None:
    pred = _megatron(*AWARE, *flags)
    assert pred.estimate.memory.components["optimizer_states"] == pytest.approx(per_param * _shard(pred), rel=1e-6)


def test_bf16_main_grads_halve_the_gradient_buffer() -> None:
    """--main-grads-dtype bf16 leaves accumulate_allreduce_grads_in_fp32 unset (arguments.py): a bf16 grad buffer."""
    fp32, bf16 = _megatron(*AWARE), _megatron(*AWARE, "--main-grads-dtype", "bf16")
    params = build_graph(fp32.config, fp32.cluster).stages[0].num_params
    assert fp32.estimate.memory.components["gradients"] == pytest.approx(4 * params, rel=1e-3)
    assert bf16.estimate.memory.components["gradients"] == pytest.approx(2 * params, rel=1e-3)


def test_low_precision_states_are_unscaled_to_fp32_during_the_step() -> None:
    """FusedAdam.step copies each non-fp32 state to fp32 for the whole group: with bf16 moments and an fp16 master,
    12 B per shard parameter on top of the gradient buffer. With one GPU (no sharding) and a short sequence the
    step outgrows the backward's activations and becomes the peak."""
    argv = ["torchrun", "--nproc-per-node", "1", "pretrain_gpt.py", *SHAPE[:-1], "--use-distributed-optimizer",
            *AWARE, "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16", "--main-params-dtype", "fp16"]
    _short_one_gpu(argv)
    working_set, num_params, transient = _step_working_set(argv)
    assert working_set == pytest.approx(12 * num_params - transient, rel=1e-3)
    plain = predict_command([a for a in argv if a not in ("bf16", "fp16") and a not in (
        "--exp-avg-dtype", "--exp-avg-sq-dtype", "--main-params-dtype")], {}, cluster="dgx-a100")
    assert "optimizer_step_working_set" not in plain.estimate.memory.components


@pytest.mark.parametrize("flags", [("--exp-avg-dtype", "bf16"), ("--main-params-dtype", "fp16")])
def test_dtype_flags_need_the_precision_aware_optimizer(flags: tuple[str, ...]) -> None:
    """OptimizerConfig.__post_init__ asserts fp32 for each without the flag: Megatron stops at start-up."""
    with pytest.raises(ConfigError, match="without --use-precision-aware-optimizer"):
        _megatron(*flags)


def test_a_dtype_megatron_does_not_offer_is_refused() -> None:
    with pytest.raises(ConfigError, match="--main-params-dtype bf16 .* is not a choice Megatron offers"):
        _megatron(*AWARE, "--main-params-dtype", "bf16")


def test_sixteen_bit_main_gradients_are_copied_to_fp32_for_the_step() -> None:
    """--fp16 without --accumulate-allreduce-grads-in-fp32 keeps fp16 main gradients; Megatron's step casts each to
    an fp32 .grad of its main parameter (optimizer.py Float16OptimizerWithFloat16Params._copy_model_grads_to_main_grads:
    main_grad.float()), 4 B per parameter until the next zero_grad. On one GPU at a short sequence that is the peak;
    with fp32 main gradients (bf16's default) .float() is the tensor itself."""
    base = ["torchrun", "--nproc-per-node", "1", "pretrain_gpt.py", *[a for a in SHAPE if a not in (
        "--bf16", "--use-distributed-optimizer")], "--fp16"]
    _short_one_gpu(base)
    working_set, num_params, transient = _step_working_set(base)
    assert working_set == pytest.approx(4 * num_params - transient, rel=1e-3)
    fp32_grads = predict_command([*base, "--accumulate-allreduce-grads-in-fp32"], {}, cluster="dgx-a100")
    assert "optimizer_step_working_set" not in fp32_grads.estimate.memory.components


def test_megatrons_own_master_casts_16_bit_main_gradients_to_fp32() -> None:
    """The precision-aware optimizer with a tensorwise recipe and fp32 main params keeps Megatron's own fp32 shard;
    its step then gives each shard main parameter an fp32 .grad (distrib_optimizer.py _copy_model_grads_to_main_grads:
    shard_model_grad.float()), a copy with --main-grads-dtype bf16: 4 B per shard parameter more during the step.
    Where FusedAdam holds the master (the default delayed recipe) it reads the bf16 gradient in place."""
    from llmperf_hook.schedule.memory import optimizer_step_bytes, state_bytes
    from llmperf_hook.schedule.optimizer_state import step_temporary_bytes_per_param

    own = ("--fp8-recipe", "tensorwise")
    pred = _megatron(*AWARE, *own, "--main-grads-dtype", "bf16")
    stage = build_graph(pred.config, pred.cluster).stages[0]
    assert optimizer_step_bytes(pred.config, stage, GPN) == pytest.approx(
        state_bytes(pred.config, stage, GPN)["gradients"] + 4 * _shard(pred), rel=1e-6)
    assert [step_temporary_bytes_per_param(_megatron(*AWARE, *flags).config) for flags in (
        own, ("--main-grads-dtype", "bf16"))] == [0, 0]
