"""Activation memory against Korthikanti et al. 2022 (arXiv 2205.05198), and memory properties."""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.sample_configs import make_config
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.schedule.activations import layer_activation_bytes
from llmperf_hook.schedule.memory import estimate_memory

DGX = load_cluster("dgx-a100")

# Table 3 of the paper: model configurations of the evaluation (seq 2048, micro-batch 1, TP 8).
PAPER_MODELS = {
    "22B": dict(num_layers=48, hidden_size=6144, num_attention_heads=64, pp=1),
    "175B": dict(num_layers=96, hidden_size=12288, num_attention_heads=96, pp=8),
    "530B": dict(num_layers=105, hidden_size=20480, num_attention_heads=128, pp=35),
    "1T": dict(num_layers=128, hidden_size=25600, num_attention_heads=160, pp=64),
}


def _cfg(model: str, *, sp: bool, recompute: str, t: int = 8, vpp: int = 1, mbs: int = 1):
    kw = PAPER_MODELS[model]
    return make_config(seq_length=2048, tp=t, dp=1, sequence_parallel=sp, recompute=recompute, vpp=vpp,
                       micro_batch_size=mbs, global_batch_size=mbs * kw["pp"] * 2, attention_backend="unfused", **kw)


def _table2(model: str, case: str, t: int = 8) -> float:
    """Table 2 of the paper, bytes per layer: sbh * (coefficient)."""
    kw = PAPER_MODELS[model]
    s, b, h, a = 2048, 1, kw["hidden_size"], kw["num_attention_heads"]
    sbh = s * b * h
    return {
        "none": sbh * (34 + 5 * a * s / h),
        "tp": sbh * (10 + 24 / t + 5 * a * s / (h * t)),
        "tp_sp": sbh * (34 / t + 5 * a * s / (h * t)),
        "tp_selective": sbh * (10 + 24 / t),
        "tp_sp_selective": sbh * (34 / t),
        "full": 2 * sbh,
    }[case]


CASES = [("none", 1, False, "none"), ("tp", 8, False, "none"), ("tp_sp", 8, True, "none"),
         ("tp_selective", 8, False, "selective"), ("tp_sp_selective", 8, True, "selective"), ("full", 8, False, "full")]


@pytest.mark.parametrize("model", sorted(PAPER_MODELS))
@pytest.mark.parametrize("case,t,sp,recompute", CASES)
def test_table2_per_layer_activations(model: str, case: str, t: int, sp: bool, recompute: str) -> None:
    cfg = _cfg(model, sp=sp, recompute=recompute, t=t)
    assert layer_activation_bytes(cfg) == pytest.approx(_table2(model, case, t), rel=1e-12)


@pytest.mark.parametrize("model", ["175B", "530B", "1T"])
def test_sp_plus_selective_cuts_activations_about_5x(model: str) -> None:
    """Abstract and Sec. 5: sequence parallelism + selective recompute reduce activation memory ~5x vs TP alone."""
    base = layer_activation_bytes(_cfg(model, sp=False, recompute="none"))
    best = layer_activation_bytes(_cfg(model, sp=True, recompute="selective"))
    assert 4.5 < base / best < 6.5


@pytest.mark.parametrize("model", sorted(PAPER_MODELS))
@pytest.mark.parametrize("sp,recompute", [(False, "none"), (True, "none"), (True, "selective")])
def test_first_stage_total_matches_paper_section_4_2_3(model: str, sp: bool, recompute: str) -> None:
    """Sec. 4.2.3: the first stage holds p micro-batches of L/p layers = L layers' activations, plus the
    input-embedding dropout mask sbhp (/t with SP); interleaving multiplies by 1 + (p - 1) / (p v)."""
    cfg = _cfg(model, sp=sp, recompute=recompute)
    kw = PAPER_MODELS[model]
    p, L, h = kw["pp"], kw["num_layers"], kw["hidden_size"]
    per_layer = layer_activation_bytes(cfg)
    paper = per_layer * L + 2048 * h * p / (8 if sp else 1)
    mem = estimate_memory(cfg, build_graph(cfg, DGX), DGX)
    stage0 = mem.components if mem.stage == 0 else None
    graph = build_graph(cfg, DGX)
    from llmperf_hook.schedule.memory import stage_memory

    parts = stage0 or stage_memory(cfg, graph.stages[0], 8)
    ours = parts["activations"] + parts.get("embedding_activations", 0)
    assert ours == pytest.approx(paper, rel=0.05)


