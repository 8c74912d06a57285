"""Graph of Megatron-Core MLA layers, MTP depths and shared experts: real GEMM shapes with their TP splits, MTP on
the last pipeline stage only, parameters and memory consistent with the graph, and FLOPs as Megatron counts."""

from __future__ import annotations

from dataclasses import replace

from llmperf_hook.api import predict_config
from llmperf_hook.graph import params as pc
from llmperf_hook.graph.build import build_graph
from llmperf_hook.hardware.load import load_cluster
from tests.frameworks.helpers import megatron

H100 = load_cluster("dgx-h100")
H, HEADS, SEQ, TP = 2048, 16, 4096, 2
BASE = ["--num-layers", "8", "--hidden-size", str(H), "--num-attention-heads", str(HEADS), "--seq-length", str(SEQ),
        "--max-position-embeddings", str(SEQ), "--vocab-size", "129280", "--micro-batch-size", "1", "--bf16",
        "--swiglu", "--normalization", "RMSNorm", "--disable-bias-linear", "--position-embedding-type", "rope"]
MLA = ["--multi-latent-attention", "--q-lora-rank", "1536", "--kv-lora-rank", "512", "--qk-head-dim", "128",
       "--qk-pos-emb-head-dim", "64", "--v-head-dim", "128", "--qk-layernorm"]
MOE = ["--num-experts", "16", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "1024", "--expert-model-parallel-size",
       "4", "--moe-shared-expert-intermediate-size", "2048"]


def _cfg(*extra: str, pp: int = 1):
    return megatron(*MLA, "--tensor-model-parallel-size", str(TP), "--sequence-parallel", "--global-batch-size", "64",
                    "--pipeline-model-parallel-size", str(pp), *extra, gpus=8, nodes=4, base=BASE)


def _block(graph, name: str, stage: int = 0):
    return next(b for b in graph.stages[stage].chunks[-1].blocks if b.name.startswith(name))


