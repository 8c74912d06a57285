"""Megatron-LM's --recompute-modules under selective recompute (TransformerConfig.recompute_modules, megatron-core
0.16.1): what each re-run module no longer keeps (schedule/activations.mlp_terms, recomputes), its working set in
backward, and tune's surrogate pricing them as predict does."""

from __future__ import annotations

import pytest

from llmperf_hook.api import predict_command
from llmperf_hook.schedule import activations as act

BASE = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "8", "--hidden-size", "2048",
        "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
        "--vocab-size", "32000", "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16",
        "--swiglu", "--ffn-hidden-size", "5632", "--disable-bias-linear", "--use-distributed-optimizer"]
MOE = ["--num-experts", "8", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "1408", "--moe-grouped-gemm",
       "--moe-shared-expert-intermediate-size", "2816", "--expert-model-parallel-size", "8"]
SBH = 2048 * 1 * 2048  # s b h, tp 1


def _predict(*flags: str):
    return predict_command([*BASE, *flags], {}, cluster="dgx-h100")


def _layer(pred) -> float:
    return act.layer_activation_bytes(pred.config)


def test_modules_are_read_with_a_warning_only_under_selective() -> None:
    """Megatron's default is ["core_attn"]; TransformerConfig keeps the list whatever the granularity, only selective
    reads it (no warning elsewhere); --moe-layer-recompute appends "moe" (TransformerConfig.__post_init__); the
    modules whose tensors llmperf keeps are named, once; their recomputed forwards are timed (graph/backward.py)."""
    assert _predict("--recompute-activations").config.recompute.modules == ("core_attn",)
    pred = _predict("--recompute-granularity", "selective", "--recompute-modules", "mlp", "layernorm")
    assert pred.config.recompute.modules == ("mlp", "layernorm")
    warning = [w for w in pred.warnings if "recompute modules" in w]
    assert len(warning) == 1 and "not timed" not in warning[0] and "layernorm priced as if kept" in warning[0]
    full = _predict("--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1",
                    "--recompute-modules", "mlp")
    assert full.config.recompute.modules == ("mlp",)
    assert not [w for w in full.warnings if "recompute modules" in w]
    plain_full = _predict("--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers",
                          "1")
    assert act.layer_activation_bytes(full.config) == act.layer_activation_bytes(plain_full.config)
    assert _predict(*MOE, "--moe-layer-recompute").config.recompute.modules == ("core_attn", "moe")


def test_mlp_recompute_keeps_only_the_mlp_input() -> None:
    """--recompute-modules mlp: the dense MLP is checkpointed from its input, the residual the fused norm already
    keeps (Transformer Engine: pre_mlp_layernorm is IdentityOp), so fc1's saved norm output (2 sbh), the SwiGLU input
    (2 x 2 s b f) and fc2's input (2 s b f) go; one layer's worth is alive again in its backward."""
    sel = _predict("--recompute-activations")
    mlp = _predict("--recompute-granularity", "selective", "--recompute-modules", "core_attn", "mlp")
    dropped = 2 * SBH + 2 * 2 * 2048 * 5632 + 2 * 2048 * 5632
    assert _layer(sel) - _layer(mlp) == pytest.approx(dropped)
    assert act.recompute_working_bytes(mlp.config) == pytest.approx(dropped)
    assert act.recompute_working_bytes(sel.config) == 0
    parts = mlp.estimate.memory.components  # the larger of the working set and the logits (one_peak_of_two)
    assert parts.get("recompute_working_set") == int(dropped) or parts["logits_and_loss"] > dropped
    assert mlp.estimate.memory.peak_bytes_per_gpu < sel.estimate.memory.peak_bytes_per_gpu
    local = _predict("--transformer-impl", "local", "--recompute-granularity", "selective", "--recompute-modules",
                     "core_attn", "mlp")
    # without Transformer Engine the checkpoint's input is the unfused norm's output, which then stays
    assert _layer(_predict("--transformer-impl", "local", "--recompute-activations")) - _layer(local) == \
        pytest.approx(dropped - 2 * SBH)


