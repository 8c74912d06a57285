"""DeepSpeed's own estimators against our model states (issue 3): estimate_zero2_model_states_mem_needs /
estimate_zero3_model_states_mem_needs imported from the installed deepspeed (runtime/zero/stage_1_and_2.py,
stage3.py), on the DeepSpeed rows of test_memory_reference.py's table, run through our whole resolve path; the
real allocation has two phases (backward, optimizer step) where the estimators count every byte as always alive,
and the differences are stated as named terms."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph.build import build_graph, ranks_per_node
from llmperf_hook.schedule.memory import estimate_memory
from tests.schedule.test_memory_reference import DEEPSPEED_CASES, STATE_PARTS, Case, Resolved, resolve

@dataclass(frozen=True)
class DeepSpeedExpectation:
    """DeepSpeed's estimator figure and what ours should be in each phase of the step."""

    estimator_bytes: float | None
    """estimate_zero{2,3}_model_states_mem_needs' GPU bytes (None: no estimator for this stage)."""
    backward_bytes: float
    """Expected weights + gradients + optimizer states while the backward runs (ours: state_bytes)."""
    step_bytes: float
    """Expected weights + optimizer states + gradient bytes while the optimizer steps (ours: optimizer_step_bytes)."""
    note: str
    """The documented differences."""


def deepspeed_state_expected(r: Resolved) -> DeepSpeedExpectation:
    """DeepSpeed's estimators count every model-state byte as always alive; the real allocation has two phases.
    With P parameters over N ranks, stage_1_and_2.py / stage3.py hold during the backward 2 (16-bit weights; /N at
    ZeRO-3) + 2 (16-bit gradients: ZeRO-1 the whole model's param.grad, ZeRO-2/3 the partition) + 12/N (fp32 master,
    Adam m and v), and during the step the 16-bit gradient partition, its flattened copy and its fp32 cast (2 + 2 + 4
    per parameter of the partition; ZeRO-3 per sub-group), freed afterwards. The estimators' 18 is 2 grads16 + 4
    grads32 + 4 params32 + 8 Adam (ZeRO-3: the 16-bit parameter partition is not in it)."""
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    cfg, o = r.cfg, r.cfg.optimizer
    total, n = total_params(r), cfg.world_size
    offload = o.offload_optimizer != "none"
    if o.zero_stage in (1, 2):
        _, gpu = estimate_zero2_model_states_mem_needs(total, num_gpus_per_node=cfg.nproc_per_node,
                                                       num_nodes=cfg.nnodes, cpu_offload=offload)
        if offload:  # 16-bit weights only: gradients go straight to the host partition
            return DeepSpeedExpectation(gpu, gpu, gpu, "-")
        step = gpu + 2 * total / n  # + the flattened 16-bit partition the cast reads
        if o.zero_stage == 2:
            return DeepSpeedExpectation(gpu, gpu - 4 * total / n, step, "fp32 grads at step only; flat copy")
        # No ZeRO-1 estimator: the ZeRO-2 one with ZeRO-1's whole-model 16-bit gradients during the backward.
        return DeepSpeedExpectation(None, gpu - 6 * total / n + 2 * total, step, "zero2 estimator, full grads16")
    if o.zero_stage == 3:
        largest = largest_module_params(cfg)
        _, gpu, largest_bytes = estimate_zero3_model_states_mem_needs(
            total, largest, num_gpus_per_node=cfg.nproc_per_node, num_nodes=cfg.nnodes, cpu_offload=offload,
            cpu_offload_params=o.offload_param != "none")
        states = gpu - largest_bytes  # the gathered largest module: ours is zero3_live_params, a buffer
        if offload:
            return DeepSpeedExpectation(gpu, states, states, "largest module in buffers")
        backward = states - 4 * total / n + 2 * total / n  # no fp32 grads; the 16-bit parameter partition
        sub = min(total / n, o.sub_group_size_elems)
        return DeepSpeedExpectation(gpu, backward, backward + 6 * sub, "largest module in buffers; params16 2; "
                                    "fp32 grads + flat copy per sub-group at step")
    raise AssertionError(f"ZeRO-{o.zero_stage} has no DeepSpeed estimator")


def our_deepspeed_phases(r: Resolved) -> tuple[float, float]:
    """(our weights + gradients + optimizer states during the backward, the same during the step)."""
    from llmperf_hook.schedule.memory import optimizer_step_bytes

    stage = build_graph(r.cfg, r.cluster).stages[0]
    s = r.stage_states[0]
    step = optimizer_step_bytes(r.cfg, stage, ranks_per_node(r.cfg, r.cluster))
    return sum(s[k] for k in STATE_PARTS), s["weights"] + s["optimizer_states"] + (step or s["gradients"])


def total_params(r: Resolved) -> float:
    """Parameters of the model (pp = tp = 1 for the DeepSpeed rows: the first stage holds all)."""
    assert r.cfg.parallel.pp == 1 and r.cfg.parallel.tp == 1
    from llmperf_hook.graph.build import build_graph as build

    return float(build(r.cfg, r.cluster).stages[0].num_params)


