"""The sampling plan: space-filling, interleaved across classes, job shapes first, with a stated cost."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmperf_hook.profile import plan
from llmperf_hook.profile.features import RooflineConstants
from llmperf_hook.profile.sampler import _local_cluster

RC = RooflineConstants(1e11, 1e10, 1, 4)


@settings(max_examples=30, deadline=None)
@given(st.integers(4, 64), st.integers(0, 1000))
def test_latin_hypercube_fills_every_log_stratum(n: int, seed: int) -> None:
    lo, hi = 64.0, 4096.0
    pts = plan.latin_hypercube({"m": (lo, hi)}, n, np.random.default_rng(seed))
    u = np.array([(math.log(p["m"]) - math.log(lo)) / (math.log(hi) - math.log(lo)) for p in pts])
    strata = np.clip(np.floor(u * n + 1e-9), 0, n - 1)
    # rounding to multiples of 8 may move a point into a neighbouring stratum, never further
    assert len(set(strata)) >= n * 0.7
    assert all(p["m"] % 8 == 0 and lo * 0.9 <= p["m"] <= hi * 1.1 for p in pts)


def test_design_interleaves_classes_and_directions() -> None:
    specs = plan.design_specs(("gemm", "optimizer", "attention"), plan.CPU_RANGES, 5)
    first = [(s.op_class, s.phase) for s in specs[:5]]
    assert first == [("gemm", "fwd"), ("gemm", "bwd"), ("optimizer", "fwd"), ("attention", "fwd"), ("attention", "bwd")]
    assert all(s.dims["kv_heads"] == s.dims["heads"] and s.dims["causal"] == 1 for s in specs if s.op_class == "attention")
    cost = plan.plan_cost(specs, RC)
    assert cost.num_samples == 25 and cost.device_minutes > 0


def test_job_shapes_and_neighbours_come_from_the_graph() -> None:
    argv = ("torchrun --nproc-per-node 2 pretrain_gpt.py --num-layers 2 --hidden-size 256 --num-attention-heads 4 "
            "--seq-length 256 --max-position-embeddings 256 --micro-batch-size 2 --global-batch-size 8 "
            "--vocab-size 1000").split()
    specs = plan.job_specs(argv, {}, _local_cluster("x", RC))
    job = {(s.op_class, s.phase, tuple(sorted(s.dims.items()))) for s in specs if s.origin == "job"}
    # the job's QKV projection: m = micro-batch x sequence = 512 tokens, k = hidden, n = 3 x hidden
    assert ("gemm", "fwd", (("k", 256.0), ("m", 512.0), ("n", 768.0))) in job
    assert ("gemm", "bwd", (("k", 256.0), ("m", 512.0), ("n", 768.0))) in job
    neighbour_m = {s.dims["m"] for s in specs if s.origin == "neighbour" and s.op_class == "gemm"}
    assert {256.0, 1024.0} <= neighbour_m  # micro-batch 1 and 4
    assert {s.op_class for s in specs} >= {"gemm", "attention", "layernorm", "embedding", "cross_entropy", "optimizer"}


def test_adaptive_round_proposes_in_range_shapes_per_class_and_direction() -> None:
    from llmperf_hook.profile.build_profile import Samples
    from llmperf_hook.profile.sampler import ProfileRequest, _adaptive_specs

    rng = np.random.default_rng(0)
    el = np.exp(rng.uniform(np.log(4096), np.log(8 << 20), 30))
    groups = {("gelu", ph, "fp32"): Samples("gelu", ph, {"elements": el}, el * 4e-10 * (1 + 0.1 * rng.random(30)))
              for ph in ("fwd", "bwd")}
    specs = _adaptive_specs(groups, ProfileRequest(device="cpu"), RC, per_class=5, seed=1)
    assert sorted((s.op_class, s.phase) for s in specs) == [("gelu", "bwd")] * 5 + [("gelu", "fwd")] * 5
    lo, hi = plan.CPU_RANGES["gelu"]["elements"]
    assert all(lo * 0.9 <= s.dims["elements"] <= hi * 1.1 and s.origin == "adaptive" for s in specs)


def test_fit_groups_take_this_device_and_instrumented_runs_only(tmp_path) -> None:
    from llmperf_hook.profile.sampler import _samples_by_class
    from llmperf_hook.store import OpSampleRecord, open_store

    d = {"tokens": 128, "hidden": 64}
    with open_store(tmp_path / "s.sqlite") as store:
        store.record_op_samples([
            OpSampleRecord("cpu-x", "fp32", "layernorm", "fwd", d, 1e-5, "sampler", "fp-A"),
            OpSampleRecord("cpu-x", "fp32", "layernorm", "fwd", {**d, "hidden": 128}, 2e-5, "sampler", "fp-B"),
            OpSampleRecord("cpu-x", "fp32", "layernorm", "fwd", {**d, "hidden": 256}, 4e-5, "instrument:job1"),
            OpSampleRecord("cpu-x", "fp32", "layernorm", "fwd", {"tokens": 5}, 4e-5, "instrument:job1"),
        ])
        groups = _samples_by_class(store, "cpu-x", None, "fp-A")
    s = groups[("layernorm", "fwd", "fp32")]
    assert sorted(s.dims["hidden"]) == [64.0, 256.0]  # other fingerprint and incomplete dims left out


def test_maximin_subset_skips_repeats_and_covers_the_space() -> None:
    import numpy as np

    from llmperf_hook.profile.plan import maximin_subset

    grid = np.array([[a, b] for a in range(10) for b in range(10)], dtype=float)
    points = np.concatenate([grid, grid[:50]])  # half the shapes measured twice
    idx = maximin_subset(points, 100, seed=3)
    assert len(set(idx.tolist())) == 100
    assert len({tuple(p) for p in points[idx]}) == 100  # every distinct shape before any repeat

    def covering_radius(sel: np.ndarray) -> float:
        return float(np.max(np.min(np.linalg.norm(points[:, None, :] - points[None, sel, :], axis=2), axis=1)))

    rng = np.random.default_rng(0)
    random_radius = min(covering_radius(rng.choice(len(points), 16, replace=False)) for _ in range(20))
    for seed in range(5):  # within 2x of the optimum (Gonzalez): better than the best of 20 random draws
        assert covering_radius(maximin_subset(points, 16, seed)) < random_radius


def test_gpu_attention_design_samples_grouped_query_attention() -> None:
    """The H100 profile of 26 Nov had only kv_heads = heads: GQA models extrapolated on that feature."""
    from llmperf_hook.profile.plan import GPU_RANGES, design_specs

    specs = [s for s in design_specs(["attention"], GPU_RANGES, 64) if s.phase == "fwd"]
    groups = {int(s.dims["heads"]) // int(s.dims["kv_heads"]) for s in specs}
    assert groups == {1, 2, 4, 8}
    assert all(int(s.dims["heads"]) % int(s.dims["kv_heads"]) == 0 and "kv_group" not in s.dims for s in specs)


def test_fit_first_puts_a_fittable_block_of_every_class_first() -> None:
    """A short budget measures whole blocks of MIN_SAMPLES_TO_FIT per class (GEMM first), so it fits the leading
    classes instead of leaving every class a few samples short (0.3 min on all classes fitted none)."""
    from llmperf_hook.profile.sampler import MIN_SAMPLES_TO_FIT, ProfileRequest, _specs

    design = plan.design_specs(("gemm", "optimizer", "attention"), plan.CPU_RANGES, 12)
    ordered = plan.fit_first(design, 8)
    assert sorted(map(id, ordered)) == sorted(map(id, design))  # a reordering, nothing lost or added
    keys = [(s.op_class, s.phase) for s in ordered]
    assert keys[:8] == [("gemm", "fwd")] * 8 and keys[8:16] == [("gemm", "bwd")] * 8
    assert keys[16:24] == [("optimizer", "fwd")] * 8 and keys[24:40] == [("attention", "fwd")] * 8 + [("attention", "bwd")] * 8
    assert keys[40:45] == [("gemm", "fwd"), ("gemm", "bwd"), ("optimizer", "fwd"), ("attention", "fwd"), ("attention", "bwd")]
    specs = _specs(ProfileRequest(ops=("layernorm", "gemm")), ("layernorm", "gemm"), RC, "x")
    assert [(s.op_class, s.phase) for s in specs[:MIN_SAMPLES_TO_FIT]] == [("layernorm", "fwd")] * MIN_SAMPLES_TO_FIT


def test_ops_option_is_case_insensitive_and_deduplicated() -> None:
    from llmperf_hook.commands.profile import _ops

    assert _ops(None) == () and _ops("GEMM, gemm,LayerNorm") == ("gemm", "layernorm")


def test_for_job_samples_in_the_jobs_precision(capsys) -> None:
    """`profile --for -- <bf16 job>` without --dtype sampled fp32 on CPU, so `predict` of that bf16 job found no
    fitted model for its dtype; the job's precision is the default now, and --model reaches the job's resolution."""
    import pytest

    from llmperf_hook.cli import main
    from llmperf_hook.commands.profile import _job_dtype

    argv = ("torchrun --nproc-per-node 2 pretrain_gpt.py --num-layers 2 --hidden-size 256 --num-attention-heads 4 "
            "--seq-length 256 --max-position-embeddings 256 --micro-batch-size 2 --global-batch-size 8 "
            "--vocab-size 1000").split()
    assert _job_dtype(tuple(argv + ["--bf16"]), None) == "bf16" and _job_dtype(tuple(argv + ["--fp16"]), None) == "fp16"
    assert _job_dtype((), None) is None and _job_dtype((), None, "fp16") == "fp16"
    capsys.readouterr()
    assert _job_dtype(tuple(argv + ["--bf16"]), None, "bf16") == "bf16" and "note" not in capsys.readouterr().err
    assert _job_dtype(tuple(argv + ["--bf16"]), None, "fp32") == "fp32"  # --dtype wins, and the mismatch is said
    assert "computes in bf16" in capsys.readouterr().err
    plain = ("python", "train.py")
    assert plan.job_precision(plain, {}, "llama2-7b") in ("fp32", "bf16", "fp16")
    specs = plan.job_specs(plain, {}, _local_cluster("x", RC), "llama2-7b")
    assert any(s.op_class == "gemm" and 4096 in s.dims.values() for s in specs)
    with pytest.raises(SystemExit) as exc:
        main(["profile", "--device", "cpu", "--model", "llama2-7b"])
    assert exc.value.code == 2 and "only used with --for" in capsys.readouterr().err


def test_allocation_estimate_counts_tables_and_backward() -> None:
    """A --for job of a large model on a CPU spent the budget allocating and filling tensors (an embedding table of
    50k x 12k is 2.5 GB) that the time estimate ignored; the sampler now knows each spec's tensor sizes."""
    emb = plan.SampleSpec("embedding", "fwd", {"tokens": 2048, "vocab": 50257, "hidden": 12288}, "job")
    assert plan.alloc_elements(emb) == 50257 * 12288 + 2048 * 12288
    gemm = plan.SampleSpec("gemm", "fwd", {"m": 64, "n": 128, "k": 32}, "design")
    assert plan.alloc_elements(gemm) == 64 * 32 + 32 * 128 + 64 * 128
    assert plan.alloc_elements(plan.SampleSpec("gemm", "bwd", gemm.dims, "design")) == 2 * plan.alloc_elements(gemm)
    for cls, ranges in plan.CPU_RANGES.items():  # every class has an estimate, and the design fits a small machine
        hi = plan.complete_dims(cls, {k: v[1] for k, v in ranges.items()})
        assert 0 < plan.alloc_elements(plan.SampleSpec(cls, "bwd", hi, "design")) * 4 < 4 * 2**30, cls
    assert plan.estimate_seconds(emb, RC) > emb.dims["vocab"] * emb.dims["hidden"] * 4 / plan.INIT_BYTES_PER_S