def test_moe_modules_drop_their_own_tensors() -> None:
    """moe: the whole MoE layer from the router's input (routed copies k x 2 sbh, experts' and shared experts' MLPs
    gone); moe_act: only the experts' fc2 input (2 s b k f_moe); shared_experts: the shared MLP (6 s b f_shared)."""
    sel = _layer(_predict(*MOE, "--recompute-activations"))
    routed_f, shared_f = 2 * 1408, 2816
    routed_copies = 2 * SBH * 2
    mlp = (lambda f: 2 * 2 * 2048 * f + 2 * 2048 * f)  # noqa: E731  SwiGLU input + fc2 input, bf16
    moe = _layer(_predict(*MOE, "--recompute-granularity", "selective", "--recompute-modules", "moe"))
    assert sel - moe == pytest.approx(routed_copies + mlp(routed_f) + mlp(shared_f))
    moe_act = _layer(_predict(*MOE, "--recompute-granularity", "selective", "--recompute-modules", "moe_act"))
    assert sel - moe_act == pytest.approx(2 * 2048 * routed_f)
    shared = _layer(_predict(*MOE, "--recompute-granularity", "selective", "--recompute-modules", "shared_experts"))
    assert sel - shared == pytest.approx(mlp(shared_f))


def test_without_core_attn_unfused_attention_keeps_its_scores() -> None:
    """Selective recompute without core_attn in the list does not re-run the attention core: the unfused
    attention's scores stay stored, as without recompute."""
    unfused = ("--attention-backend", "unfused")
    none = _layer(_predict(*unfused))
    mlp_only = _predict(*unfused, "--recompute-granularity", "selective", "--recompute-modules", "mlp")
    with_attn = _predict(*unfused, "--recompute-granularity", "selective", "--recompute-modules", "core_attn", "mlp")
    scores = act.layer_terms(_predict(*unfused).config)[2]  # 5 a s^2 b: softmax output, dropout mask and output
    assert _layer(mlp_only) - _layer(with_attn) == pytest.approx(scores)
    assert _layer(mlp_only) < none


def test_tune_prices_recompute_modules_as_predict_does() -> None:
    """The surrogate's selective column keeps the job's modules (apply_candidate keeps the job's recompute when a
    candidate does), and its working set: equal to the full model on random candidates."""
    from tests.tune.test_surrogate_memory import _check_job

    for seed in (1, 2, 3):
        _check_job([*BASE, *MOE, "--recompute-granularity", "selective", "--recompute-modules", "moe_act",
                    "shared_experts"], None, seed)
        _check_job([*BASE, "--recompute-granularity", "selective", "--recompute-modules", "mlp"], None, seed)


def test_an_moe_models_dense_layers_are_priced_as_dense() -> None:
    """--moe-layer-freq 2: layers 0, 2, 4, 6 are MoE, the others a dense MLP of --ffn-hidden-size
    (graph/params.is_moe_layer); each dense layer stores what the same-shaped dense model's layer stores, not an MoE
    layer's routed copies and experts (before: every layer of an MoE model was priced as an MoE layer). Their mlp
    recompute applies to the dense layers only (transformer_layer.py: `if not self.is_moe_layer`)."""
    dense_layer = _layer(_predict("--recompute-activations"))
    mixed = _predict(*MOE, "--moe-layer-freq", "2", "--recompute-activations")
    moe_layer = _layer(mixed)
    assert moe_layer != dense_layer
    assert mixed.estimate.memory.components["activations"] == int(4 * moe_layer + 4 * dense_layer)
    mlp = _predict(*MOE, "--moe-layer-freq", "2", "--recompute-granularity", "selective", "--recompute-modules",
                   "core_attn", "mlp")
    mlp_dense = _layer(_predict("--recompute-granularity", "selective", "--recompute-modules", "core_attn", "mlp"))
    assert mlp.estimate.memory.components["activations"] == int(4 * moe_layer + 4 * mlp_dense)
    # the dense layers' re-run MLP is the working set (the MoE layers re-run nothing here)
    assert act.recompute_working_bytes(mlp.config) == pytest.approx(
        act.recompute_working_bytes(_predict("--recompute-granularity", "selective", "--recompute-modules",
                                             "core_attn", "mlp").config))