def largest_module_params(cfg: TrainingConfig) -> int:
    """model_to_params' largest module (its own parameters, recurse=False) of a Hugging Face decoder: the word
    embedding or the LM head, v x h, or a routed expert's projection if larger."""
    m = cfg.model
    return max(m.vocab_size * m.hidden_size, m.hidden_size * m.ffn_hidden_size)


@pytest.fixture(scope="module")
def resolved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Resolved]:
    root = tmp_path_factory.mktemp("memory_reference_deepspeed")
    return {c.name: resolve(c, root / str(i)) for i, c in enumerate(DEEPSPEED_CASES)}


@pytest.mark.parametrize("case", DEEPSPEED_CASES, ids=lambda c: c.name)
def test_deepspeed_model_state_bytes_in_both_phases(case: Case, resolved: dict[str, Resolved]) -> None:
    r = resolved[case.name]
    want = deepspeed_state_expected(r)
    backward, step = our_deepspeed_phases(r)
    assert backward == pytest.approx(want.backward_bytes, rel=1e-6)
    assert step == pytest.approx(want.step_bytes, rel=1e-6)


def test_zero2_estimator_is_the_step_phase_less_the_flat_copy(resolved: dict[str, Resolved]) -> None:
    r = resolved["llama2-7b zero2"]
    want = deepspeed_state_expected(r)
    _, step = our_deepspeed_phases(r)
    assert step - want.estimator_bytes == pytest.approx(2 * total_params(r) / r.cfg.world_size, rel=1e-6)


@pytest.mark.parametrize("name", ["llama2-13b zero3", "llama2-13b zero3 offload opt",
                                  "llama2-70b zero3 offload opt+param"])
def test_zero3_gathered_parameters_cover_the_estimators_largest_module(name: str,
                                                                       resolved: dict[str, Resolved]) -> None:
    """The estimator's 4 x largest module (its gathered 16-bit weights and their 16-bit gradient): ours holds the
    live gathered layers (zero3_live_params) and the gradient in the reduce bucket (zero_buckets)."""
    r = resolved[name]
    mem = estimate_memory(r.cfg, build_graph(r.cfg, r.cluster), r.cluster)
    assert mem.components["zero3_live_params"] >= 2 * largest_module_params(r.cfg)
    assert mem.components["zero_buckets"] >= 2 * largest_module_params(r.cfg)


def test_one_gpu_zero1_peaks_at_the_step_with_22_bytes_per_parameter() -> None:
    """The measured H100 run c06 (measurements/h100-sxm5-80gb-2026-11-26: DeepSpeed 0.19.8 ZeRO-1 bf16 on one GPU, 4
    layers of h 6144, 2.13 B parameters) peaked at 47.01 GB allocated = 22.03 bytes per parameter, after the step
    14.03 (2 weights + 12 Adam): the step's 16-bit gradients, their flat copy and the fp32 cast (2 + 2 + 4) on top.
    Its backward (16 bytes per parameter + 4.3 GB of activations) is smaller, so ours is the step phase."""
    from llmperf_hook.graph.sample_configs import make_config
    from llmperf_hook.hardware.load import load_cluster

    cluster = load_cluster("dgx-h100")
    cfg = make_config(num_layers=4, hidden_size=6144, num_attention_heads=48, seq_length=2048, vocab_size=50304,
                      micro_batch_size=2, framework="deepspeed", optimizer_kw=dict(zero_stage=1))
    graph = build_graph(cfg, cluster)
    mem = estimate_memory(cfg, graph, cluster)
    params = graph.stages[0].num_params
    fixed = mem.components["cuda_context"] + mem.components["nccl_buffers"]
    allocated = mem.peak_bytes_per_gpu - mem.components["allocator_fragmentation"]  # less the allocator's reserve
    assert allocated == pytest.approx(22 * params + fixed, rel=1e-9)
    assert mem.components["optimizer_step_working_set"] > 0
    assert sum(mem.components.values()) == mem.peak_bytes_per_gpu


@settings(max_examples=40, deadline=None)
@given(zero=st.integers(0, 3), dp=st.sampled_from([1, 2, 8]), mbs=st.integers(1, 8),
       offload=st.sampled_from(["none", "cpu"]), precision=st.sampled_from(["bf16", "fp16", "fp32"]))