def test_mla_layer_gemm_shapes_and_tp_collectives() -> None:
    ops = {op.name: op for op in _block(build_graph(_cfg(), H100), "dense_layer").fwd}
    t, local = SEQ, HEADS // TP
    dims = {name: dict(ops[name].dims) for name in ("attn.q_down", "attn.q_up", "attn.kv_down", "attn.kv_up", "attn.proj")}
    assert dims == {  # down projections duplicated on every TP rank, over the rank's own (SP) tokens
        "attn.q_down": {"m": t // TP, "n": 1536, "k": H},
        "attn.q_up": {"m": t, "n": local * (128 + 64), "k": 1536},
        "attn.kv_down": {"m": t // TP, "n": 512 + 64, "k": H},
        "attn.kv_up": {"m": t, "n": local * (128 + 128), "k": 512},
        "attn.proj": {"m": t, "n": H, "k": local * 128},
    }
    gathers = {n: op.dims["bytes"] for n, op in ops.items() if op.op_class == "allgather"}
    assert gathers == {"attn.q_allgather": t * 1536 * 2, "attn.kv_allgather": t * 512 * 2,
                       "attn.k_rope_allgather": t * 64 * 2, "mlp.tp_allgather": t * H * 2}
    core = ops["attn.core"]
    assert core.flops == 2.0 * t * t * local * (192 + 128) * 0.5
    assert ops["attn.q_norm"].dims["hidden"] == 1536 and ops["attn.kv_norm"].dims["hidden"] == 512


def test_without_q_lora_one_q_projection_reads_the_gathered_hidden_states() -> None:
    cfg = megatron("--multi-latent-attention", "--tensor-model-parallel-size", "2", "--sequence-parallel",
                   "--global-batch-size", "8", gpus=8, base=BASE)
    ops = [op.name for op in _block(build_graph(cfg, H100), "dense_layer").fwd]
    assert "attn.q_down" not in ops and ops.index("attn.tp_allgather") < ops.index("attn.q_proj")
    q_proj = next(op for op in _block(build_graph(cfg, H100), "dense_layer").fwd if op.name == "attn.q_proj")
    assert dict(q_proj.dims) == {"m": SEQ, "n": HEADS // 2 * 192, "k": H}


def test_layer_parameters_equal_the_graphs_gemm_weights() -> None:
    cfg = _cfg()
    block = _block(build_graph(cfg, H100), "dense_layer")
    weights = sum(op.dims["n"] * op.dims["k"] for op in block.fwd if op.op_class == "gemm")
    norms = sum(op.dims["hidden"] for op in block.fwd if op.op_class == "rmsnorm")
    assert pc.layer_params(cfg, moe=False) == weights + norms


def test_shared_experts_sit_beside_the_routed_ones_tp_split() -> None:
    cfg = _cfg(*MOE)
    ops = {op.name: op for op in _block(build_graph(cfg, H100), "moe_layer").fwd}
    assert dict(ops["moe.shared_fc1"].dims) == {"m": SEQ, "n": 2 * 2048 // TP, "k": H}
    assert dict(ops["moe.shared_fc2"].dims) == {"m": SEQ, "n": H, "k": 2048 // TP}
    assert ops["moe.shared_tp_reduce"].op_class == "reducescatter"
    without = replace(cfg, model=replace(cfg.model, moe_shared_expert_intermediate_size=0))
    assert pc.moe_dense_params(cfg) - pc.moe_dense_params(without) == 3 * H * 2048 // TP


def test_mtp_runs_on_the_last_pipeline_stage_only() -> None:
    cfg = _cfg(*MOE, "--mtp-num-layers", "2", pp=2)
    graph = build_graph(cfg, H100)
    names = [[b.name for c in s.chunks for b in c.blocks] for s in graph.stages]
    assert "mtp" not in names[0] and names[1][-3:] == ["mtp", "mtp_head", "head"]
    mtp = _block(graph, "mtp", stage=1)
    assert mtp.count == 2 and any(op.name == "moe.router" for op in mtp.fwd)  # the last layer is MoE
    eh = next(op for op in mtp.fwd if op.name == "mtp.eh_proj")
    assert [op.name for op in _block(graph, "mtp_head", stage=1).fwd if op.op_class == "gemm"] == ["mtp.lm_head"]
    assert dict(eh.dims) == {"m": SEQ, "n": H // TP, "k": 2 * H}
    plain = build_graph(replace(cfg, model=replace(cfg.model, mtp_num_layers=0)), H100)
    assert graph.stages[0].num_params == plain.stages[0].num_params
    # depths + the embedding copy the MTP block looks its tokens up in (PP > 1)
    assert graph.stages[1].num_params - plain.stages[1].num_params == pc.mtp_params(cfg)
    assert pc.mtp_params(cfg) == 2 * pc.mtp_depth_params(cfg) + pc.embedding_params(cfg)
    assert graph.stages[1].num_expert_params - plain.stages[1].num_expert_params == 2 * pc.expert_params(cfg)


def test_mtp_memory_and_weights_land_on_the_last_stage() -> None:
    cfg = _cfg(*MOE, "--mtp-num-layers", "1", pp=2)
    with_mtp = predict_config(cfg, H100)
    plain = predict_config(replace(cfg, model=replace(cfg.model, mtp_num_layers=0)), H100)
    last, first = with_mtp.memory.per_stage_peak_bytes, plain.memory.per_stage_peak_bytes
    assert last[0] == first[0] and last[1] > first[1]
    assert with_mtp.step_time_s > plain.step_time_s


def test_model_flops_follow_megatrons_counter() -> None:
    """graph FLOPs = megatron/training/training.py num_floating_point_operations (MLA, MoE with shared experts,
    MTP) + the router GEMMs it leaves out - the norm terms it counts, with the attention core's backward at
    2.5x its forward (graph/backward.py: flash attention recomputes the scores) where Megatron counts 2x."""
    cfg = _cfg(*MOE, "--mtp-num-layers", "1")
    m, tokens = cfg.model, cfg.batch.global_batch_size * SEQ
    n, v = HEADS, m.padded_vocab_size
    attn = (1536 * (H + n * 192 + 1) + 512 * (H + n * 256 + 1) + H * 64 + n * 128 * H) * 6
    core = 6 * (n * 192 / 2 + n * 128 / 2)
    layers = m.num_layers + 1  # every layer MoE, the MTP layer too
    mlp = 6 * H * (1024 * 2 * 3 + 2048 * 3) * layers
    core_flops = tokens * SEQ * core * layers
    megatron_flops = tokens * (mlp + attn * layers + 6 * (3 * H + 2 * H * H) + 6 * H * v * 2) + core_flops
    router = 3 * 2 * tokens * H * m.num_experts * layers
    norms = tokens * 6 * 3 * H + tokens * 6 * (512 + 1536) * layers  # Megatron's "+ 1" and 3h norm terms
    graph = build_graph(cfg, H100)
    expected = megatron_flops + router - norms + core_flops * (3.5 / 3 - 1)
    assert abs(graph.model_flops_per_step - expected) / expected < 1e-6


def test_mla_activation_terms_are_the_saved_tensors() -> None:
    """schedule/activations.py under MLA: latents (q 1536, kv 512, rope key 64, and the two latent norm inputs)
    replace nothing of the 10sbh; Q/K (192 per head), V and the projection input (128 per head) replace QKV."""
    from llmperf_hook.schedule.activations import layer_terms

    cfg = _cfg()
    plain = replace(cfg, model=replace(cfg.model, multi_latent_attention=False))
    sb = SEQ * 1
    rep, split, _ = layer_terms(cfg)
    rep0, split0, _ = layer_terms(plain)
    assert rep - rep0 == 2 * sb * (1536 + 512 + 64 + 1536 + 512)
    assert split - split0 == 2 * sb * HEADS * (2 * 192 + 128 + 128) - 2 * sb * H * (1 + 2 + 1)


def test_a_new_layout_keeps_the_model_and_tune_apply_keeps_the_flags() -> None:
    from click.testing import CliRunner

    from llmperf_hook.cli import cli
    from llmperf_hook.frameworks.relayout import with_layout

    cfg = _cfg(*MOE, "--mtp-num-layers", "1")
    moved = with_layout(cfg, tp=4, micro_batch_size=2)
    assert moved.model == replace(cfg.model, padded_vocab_size=moved.model.padded_vocab_size)
    argv = ["torchrun", "--nnodes", "4", "--nproc-per-node", "8", "pretrain_gpt.py", *BASE, *MLA, *MOE,
            "--mtp-num-layers", "1", "--tensor-model-parallel-size", "2", "--sequence-parallel",
            "--global-batch-size", "64"]
    out = CliRunner().invoke(cli, ["tune", "--apply", "--dry-run", "--top", "1", "--cluster", "dgx-h100", "--", *argv])
    assert out.exit_code == 0, out.output
    command = next(line for line in out.output.splitlines() if "would run:" in line)
    for flag in ("--multi-latent-attention", "--q-lora-rank 1536", "--kv-lora-rank 512", "--mtp-num-layers 1",
                 "--moe-shared-expert-intermediate-size 2048", "--qk-layernorm"):
        assert flag in command, flag