def test_tune_prices_dense_layers_of_moe_models_as_predict_does() -> None:
    from tests.tune.test_surrogate_memory import _check_job

    for seed in (4, 5):
        _check_job([*BASE, *MOE, "--moe-layer-freq", "2", "--recompute-activations"], None, seed)
        _check_job([*BASE, *MOE, "--moe-layer-freq", "([0]*3+[1]*5)"], None, seed)


def test_an_mtp_depth_repeats_the_last_layers_kind() -> None:
    """multi_token_prediction.py builds each depth from the decoder's last layer spec: with the last layer dense
    (pattern ending in 0) the MTP layer stores a dense layer's activations; with it MoE, an MoE layer's."""
    mtp = ("--mtp-num-layers", "1", "--position-embedding-type", "rope", "--recompute-activations")
    ends_dense = _predict(*MOE, "--moe-layer-freq", "([1]*7+[0])", *mtp)
    ends_moe = _predict(*MOE, "--moe-layer-freq", "([0]*7+[1])", *mtp)
    gap = (ends_moe.estimate.memory.components["mtp_activations"]
           - ends_dense.estimate.memory.components["mtp_activations"])
    assert gap == pytest.approx(_layer(ends_moe) - _layer(_predict("--recompute-activations")), abs=2)


def test_full_recompute_reruns_the_larger_layer_kind() -> None:
    """Full recompute re-runs one layer at a time: in an MoE model whose dense layers store more than its MoE layers
    (a wide dense MLP), the working set is a dense layer's, as the same-shaped dense model's."""
    full = ("--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "1")
    wide = ("--ffn-hidden-size", "16384")  # the dense layers' MLP; the experts keep --moe-ffn-hidden-size
    mixed = _predict(*MOE, *wide, "--moe-layer-freq", "2", *full)
    dense = _predict(*wide, *full)
    assert act.recompute_working_bytes(mixed.config) == pytest.approx(act.recompute_working_bytes(dense.config))
    all_moe = _predict(*MOE, *wide, *full)  # no dense layer: the MoE layer's
    assert act.recompute_working_bytes(all_moe.config) < act.recompute_working_bytes(dense.config)
    from tests.tune.test_surrogate_memory import _check_job

    _check_job([*BASE, *MOE, *wide, "--moe-layer-freq", "2", *full], None, 6)


def test_a_move_to_selective_runs_the_modules_the_command_names(tmp_path, monkeypatch) -> None:
    """A full-recompute job naming --recompute-modules mlp (ignored there) that tune moves to selective runs mlp, as
    the applied command keeps the flag: tune prices the config the applied command resolves to (it priced core_attn:
    tune listed 17.2 GiB, predict of the applied command 12.1 GiB, 8 layers, micro-batch 8 on 8 H100s)."""
    import dataclasses

    from llmperf_hook.frameworks.resolve import JobOverrides, resolve_job
    from llmperf_hook.tune.apply import plan_tuned_command
    from llmperf_hook.tune.candidate import apply_candidate, candidate_of

    monkeypatch.chdir(tmp_path)
    argv = [*BASE, "--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1",
            "--recompute-modules", "mlp"]
    _, cfg = resolve_job(argv, {}, JobOverrides())
    cand = dataclasses.replace(candidate_of(cfg), recompute="selective", recompute_num_layers=None)
    priced = apply_candidate(cfg, cand)
    _, applied = resolve_job(list(plan_tuned_command(argv, cfg, cand, priced).argv), {}, JobOverrides())
    assert applied.recompute == priced.recompute and priced.recompute.modules == ("mlp",)
