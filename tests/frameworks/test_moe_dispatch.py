"""Megatron-Core MoE token dispatchers, expert kernels and their rules (graph/moe_ops.py, megatron_shape.py).

Small MoE: 8 GPUs, TP 4 (SP), EP 2, ETP = TP = 4 (Megatron's default), 8 experts top-2, h 1024, seq 2048, mbs 1,
bf16. Per rank n = 2048 / 4 = 512 routed tokens; tp_ep group G = ETP x EP = 8; local experts 8 / 2 = 4.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmperf_hook.api import predict_command
from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.frameworks.training_config import MoeDispatch
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.moe_ops import expected_distinct
from llmperf_hook.graph.sample_configs import make_config
from llmperf_hook.hardware.load import load_cluster

MOE = ("torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 2 --hidden-size 1024 --ffn-hidden-size 4096 "
       "--num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 --vocab-size 32000 "
       "--num-experts 8 --moe-router-topk 2 --expert-model-parallel-size 2 --tensor-model-parallel-size 4 "
       "--sequence-parallel --micro-batch-size 1 --global-batch-size 8 --bf16 --disable-bias-linear").split()
H, N, BF16 = 1024, 512, 2


def _moe_ops(*extra: str, cluster: str = "dgx-h100") -> list:
    pred = predict_command([*MOE, *extra], {}, cluster=cluster)
    block = next(b for b in build_graph(pred.config, pred.cluster).stages[0].chunks[0].blocks if b.name == "moe_layer")
    return [op for op in block.fwd if op.name.startswith("moe.")]


def _by_name(ops: list) -> dict:
    return {op.name: op for op in ops}


def test_default_dispatcher_is_allgather_over_tp_ep() -> None:
    ops = _by_name(_moe_ops())
    gather = ops["moe.dispatch_allgather"]
    assert gather.collective.group == "tp_ep" and gather.collective.group_size == 8
    assert gather.dims["bytes"] == N * 8 * H * BF16  # every token of the 8-rank group, not top-k copies
    assert ops["moe.dispatch_allgather_probs"].dims["bytes"] == N * 8 * 8 * (BF16 + 1)  # probs + bool routing map
    assert ops["moe.combine_reducescatter"].dims["bytes"] == N * 8 * H * BF16
    assert "moe.dispatch_alltoall" not in ops and "moe.tp_allgather" not in ops


def test_alltoall_sends_topk_copies_then_gathers_over_etp() -> None:
    ops = _by_name(_moe_ops("--moe-token-dispatcher-type", "alltoall"))
    assert ops["moe.dispatch_alltoall"].dims["bytes"] == N * 2 * H * BF16  # 512 tokens x top-2
    assert ops["moe.dispatch_alltoall"].collective.group == "ep"
    etp = ops["moe.dispatch_etp_allgather"]
    assert etp.collective.group == "etp" and etp.dims["bytes"] == 4 * N * 2 * H * BF16
    assert ops["moe.combine_etp_reducescatter"].dims["bytes"] == etp.dims["bytes"]
    assert ops["moe.sort_chunks"].dims["elements"] == 4 * N * 2 * H  # 4 local experts: chunks sorted


def test_flex_inside_a_node_sends_each_token_once_per_destination_gpu() -> None:
    ops = _by_name(_moe_ops("--moe-token-dispatcher-type", "flex"))
    # k' = ETP x top-k = 8 picks over G = 8 GPUs: 8 x (1 - (7/8)^8) = 5.251 distinct GPUs per token
    assert expected_distinct(8, 8) == pytest.approx(8 * (1 - (7 / 8) ** 8))
    assert ops["moe.dispatch"].dims["bytes"] == int(N * 8 * (1 - (7 / 8) ** 8) * H * BF16)


def test_flex_across_nodes_sends_each_token_once_per_node() -> None:
    ops = _by_name(_moe_ops("--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "hybridep",
                            cluster="perlmutter"))  # 4 GPUs per node: G = 8 spans 2 nodes
    rdma, nvlink = ops["moe.dispatch_rdma"], ops["moe.dispatch_nvlink"]
    assert rdma.collective.group_size == 2 and rdma.collective.ranks_per_node == 1
    assert rdma.dims["bytes"] == int(N * 2 * (1 - 0.5 ** 8) * H * BF16)  # 2 nodes: ~1.99 distinct nodes, not 8 copies
    assert nvlink.collective.group_size == 4 and nvlink.collective.intra_node
    assert rdma.dims["bytes"] < N * 8 * H * BF16 / 3


def test_grouped_gemm_is_one_op_over_all_local_experts() -> None:
    sequential = [op for op in _moe_ops("--moe-token-dispatcher-type", "alltoall") if op.name == "moe.expert_fc1"]
    grouped = [op for op in _moe_ops("--moe-token-dispatcher-type", "alltoall", "--moe-grouped-gemm")
               if op.name == "moe.expert_fc1"]
    # SequentialMLP: 4 GEMMs of 4096 / 4 = 1024 tokens; grouped: one of 4 x 512 x 2 = 4096 rows, ffn 4096 / ETP 4
    assert len(sequential) == 4 and dict(sequential[0].dims) == {"m": 1024, "n": 1024, "k": 1024}
    assert len(grouped) == 1 and dict(grouped[0].dims) == {"m": 4096, "n": 1024, "k": 1024}
    assert grouped[0].flops == pytest.approx(4 * sequential[0].flops)
    assert grouped[0].bytes_moved > sequential[0].bytes_moved  # reads every local expert's weights


def test_capacity_factor_drops_and_padding_fills() -> None:
    base = ["--moe-token-dispatcher-type", "alltoall"]
    drop = _by_name(_moe_ops(*base, "--moe-expert-capacity-factor", "0.5"))
    pad = _by_name(_moe_ops(*base, "--moe-expert-capacity-factor", "1.5", "--moe-pad-expert-input-to-capacity"))
    # capacity = ceil(512 x 2 / 8 x f): 64 per expert at 0.5, 192 at 1.5 (padded), 8 experts
    assert drop["moe.dispatch_alltoall"].dims["bytes"] == 64 * 8 * H * BF16
    assert pad["moe.dispatch_alltoall"].dims["bytes"] == 192 * 8 * H * BF16
    assert _by_name(_moe_ops(*base, "--moe-expert-capacity-factor", "1.5"))["moe.dispatch_alltoall"].dims["bytes"] == \
        N * 2 * H * BF16  # dropless when no expert overflows and no padding


def test_shared_expert_overlap_hides_dispatch_behind_shared_experts() -> None:
    shared = ["--moe-token-dispatcher-type", "alltoall", "--moe-shared-expert-intermediate-size", "2048"]
    plain = predict_command([*MOE, *shared], {}, cluster="dgx-h100").estimate.step_time_s
    overlapped = predict_command([*MOE, *shared, "--moe-shared-expert-overlap"], {}, cluster="dgx-h100")
    ops = _by_name(_moe_ops(*shared, "--moe-shared-expert-overlap"))
    assert ops["moe.dispatch_alltoall"].tags["overlap"] == "shared_experts"
    assert overlapped.estimate.step_time_s < plain


@pytest.mark.parametrize("extra, needle", [
    (["--moe-enable-deepep"], "only supported with flex"),
    (["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "nvshmem"], "not a choice"),
    (["--moe-token-dispatcher-type", "flex", "--moe-enable-deepep", "--moe-flex-dispatcher-backend", "hybridep"],
     "Only one backend"),
    (["--moe-token-dispatcher-type", "flex", "--moe-expert-capacity-factor", "1", "--moe-pad-expert-input-to-capacity"],
     "does not support moe_pad_expert_input_to_capacity"),
    (["--overlap-moe-expert-parallel-comm"], "alltoall/flex"),
    (["--moe-token-dispatcher-type", "alltoall", "--overlap-moe-expert-parallel-comm", "--recompute-granularity",
      "full", "--recompute-method", "uniform"], "disable full recomputation"),
    (["--moe-expert-capacity-factor", "1", "--moe-router-load-balancing-type", "sinkhorn"], "only works with"),
    (["--delay-wgrad-compute", "--transformer-impl", "local"], "transformer_engine"),
    (["--moe-token-dispatcher-type", "alltoall", "--delay-wgrad-compute"], "must be enabled when enabling delay_wgrad"),
])
def test_megatron_dispatcher_rules_exit_2(extra: list[str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        resolve_job([*MOE, *extra], {})


def test_ep_overlap_accepted_and_hides_the_a2a() -> None:
    base = ["--moe-token-dispatcher-type", "alltoall"]
    _, cfg = resolve_job([*MOE, *base, "--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"], {})
    assert cfg.model.moe_dispatch.overlap_ep_comm
    assert not any("--overlap-moe-expert-parallel-comm" in w for w in cfg.warnings)
    ops = _by_name(_moe_ops(*base, "--overlap-moe-expert-parallel-comm"))
    assert ops["moe.dispatch_alltoall"].tags["overlap"] == "ep_a2a"


def test_dispatcher_flags_on_a_dense_model_warn() -> None:
    dense = MOE[:MOE.index("--num-experts")] + MOE[MOE.index("--tensor-model-parallel-size"):]
    _, cfg = resolve_job([*dense, "--moe-token-dispatcher-type", "alltoall"], {})
    assert any("ignored without --num-experts" in w for w in cfg.warnings)


def test_tune_candidates_and_apply_keep_the_dispatcher_settings() -> None:
    from dataclasses import replace

    from llmperf_hook.tune.candidate import apply_candidate, candidate_of
    from llmperf_hook.tune.megatron_argv import rewrite_megatron_argv

    flags = ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "hybridep", "--moe-grouped-gemm",
             "--moe-permute-fusion"]
    _, cfg = resolve_job([*MOE, *flags], {})
    base = candidate_of(cfg)
    new = replace(base, ep=4, micro_batch_size=2)
    assert apply_candidate(cfg, new).model.moe_dispatch == cfg.model.moe_dispatch
    argv = rewrite_megatron_argv([*MOE, *flags], base, new, cfg.model.num_layers, cfg.framework)
    assert argv[-len(flags):] == flags and "4" == argv[argv.index("--expert-model-parallel-size") + 1]


def test_fp32_router_makes_the_combine_reduce_scatter_fp32() -> None:
    ops = _by_name(_moe_ops("--moe-router-dtype", "fp32"))
    assert ops["moe.combine_reducescatter"].dims["bytes"] == N * 8 * H * 4  # token_combine casts to the probs' dtype
    assert ops["moe.dispatch_allgather"].dims["bytes"] == N * 8 * H * BF16  # the gather stays in bf16
    assert ops["moe.dispatch_allgather_probs"].dims["bytes"] == N * 8 * 8 * (4 + 1)


@pytest.mark.parametrize("extra, needle", [
    (["--moe-router-padding-for-quantization"], "does not support moe_router_padding_for_quantization"),
    (["--moe-router-dtype", "bf16"], "not a choice"),
])
def test_more_dispatcher_rules_exit_2(extra: list[str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        resolve_job([*MOE, *extra], {})


def test_deepep_needs_more_than_one_expert_rank() -> None:
    single = ("torchrun --nproc-per-node 1 pretrain_gpt.py --num-layers 2 --hidden-size 256 --num-attention-heads 4 "
              "--seq-length 512 --max-position-embeddings 512 --vocab-size 1000 --num-experts 4 --micro-batch-size 1 "
              "--global-batch-size 1 --bf16 --moe-token-dispatcher-type flex").split()
    with pytest.raises(ConfigError, match="requires TPxEP > 1"):
        resolve_job(single, {})


@settings(max_examples=25, deadline=None)
@given(tp=st.sampled_from([1, 2, 4]), ep=st.sampled_from([1, 2, 4, 8]), topk=st.sampled_from([1, 2, 4]),
       grouped=st.booleans())
def test_every_dispatcher_computes_the_same_expert_work(tp: int, ep: int, topk: int, grouped: bool) -> None:
    """The dispatcher moves tokens differently; the expert FLOPs per rank are the same (balanced routing)."""
    flops = set()
    for kind in ("allgather", "alltoall", "flex"):
        cfg = make_config(num_layers=2, hidden_size=256, num_attention_heads=4, seq_length=512, tp=tp, dp=8 // tp,
                          ep=ep, sequence_parallel=tp > 1, global_batch_size=8 // tp,
                          model_kw=dict(num_experts=8, moe_router_topk=topk, add_bias_linear=False,
                                        moe_dispatch=MoeDispatch(token_dispatcher=kind, grouped_gemm=grouped)))
        block = next(b for b in build_graph(cfg, load_cluster("dgx-h100")).stages[0].chunks[0].blocks
                     if b.name == "moe_layer")
        flops.add(round(sum(op.flops for op in block.fwd if op.name.startswith("moe.expert_fc"))))
    assert len(flops) == 1


def test_ncclep_is_an_alltoall_of_every_copy_over_tp_ep() -> None:
    ops = _by_name(_moe_ops("--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "ncclep"))
    a2a = ops["moe.dispatch_alltoall"]
    assert a2a.collective.group == "tp_ep" and a2a.dims["bytes"] == 4 * N * 2 * H * BF16  # ETP 4 x 512 x top-2


def test_expert_activations_follow_the_routed_copies() -> None:
    """Stored per layer: the experts' FC1 input (k x ETP copies of sbh) and FC1 out / FC2 in (s b k f each), all
    halved by a dropping capacity factor 0.5. h 256, s 512, b 1, k 2, f 1024, TP 1: sbh = 131,072."""
    from llmperf_hook.schedule.activations import layer_activation_bytes

    def cfg(dispatch: MoeDispatch):
        return make_config(num_layers=2, hidden_size=256, num_attention_heads=4, seq_length=512, ep=1,
                           model_kw=dict(num_experts=8, moe_router_topk=2, moe_dispatch=dispatch))

    dropless = layer_activation_bytes(cfg(MoeDispatch(token_dispatcher="alltoall")))
    dropped = layer_activation_bytes(cfg(MoeDispatch(token_dispatcher="alltoall", capacity_factor=0.5)))
    assert dropless - dropped == pytest.approx(0.5 * (2 * 131072 * 2 + 2 * (2 * 512 * 1024 * 2)))


@pytest.mark.parametrize("extra, dispatcher", [((), "allgather"),
                                               (("--moe-token-dispatcher-type", "alltoall"), "alltoall")])
def test_a_megatron_script_with_a_model_preset_reads_its_dispatcher_flags(extra: tuple[str, ...],
                                                                          dispatcher: str) -> None:
    """`--model mixtral-8x7b` on a Megatron script: the preset gives the shape, the script's flags the dispatcher
    (it was always the default before)."""
    from llmperf_hook.frameworks.resolve import JobOverrides

    argv = ["torchrun", "--nnodes", "8", "--nproc-per-node", "8", "pretrain_gpt.py", "--expert-model-parallel-size",
            "8", "--micro-batch-size", "1", "--global-batch-size", "256", "--bf16", "--seq-length", "4096", *extra]
    pred = predict_command(argv, {}, cluster="dgx-h100", overrides=JobOverrides(model="mixtral-8x7b"))
    assert pred.config.model.num_experts == 8 and pred.config.model.moe_dispatch.token_dispatcher == dispatcher
