"""MLA under --transformer-impl local (megatron/core/models/gpt/gpt_layer_specs.py get_gpt_layer_local_submodules:
the down projections are ColumnParallelLinear, not TE's duplicated TELinear). multi_latent_attention.py then gathers
their latent slices over TP in forward (gather_from_tensor_model_parallel_region; backward a split), under SP
scatters them back to the sequence shard (backward an all-gather), and each down projection all-gathers its own
input under SP; the rope key comes out of the kv gather whole, so it is not gathered apart."""

from __future__ import annotations

from llmperf_hook.graph.build import build_graph
from llmperf_hook.hardware.load import load_cluster
from tests.frameworks.helpers import megatron
from tests.graph.test_mla_tp_allreduce import BASE, H, MLA, SEQ, TP

A100 = load_cluster("dgx-a100")
Q_LORA, KV_LORA, ROPE = 1536, 512, 64
# Megatron's own local spec cannot build MLA's core (DotProductAttention takes no k_channels / v_channels:
# megatron_validate_args._check_mla_local_core refuses it), so these run a --spec of that layout whose core does.
LOCAL = ["--q-lora-rank", str(Q_LORA), "--transformer-impl", "local", "--spec", "mla_specs", "local_layer_spec"]


def _attn_comm(*extra: str) -> tuple[list, list]:
    cfg = megatron(*MLA, "--tensor-model-parallel-size", str(TP), "--global-batch-size", "8", *extra, gpus=8,
                   base=BASE)
    block = next(b for b in build_graph(cfg, A100).stages[0].chunks[0].blocks if b.name.startswith("dense_layer"))
    return ([(op.name, op.op_class, op.dims["bytes"]) for op in ops if op.is_comm and op.name.startswith("attn.")]
            for ops in (block.fwd, block.bwd))


def test_local_spec_gathers_the_latent_slices_in_forward_only() -> None:
    fwd, bwd = _attn_comm(*LOCAL)
    assert fwd[:2] == [("attn.q_latent_gather", "allgather", SEQ * Q_LORA * 2),
                       ("attn.kv_latent_gather", "allgather", SEQ * (KV_LORA + ROPE) * 2)]
    assert not [op for op in bwd if "latent" in op[0]]
    # the grad-input all-reduces of the four column-parallel projections are all still there
    assert {name for name, cls, _ in bwd if cls == "allreduce"} == {
        "attn.q_down.dgrad_allreduce", "attn.q_up.dgrad_allreduce", "attn.kv_down.dgrad_allreduce",
        "attn.kv_up.dgrad_allreduce"}


def test_local_spec_under_sequence_parallel() -> None:
    fwd, bwd = _attn_comm(*LOCAL, "--sequence-parallel")
    gathers = {name: nbytes for name, cls, nbytes in fwd if cls == "allgather"}
    assert gathers == {"attn.q_latent_gather": SEQ * Q_LORA * 2, "attn.kv_latent_gather": SEQ * (KV_LORA + ROPE) * 2,
                       "attn.tp_allgather": SEQ * H * 2, "attn.kv_down_allgather": SEQ * H * 2,
                       "attn.q_allgather": SEQ * Q_LORA * 2, "attn.kv_allgather": SEQ * KV_LORA * 2}
    assert ("attn.q_latent_scatter", "allgather", SEQ * Q_LORA * 2) in bwd
    assert ("attn.kv_latent_scatter", "allgather", SEQ * KV_LORA * 2) in bwd
    assert ("attn.kv_down_allgather", "reducescatter", SEQ * H * 2) in bwd


def test_transformer_engine_spec_keeps_its_duplicated_down_projections() -> None:
    fwd, bwd = _attn_comm("--q-lora-rank", str(Q_LORA), "--sequence-parallel")
    names = {name for name, _, _ in fwd + bwd}
    assert "attn.k_rope_allgather" in names
    assert not {n for n in names if "latent" in n or n.startswith("attn.kv_down")}


def test_mtp_depth_layer_scatters_its_latents_too() -> None:
    cfg = megatron(*MLA, "--tensor-model-parallel-size", str(TP), "--global-batch-size", "8", *LOCAL,
                   "--sequence-parallel", "--mtp-num-layers", "1", gpus=8, base=BASE)
    mtp = next(b for b in build_graph(cfg, A100).stages[0].chunks[0].blocks if b.name == "mtp")
    assert {op.name for op in mtp.bwd if op.name.endswith("_latent_scatter")} == {"attn.q_latent_scatter",
                                                                                   "attn.kv_latent_scatter"}
