"""CPU hardware model: framework cost fit, per-op composition, CPU-serial graph (no overlap), tensor counts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmperf_hook.graph.op import Collective, Op
from llmperf_hook.hardware.spec import ClusterSpec, HardwareSpec, NetworkTier
from llmperf_hook.predict.cpu_framework import (FILE_NAME, CpuFrameworkCost, apply_cpu_framework_cost,
                                                find_cpu_framework_cost, op_seconds)
from llmperf_hook.profile.cpu_framework import fit_nonnegative

COST = CpuFrameworkCost(per_unit_s=20e-6, compute_scale=0.8, optimizer_per_tensor_s=50e-6,
                        optimizer_per_param_s=4e-9, per_byte_s=1e-10, concurrency_slowdown={"2": 1.25},
                        deepspeed_step={"1": (5e-3, 6e-9)})


@settings(max_examples=40, deadline=None)
@given(st.floats(1e-6, 1e-4), st.floats(0.2, 3.0), st.floats(0.0, 1e-9))
def test_fit_recovers_nonnegative_coefficients(a: float, b: float, c: float) -> None:
    x = [[45, 1e-3, 2e6], [75, 4e-3, 1e7], [45, 2e-2, 4e7], [105, 9e-3, 6e7], [75, 5e-2, 8e7]]
    y = [a * u + b * p + c * n for u, p, n in x]
    got = fit_nonnegative(x, y)
    assert all(g >= 0 for g in got)
    assert all(math.isclose(sum(g * v for g, v in zip(got, row)), t, rel_tol=1e-6) for row, t in zip(x, y))


def test_fit_never_returns_a_negative_coefficient() -> None:
    x = [[1.0, 1.0], [2.0, 1.0], [3.0, 1.0]]
    got = fit_nonnegative(x, [3.0, 2.0, 1.0])  # best unconstrained slope is negative
    assert got[0] == 0.0 and got[1] > 0


def _op(op_class: str, phase: str, **kw) -> Op:
    return Op("x", op_class, phase, kw.pop("dims", {"m": 8, "n": 8, "k": 8}), flops=1.0, bytes_moved=1e6, **kw)


def test_compute_op_adds_units_bytes_and_scale() -> None:
    fwd, bwd = _op("gemm", "fwd"), _op("gemm", "bwd")
    assert op_seconds(fwd, 1e-3, COST) == pytest.approx(0.8e-3 + 20e-6 + 1e-4)
    assert op_seconds(bwd, 1e-3, COST) == pytest.approx(0.8e-3 + 40e-6 + 1e-4)  # backward issues twice
    assert op_seconds(fwd, 1e-3, COST, ranks_on_machine=2) == pytest.approx(1.25 * (0.8e-3 + 20e-6 + 1e-4))


def test_optimizer_costs_per_tensor_param_and_deepspeed_engine() -> None:
    opt = _op("optimizer", "step", dims={"params": 1000}, tags={"param_tensors": "28"})
    assert op_seconds(opt, 9.0, COST) == pytest.approx(28 * 50e-6 + 1000 * 4e-9)  # the profile's 9 s is replaced
    ds = _op("optimizer", "step", dims={"params": 500}, tags={"param_tensors": "1", "deepspeed_zero": "1",
                                                              "engine_params": "1000"})
    assert op_seconds(ds, 0.0, COST) == pytest.approx(50e-6 + 500 * 4e-9 + 5e-3 + 1000 * 6e-9)


def test_collectives_keep_their_comm_model_time_and_set_the_rank_count() -> None:
    coll = Op("ar", "allreduce", "step", {"bytes": 1 << 20}, collective=Collective("dp_cp", 2, 2))
    gemm = _op("gemm", "fwd")
    out = apply_cpu_framework_cost({"ar": 3e-3, "g": 1e-3}, [coll, gemm], COST, lambda op: "ar" if op.collective else "g")
    assert out["ar"] == 3e-3 and out["g"] == pytest.approx(1.25 * (0.8e-3 + 20e-6 + 1e-4))


def _home_with_cost(tmp_path: Path, name: str) -> Path:
    d = tmp_path / "profiles" / name
    d.mkdir(parents=True)
    (d / "profile.json").write_text("{}")
    entry = {"per_unit_s": 2e-5, "compute_scale": 1.0, "optimizer_per_tensor_s": 5e-5, "optimizer_per_param_s": 4e-9,
             "per_byte_s": 0.0, "concurrency_slowdown": {"2": 1.1},
             "deepspeed_step": {"3": {"per_step_s": 0.02, "per_param_s": 1e-8}}}
    (d / FILE_NAME).write_text(json.dumps({"dtypes": {"fp32": entry}}))
    return tmp_path


def _zero3_config(tmp_path: Path):
    from llmperf_hook.api import resolve_job

    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
                              "zero_optimization": {"stage": 3}}))
    argv = ["deepspeed", "--num_gpus", "2", "train.py", "--deepspeed_config", str(ds), "--num-layers", "2",
            "--hidden-size", "128", "--num-attention-heads", "4", "--seq-length", "128",
            "--max-position-embeddings", "128", "--micro-batch-size", "2", "--vocab-size", "1024",
            "--no-pipeline-parallel"]
    return resolve_job(argv, {})[1]


def _cluster(name: str) -> ClusterSpec:
    tier = NetworkTier(2e9, 5e-5)
    return ClusterSpec("c", HardwareSpec(name, {"fp32": 3e10}, 5e9, 1 << 34), 2, tier, tier)


def test_cpu_graph_is_serial_and_tags_the_optimizer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llmperf_hook.api import build_graph

    monkeypatch.setenv("LLMPERF_HOME", str(_home_with_cost(tmp_path, "cpu-x")))
    cfg = _zero3_config(tmp_path)
    assert cfg.precision == "fp32" and find_cpu_framework_cost("cpu-x", "fp32") is not None
    gpu_ops = build_graph(cfg, _cluster("no-such-cpu")).all_ops()
    cpu_ops = build_graph(cfg, _cluster("cpu-x")).all_ops()
    assert any("overlap" in op.tags for op in gpu_ops)  # ZeRO-3 prefetch hides on a GPU side stream
    assert not any("overlap" in op.tags for op in cpu_ops)
    opt = next(op for op in cpu_ops if op.op_class == "optimizer")
    assert opt.tags["param_tensors"] == "1" and opt.tags["deepspeed_zero"] == "3"  # flat ZeRO partition
    assert int(opt.tags["engine_params"]) > opt.dims["params"]  # whole model vs this rank's partition


def test_param_tensor_count_matches_the_torch_module() -> None:
    torch = pytest.importorskip("torch")
    from llmperf_hook.api import resolve_job
    from llmperf_hook.graph.param_tensors import optimizer_param_tensors
    from llmperf_hook.profile.cpu_framework import _gpt

    torch.set_num_threads(1)
    for layers in (1, 3):
        cfg = resolve_job(["python", "pretrain_gpt.py", "--num-layers", str(layers), "--hidden-size", "64",
                           "--num-attention-heads", "2", "--seq-length", "32", "--max-position-embeddings", "32",
                           "--micro-batch-size", "1", "--vocab-size", "256"], {})[1]
        assert optimizer_param_tensors(cfg, 0, layers) == len(list(_gpt(layers, 64, 32).parameters()))


def test_an_edited_framework_file_is_refused_by_its_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer signs the file (with_digest); compute_scale 1.0 -> 1.9, within what the writer produces (and so
    past _checked), changed every CPU prediction without a word. A file without the digest (written before it)
    is read as it is."""
    from llmperf_hook.errors import ProfileError
    from llmperf_hook.predict.cpu_framework import digest_problem, with_digest

    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    for name, edit in (("unsigned", None), ("signed", {}), ("edited", {"compute_scale": 1.9})):
        path = _home_with_cost(tmp_path, name) / "profiles" / name / FILE_NAME
        if edit is not None:
            doc = with_digest(json.loads(path.read_text()))
            assert digest_problem(doc) is None and digest_problem(json.loads(json.dumps(doc))) is None
            doc["dtypes"]["fp32"].update(edit)
            path.write_text(json.dumps(doc, indent=1))
        if name == "edited":
            with pytest.raises(ProfileError, match="does not match its sha256 .*--budget 4 --name edited"):
                find_cpu_framework_cost(name, "fp32")
        else:
            assert find_cpu_framework_cost(name, "fp32").compute_scale == 1.0