def test_interleaving_factor() -> None:
    plain = _cfg("175B", sp=True, recompute="selective")
    inter = _cfg("175B", sp=True, recompute="selective", vpp=3)
    from llmperf_hook.schedule.memory import stage_memory

    a = stage_memory(plain, build_graph(plain, DGX).stages[0], 8)["activations"]
    b = stage_memory(inter, build_graph(inter, DGX).stages[0], 8)["activations"]
    p, v = 8, 3
    assert b / a == pytest.approx(1 + (p - 1) / (p * v), rel=1e-6)


@settings(max_examples=30, deadline=None)
@given(mbs=st.integers(1, 8), tp=st.sampled_from([1, 2, 4]), pp=st.sampled_from([1, 2, 4]),
       recompute=st.sampled_from(["none", "selective", "full"]), sp=st.booleans(), zero=st.integers(0, 3))
def test_peak_memory_non_decreasing_in_micro_batch(mbs: int, tp: int, pp: int, recompute: str, sp: bool,
                                                   zero: int) -> None:
    def peak(b: int) -> int:
        cfg = make_config(num_layers=8, hidden_size=1024, num_attention_heads=16, seq_length=1024, tp=tp, pp=pp,
                          dp=2, micro_batch_size=b, global_batch_size=b * 2 * 8, recompute=recompute,
                          sequence_parallel=sp and tp > 1, framework="deepspeed" if zero else "megatron",
                          optimizer_kw=dict(zero_stage=zero))
        return estimate_memory(cfg, build_graph(cfg, DGX), DGX).peak_bytes_per_gpu

    assert peak(mbs) <= peak(mbs + 1)


def test_optimizer_sharding_and_offload_shrink_state() -> None:
    """The rank's model state shrinks with every ZeRO stage (memory.state_bytes: the peak's components count only the
    gradients alive at the peak, none where DeepSpeed's backward starts without them)."""
    from llmperf_hook.graph.build import ranks_per_node
    from llmperf_hook.schedule.memory import state_bytes

    base = make_config(num_layers=8, hidden_size=2048, num_attention_heads=16, dp=8, framework="deepspeed")
    sizes = {}
    for zero in range(4):
        cfg = replace(base, optimizer=replace(base.optimizer, zero_stage=zero))
        state = state_bytes(cfg, build_graph(cfg, DGX).stages[0], ranks_per_node(cfg, DGX))
        sizes[zero] = state["weights"] + state["gradients"] + state["optimizer_states"]
    assert sizes[0] > sizes[1] > sizes[2] > sizes[3]
    off = replace(base, optimizer=replace(base.optimizer, zero_stage=2, offload_optimizer="cpu"))
    assert estimate_memory(off, build_graph(off, DGX), DGX).components["optimizer_states"] == 0


def test_fits_verdict_against_capacity() -> None:
    cfg = make_config(num_layers=96, hidden_size=12288, num_attention_heads=96, tp=8, dp=1, global_batch_size=1)
    mem = estimate_memory(cfg, build_graph(cfg, DGX), DGX)  # 175B on one 8-GPU node: 22B params per GPU
    assert not mem.fits and mem.headroom_bytes < 0 and mem.capacity_bytes == 80 * 2**30


def test_recompute_methods_block_and_uniform() -> None:
    from dataclasses import replace

    from llmperf_hook.schedule.activations import chunk_layer_bytes

    base = make_config(num_layers=8, hidden_size=1024, num_attention_heads=16, seq_length=1024, recompute="full")
    full_one = layer_activation_bytes(base)
    none_one = layer_activation_bytes(replace(base, recompute=replace(base.recompute, granularity="none")))
    uniform2 = replace(base, recompute=replace(base.recompute, method="uniform", num_layers=2))
    block3 = replace(base, recompute=replace(base.recompute, method="block", num_layers=3))
    assert chunk_layer_bytes(uniform2, 8) == pytest.approx(4 * full_one)
    assert chunk_layer_bytes(block3, 8) == pytest.approx(3 * full_one + 5 * none_one)
    peak = lambda c: estimate_memory(c, build_graph(c, DGX), DGX).peak_bytes_per_gpu  # noqa: E731
    assert peak(block3) > peak(uniform2)