def test_peak_is_the_larger_of_backward_and_step(zero: int, dp: int, mbs: int, offload: str, precision: str) -> None:
    """Whatever the layout, the components sum to the peak, and its allocated bytes (the peak less the allocator's
    reserve) are the backward's (state + buffers + transients; no gradients where the backward starts without them)
    or the step's (weights + optimizer states + the step's gradient bytes + persistent buffers), whichever is
    larger."""
    from llmperf_hook.graph.sample_configs import make_config
    from llmperf_hook.hardware.load import load_cluster
    from llmperf_hook.schedule.memory import backward_starts_without_gradients, optimizer_step_bytes, state_bytes

    cluster = load_cluster("dgx-h100")
    cfg = make_config(num_layers=4, hidden_size=2048, num_attention_heads=16, seq_length=1024, dp=dp,
                      micro_batch_size=mbs, global_batch_size=mbs * dp, precision=precision, framework="deepspeed",
                      optimizer_kw=dict(zero_stage=zero, offload_optimizer=offload if zero else "none"))
    graph = build_graph(cfg, cluster)
    mem = estimate_memory(cfg, graph, cluster)
    c = dict(mem.components)
    assert sum(c.values()) == mem.peak_bytes_per_gpu
    allocated = mem.peak_bytes_per_gpu - c.pop("allocator_fragmentation")
    top_up = c.pop("optimizer_step_working_set", 0)
    no_grads = backward_starts_without_gradients(cfg)
    later = top_up + (c["gradients"] if no_grads else 0)  # what the step holds beyond the backward
    backward = sum(c.values()) - (c["gradients"] if no_grads else 0)
    persistent = sum(v for k, v in c.items() if k in ("weights", "optimizer_states", "cuda_context", "nccl_buffers"))
    persistent += c.get("zero_buckets", 0) if zero == 3 else 0
    gradients = state_bytes(cfg, graph.stages[0], 8)["gradients"]
    step = persistent + max(optimizer_step_bytes(cfg, graph.stages[0], 8), gradients)
    assert allocated == pytest.approx(max(backward, step), abs=16)
    assert (later > 16) == (step > backward + 16)


@pytest.mark.parametrize("zero, precision, overlap, elem_bytes, buffers", [
    (1, "fp16", False, 4, 1),  # use_grad_accum_attribute: ZeRO-1 stages the fp32 accumulator
    (1, "fp16", True, 4, 2),   # a second bucket with overlap_comm
    (2, "bf16", False, 2, 1),  # ZeRO-2 keeps low-precision staging whatever grad_accum_dtype says
    (2, "bf16", True, 2, 2),
    (3, "bf16", True, 2, 1),   # stage3.py: one bucket per parameter dtype, allocated once
])
def test_reduce_bucket_is_in_deepspeeds_reduction_dtype(zero: int, precision: str, overlap: bool, elem_bytes: int,
                                                         buffers: int) -> None:
    """grad_accum_dtype fp32 under a 16-bit model: stage_1_and_2.py setup_buckets allocates reduce_bucket_size
    elements of _gradient_reduction_buffer_dtype(), the fp32 accumulation dtype only where use_grad_accum_attribute
    is set (it differs from the model's dtype and `not self.partition_gradients`: ZeRO-1), the model's dtype at
    ZeRO-2; ZeRO-3 allocates its bucket in the parameters' dtype."""
    from llmperf_hook.graph.sample_configs import make_config
    from llmperf_hook.schedule.memory import zero_reduce_bucket_bytes

    cfg = make_config(num_layers=2, hidden_size=1024, num_attention_heads=8, dp=8, precision=precision,
                      framework="deepspeed", optimizer_kw=dict(zero_stage=zero, grad_accum_dtype="fp32",
                                                                overlap_grad_reduce=overlap,
                                                                grad_bucket_size_elems=200_000_000))
    assert zero_reduce_bucket_bytes(cfg) == 200_000_000 * elem_bytes * buffers


@pytest.mark.parametrize("grad_accum_dtype, partition_b, sub_group_b", [
    (None, 2, 2 + 4),    # bf16 partition: its flattened copy, then the fp32 cast
    ("fp32", 4, 4),      # fp32 partition: the flattened copy is the fp32 gradient (.to(fp32) returns it)
])
def test_zero3_step_holds_the_partition_and_one_sub_groups_copies(grad_accum_dtype: str | None, partition_b: int,
                                                                  sub_group_b: int) -> None:
    """stage3.py: grad_partitions_flat_buffer is allocated in gradient_accumulation_dtype; the step prepares one
    sub-group at a time, flatten(averaged_gradients[i]).to(fp32) (_prepare_fp32_grad_for_sub_group), so a rank whose
    partition spans several sub-groups holds the whole partition plus one sub-group's copies."""
    from llmperf_hook.graph.sample_configs import make_config
    from llmperf_hook.hardware.load import load_cluster
    from llmperf_hook.schedule.memory import optimizer_step_bytes

    cluster = load_cluster("dgx-h100")
    cfg = make_config(num_layers=4, hidden_size=2048, num_attention_heads=16, dp=8, framework="deepspeed",
                      optimizer_kw=dict(zero_stage=3, grad_accum_dtype=grad_accum_dtype,
                                        sub_group_size_elems=5_000_000))
    stage = build_graph(cfg, cluster).stages[0]
    sharded = stage.num_params / 8
    assert sharded > 4 * 5_000_000
    step = optimizer_step_bytes(cfg, stage, ranks_per_node(cfg, cluster))
    assert step == pytest.approx(partition_b * sharded + sub_group_b * 5_000_000)