def test_for_a_deepspeed_launch_without_num_gpus_takes_nproc_per_node(capsys) -> None:
    """`deepspeed train.py` without --num_gpus starts one process per GPU of the job's machine, which the command
    does not say: the resolver's error tells the user to give llmperf's --nproc-per-node, which `profile` lacked
    (click: no such option)."""
    import pytest

    from llmperf_hook.cli import main
    from llmperf_hook.commands.profile import _job_dtype
    from llmperf_hook.errors import LlmperfError
    from llmperf_hook.resources import configs_dir

    testbed = configs_dir().parent / "examples" / "cpu-testbed"
    argv = ("deepspeed", str(testbed / "train_gpt.py"), "--deepspeed_config", str(testbed / "ds_zero1.json"),
            *"--num-layers 2 --hidden-size 128 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 "
             "--micro-batch-size 2 --global-batch-size 4 --vocab-size 1024".split())
    with pytest.raises(LlmperfError, match="--nproc-per-node"):
        plan.job_specs(argv, {}, _local_cluster("x", RC))
    specs = plan.job_specs(argv, {}, _local_cluster("x", RC), nproc_per_node=2)
    assert {"m": 256.0, "n": 384.0, "k": 128.0} in [dict(s.dims) for s in specs if s.origin == "job"]
    assert _job_dtype(argv, None, nproc_per_node=2) == "fp32"
    for args in (["--nproc-per-node", "2"], ["--nnodes", "2"]):
        with pytest.raises(SystemExit) as exc:
            main(["profile", "--device", "cpu", *args])
        assert exc.value.code == 2 and "only used with --for" in capsys.readouterr().err


