"""Flags that change a Megatron step without changing the model (frameworks/step_flags.py, FLAGS.md): the
store_false fusions are priced, everything else that changes the step warns, and nothing is accepted in silence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.api import predict_command
from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.op import Op
from llmperf_hook.hardware.load import load_cluster

SHAPE = ("--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 "
         "--vocab-size 32000 --micro-batch-size 1 --global-batch-size 16 --bf16").split()
MEGATRON = ("torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--tensor-model-parallel-size", "2", *SHAPE)
LLAMA = (*MEGATRON, "--swiglu", "--disable-bias-linear", "--position-embedding-type", "rope")


def _cfg(*argv: str) -> TrainingConfig:
    return resolve_job(list(argv), {})[1]


def _fwd_ops(cfg: TrainingConfig) -> dict[str, Op]:
    block = next(b for b in build_graph(cfg, load_cluster("dgx-h100")).stages[0].chunks[0].blocks if b.name == "dense_layer")
    return {op.name: op for op in block.fwd}


def _bwd_ops(cfg: TrainingConfig) -> list[Op]:
    return list(next(b for b in build_graph(cfg, load_cluster("dgx-h100")).stages[0].chunks[0].blocks
                     if b.name == "dense_layer").bwd)


BIG = ("torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--tensor-model-parallel-size", "2",
       *"--num-layers 4 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 "
        "--vocab-size 32000 --micro-batch-size 4 --global-batch-size 64 --bf16".split())


def _step_s(*argv: str) -> float:
    return predict_command(list(argv), {}, cluster="dgx-h100").estimate.step_time_s


@pytest.mark.parametrize("flag, expected", [
    ("--no-align-grad-reduce", "--no-align-grad-reduce: each pipeline stage launches its gradient reduce-scatter"),
    ("--no-contiguous-buffers-in-local-ddp", "--no-contiguous-buffers-in-local-ddp: local DDP without"),
    ("--log-params-norm", "--log-params-norm: the L2 norm of every parameter"),
    ("--log-num-zeros-in-grad", "--log-num-zeros-in-grad: a count of the zeros"),
    ("--cross-entropy-loss-fusion", "--cross-entropy-loss-fusion: fused cross-entropy timed as"),
    ("--deterministic-mode", "--deterministic-mode: deterministic kernels"),
])
def test_flag_that_changes_the_step_warns(flag: str, expected: str) -> None:
    warnings = _cfg(*MEGATRON, flag).warnings
    assert any(w.startswith(expected) for w in warnings), warnings
    assert not any(w.startswith(flag) for w in _cfg(*MEGATRON).warnings)


@pytest.mark.parametrize("extra, expected", [
    (("--timing-log-level", "0"), None),
    (("--timing-log-level", "1"), "--timing-log-level 1: Megatron's timing synchronizes the device (and barriers"),
    (("--timing-log-level", "2"), "--timing-log-level 2: Megatron's timing synchronizes the device around every micro-batch"),
    (("--manual-gc",), None),  # automatic GC off, no collection added: nothing timed either way
    (("--manual-gc", "--manual-gc-interval", "100"), "--manual-gc-interval 100: a full gc.collect() every N steps"),
    (("--manual-gc-interval", "100"), None),  # the interval does nothing without --manual-gc (training.py)
    (("--ddp-num-buckets", "4"), None),  # priced: OptimizerConfig.grad_num_buckets (graph/step_ops.py)
    (("--no-barrier-with-level-1-timing",), None),  # barrier-free timers only matter when level-1 timers run
])
def test_valued_step_flags_warn_only_when_they_change_the_step(extra: tuple[str, ...], expected: str | None) -> None:
    warnings = _cfg(*MEGATRON, *extra).warnings
    mine = [w for w in warnings if w.startswith(extra[0]) or w.startswith(extra[-2] if len(extra) > 2 else extra[0])]
    if expected is None:
        assert not [w for w in warnings if any(w.startswith(word) for word in extra if word.startswith("--"))], warnings
    else:
        assert any(w.startswith(expected) for w in mine), warnings


def test_timing_level_is_a_megatron_choice() -> None:
    with pytest.raises(ConfigError, match="--timing-log-level 3 .* is not a choice Megatron offers"):
        _cfg(*MEGATRON, "--timing-log-level", "3")


def test_valued_flag_takes_its_value() -> None:
    # '--timing-log-level 2' is an int flag now: its value is read, not skipped as a stray positional word.
    assert _cfg(*MEGATRON, "--timing-log-level", "2", "--micro-batch-size", "2").batch.micro_batch_size == 2


def test_switch_given_a_value_stops_megatron() -> None:
    with pytest.raises(ConfigError, match="--log-params-norm True gives a value to a Megatron switch"):
        _cfg(*MEGATRON, "--log-params-norm", "True")


def test_priced_fusions_do_not_warn() -> None:
    # the last three are priced too (OptimizerConfig.grad_nan_check, grad_scale: graph/megatron_step.py)
    flags = ("--no-bias-gelu-fusion", "--no-bias-dropout-fusion", "--no-rope-fusion", "--no-gradient-accumulation-fusion",
             "--no-bias-swiglu-fusion", "--no-masked-softmax-fusion", "--no-check-for-nan-in-loss-and-grad",
             "--ddp-average-in-collective", "--calculate-per-token-loss")
    warnings = _cfg(*LLAMA, *flags).warnings
    assert not [w for w in warnings if w.startswith(flags)], warnings
    from llmperf_hook.frameworks.step_flags import NOT_MODELLED_STEP, PRICED_AS_GIVEN

    assert not set(PRICED_AS_GIVEN) & set(NOT_MODELLED_STEP)


def test_fusion_defaults_follow_megatron() -> None:
    cfg = _cfg(*MEGATRON)
    assert (cfg.bias_activation_fusion, cfg.bias_dropout_fusion, cfg.apply_rope_fusion, cfg.gradient_accumulation_fusion) \
        == (True, True, True, True)
    assert cfg.hidden_dropout == 0.1


def test_rope_and_swiglu_fusion_flags_drop_the_fused_kernel() -> None:
    fused = _fwd_ops(_cfg(*LLAMA))
    assert fused["attn.rope"].tags.get("kernel") == "fused" and fused["mlp.swiglu"].tags.get("kernel") == "fused"
    plain = _fwd_ops(_cfg(*LLAMA, "--no-rope-fusion", "--no-bias-swiglu-fusion"))
    assert "kernel" not in plain["attn.rope"].tags and "kernel" not in plain["mlp.swiglu"].tags
    # --no-bias-gelu-fusion is not the SwiGLU switch (argument_utils.core_transformer_config_from_args)
    assert _fwd_ops(_cfg(*LLAMA, "--no-bias-gelu-fusion"))["mlp.swiglu"].tags.get("kernel") == "fused"


def test_unfused_bias_gelu_adds_the_bias_pass() -> None:
    fused, plain = _fwd_ops(_cfg(*MEGATRON)), _fwd_ops(_cfg(*MEGATRON, "--no-bias-gelu-fusion"))
    assert fused["mlp.gelu"].op_class == "gelu" and plain["mlp.gelu"].op_class == "bias_activation"
    # read + write of x + bias, then GeLU's read + write: 4 passes of the rank's T x ffn/TP activations
    assert plain["mlp.gelu"].bytes_moved == 2 * fused["mlp.gelu"].bytes_moved == 4 * 2048 * 4096 // 2 * 2
    assert len(plain) == len(fused)  # one op: the host issues one unit for the add and the GeLU
    # without biases validate_args turns the fusion off itself and nothing is split (arguments.py)
    no_bias = _fwd_ops(_cfg(*MEGATRON, "--disable-bias-linear", "--no-bias-gelu-fusion"))
    assert no_bias["mlp.gelu"].op_class == "gelu"


@pytest.mark.parametrize("extra, passes", [
    ((), 7.5),  # x + bias (2), dropout with its 1-byte mask (2.5), residual add (3)
    (("--hidden-dropout", "0"), 5.0),  # torch dropout at p = 0 returns its input
    (("--disable-bias-linear",), 5.5),
    (("--disable-bias-linear", "--hidden-dropout", "0.0"), 3.0),  # the residual add alone, as fused
])
def test_unfused_bias_dropout_add(extra: tuple[str, ...], passes: float) -> None:
    op = _fwd_ops(_cfg(*MEGATRON, "--no-bias-dropout-fusion", *extra))["attn.residual"]
    elements = 2048 * 1024  # T x h (no sequence parallelism)
    assert op.bytes_moved == passes * elements * 2
    assert op.op_class == ("residual_add" if passes == 3.0 else "bias_dropout_add")
    fused = _fwd_ops(_cfg(*MEGATRON, *extra))["attn.residual"]
    assert fused.op_class == "residual_add" and fused.bytes_moved == 3.0 * elements * 2


def test_unfused_gradient_accumulation_adds_into_main_grad() -> None:
    default = [op for op in _bwd_ops(_cfg(*MEGATRON)) if op.name == "layer.main_grad_add"]
    unfused = [op for op in _bwd_ops(_cfg(*MEGATRON, "--no-gradient-accumulation-fusion")) if op.name == "layer.main_grad_add"]
    assert not default and len(unfused) == 1
    # main_grad.add_(param.grad): read fp32 main_grad + bf16 grad, write fp32 main_grad (bf16 forces fp32 main grads)
    h, ffn = 1024, 4096
    params = (3 * h * h + 3 * h + h * h + h) // 2 + (h * ffn + ffn) // 2 + ffn * h // 2 + h + 4 * h  # TP 2
    assert unfused[0].bytes_moved == pytest.approx(params * 10, rel=0.01)


def test_gradient_accumulation_fusion_is_megatron_ddp_only(tmp_path: Path) -> None:
    # Megatron-DeepSpeed comments the fused path out and DeepSpeed's engine accumulates: the flag changes nothing.
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}}))
    argv = ("deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *SHAPE, "--deepspeed", "--deepspeed_config", str(ds),
            "--no-gradient-accumulation-fusion")
    assert _cfg(*argv).gradient_accumulation_fusion is True


@pytest.mark.parametrize("flag", ["--no-async-tensor-model-parallel-allreduce",
                                  "--disable-async-tensor-model-parallel-allreduce"])
def test_megatron_lm_ignores_the_deprecated_async_flag_with_one_warning(flag: str) -> None:
    # 'DEPRECATED. This flag is ignored.' since Megatron-LM 5fffdfc737 (2024-04-29); gone since 82cbd829dd (2026-02).
    plain, given = _cfg(*MEGATRON), _cfg(*MEGATRON, flag)
    assert plain.async_tp_allreduce and given.async_tp_allreduce
    (warning,) = [w for w in given.warnings if w.startswith(flag)]
    assert "ignored" in warning and "5fffdfc737" in warning and "unrecognized arguments" in warning
    assert not [w for w in plain.warnings if "async-tensor-model-parallel-allreduce" in w]


def test_megatron_deepspeed_runs_no_async_all_reduce_with_or_without_the_flag(tmp_path: Path) -> None:
    # Megatron-DeepSpeed defines the flag, and its validate_args turns the async all-reduce off under --deepspeed.
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}}))
    argv = ("deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *SHAPE, "--tensor-model-parallel-size", "2",
            "--deepspeed", "--deepspeed_config", str(ds))
    for cfg in (_cfg(*argv), _cfg(*argv, "--no-async-tensor-model-parallel-allreduce")):
        assert cfg.framework == "megatron-deepspeed" and not cfg.async_tp_allreduce
        assert not [w for w in cfg.warnings if "async-tensor-model-parallel-allreduce" in w]


@pytest.mark.parametrize("flag", ["--no-bias-gelu-fusion", "--no-bias-dropout-fusion", "--no-gradient-accumulation-fusion"])
def test_each_unfused_path_costs_time(flag: str) -> None:
    assert _step_s(*BIG, flag) > _step_s(*BIG)


def test_unfused_rope_costs_time_with_a_fused_profile() -> None:
    # The H100 profile fitted its rope regressor on PyTorch's composite (provenance unfused_classes): the fused kernel
    # is priced by the roofline's one memory pass, the composite by the regressor.
    argv = (*LLAMA, "--transformer-impl", "local")
    assert predict_command([*argv, "--no-rope-fusion"], {}, cluster="dgx-h100", hardware="h100-sxm5-80gb").estimate.step_time_s \
        > predict_command(list(argv), {}, cluster="dgx-h100", hardware="h100-sxm5-80gb").estimate.step_time_s


def test_precision_switches_warn() -> None:
    # validate_args: the fp16 cross-entropy only with --fp16 (megatron_validate_args.py refuses it otherwise). The
    # precision-aware optimizer is priced (schedule/optimizer_state.py, tests/schedule/test_precision_aware_optimizer.py)
    argv = [w.replace("--bf16", "--fp16") for w in MEGATRON]
    assert any(w.startswith("--fp16-lm-cross-entropy:") for w in _cfg(*argv, "--fp16-lm-cross-entropy").warnings)
    aware = _cfg(*MEGATRON, "--use-distributed-optimizer", "--use-precision-aware-optimizer")
    assert not [w for w in aware.warnings if w.startswith("--use-precision-aware-optimizer")]


def test_attention_dropout_zero_is_priced_not_warned() -> None:
    """The graph drops the unfused attention's dropout at --attention-dropout 0 (tests/graph/test_softmax_fallback.py)."""
    unfused = (*MEGATRON, "--transformer-impl", "local", "--attention-dropout", "0")
    assert _cfg(*unfused).attention_dropout == 0.0
    assert not any(w.startswith("--attention-dropout") for w in _cfg(*unfused).warnings)


def test_dataclass_spelling_of_a_false_flag_warns() -> None:
    # Megatron-LM HEAD builds --no-X and --disable-X for a True-by-default config field (argument_utils.py)
    warnings = _cfg(*MEGATRON, "--disable-align-grad-reduce").warnings
    assert any(w.startswith("--disable-align-grad-reduce: each pipeline stage") for w in warnings), warnings


def test_explain_names_the_unfused_kernels_and_their_flags() -> None:
    from llmperf_hook.frameworks.explain_data import explain_json

    data = explain_json(_cfg(*LLAMA, "--no-rope-fusion", "--no-bias-swiglu-fusion"))
    assert data["unfused_kernels"] == "bias_activation, rope"
    assert data["sources"]["unfused_kernels"] == "argv --no-bias-swiglu-fusion --no-rope-fusion"
    assert "unfused_kernels" not in explain_json(_cfg(*LLAMA))  # defaults: output unchanged


def test_a_store_false_flag_in_not_modelled_warns_when_given(monkeypatch: pytest.MonkeyPatch) -> None:
    # script_flags.NOT_MODELLED reads a store_false flag as set when it is False (given), not when it is True (absent)
    from llmperf_hook.frameworks import megatron

    monkeypatch.setitem(megatron.NOT_MODELLED, "overlap_p2p_comm", "p2p overlap switched off")
    assert "--no-overlap-p2p-communication: p2p overlap switched off" in _cfg(*MEGATRON, "--no-overlap-p2p-communication").warnings
    assert not any("p2p overlap switched off" in w for w in _cfg(*MEGATRON).warnings)
    assert not any("p2p overlap switched off" in w for w in _cfg(*MEGATRON, "--overlap-p2p-communication").warnings)


def test_ddp_num_buckets_reaches_the_optimizer_config_and_megatron_core_asserts_are_kept() -> None:
    from llmperf_hook.errors import ConfigError

    assert _cfg(*MEGATRON, "--ddp-num-buckets", "4").optimizer.grad_num_buckets == 4
    assert _cfg(*MEGATRON).optimizer.grad_num_buckets is None
    with pytest.raises(ConfigError, match="Cannot specify both num_buckets and bucket_size"):
        _cfg(*MEGATRON, "--ddp-num-buckets", "4", "--ddp-bucket-size", "40000000")
    with pytest.raises(ConfigError, match="--ddp-num-buckets 0 .* must be at least 1"):
        _cfg(*MEGATRON, "--ddp-num-buckets", "0")