def test_plan_cost_uses_the_devices_measured_slowdown() -> None:
    """The stated cost took every op at 2x its roofline time; a CPU's bf16 cross-entropy backward runs ~32x, so a
    resumed plan of such shapes was stated several times too short. Stored samples now set each class's factor."""
    from llmperf_hook.profile.build_profile import Samples
    from llmperf_hook.profile.features import build_features

    specs = [s for s in plan.design_specs(("softmax",), plan.CPU_RANGES, 8) if s.phase == "fwd"]
    dims = {k: np.array([s.dims[k] for s in specs]) for k in specs[0].dims}
    roof = build_features("softmax", False, dims, RC).roofline_s
    samples = {("softmax", "fwd", "fp32"): Samples("softmax", "fwd", dims, 10.0 * roof),
               ("softmax", "fwd", "bf16"): Samples("softmax", "fwd", dims, 3.0 * roof)}
    slowdowns = plan.measured_slowdowns(samples, RC, "fp32")
    assert slowdowns == {("softmax", "fwd"): pytest.approx(10.0)}
    with_samples, guessed = plan.plan_cost(specs, RC, slowdowns), plan.plan_cost(specs, RC)
    assert with_samples.device_minutes > 1.5 * guessed.device_minutes  # 5x the reps' time; overhead is fixed
