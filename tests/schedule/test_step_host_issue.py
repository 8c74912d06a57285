"""DeepSpeed ZeRO-1/2's per-tensor step loop issued by the host behind the backward's queued GPU work
(schedule/compose.step_bookkeeping_s, graph/step_ops.DEEPSPEED_STEP_LAUNCHES_PER_TENSOR)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.api import predict_command
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.op import Op
from llmperf_hook.graph.step_ops import DEEPSPEED_STEP_HOST_S_PER_LAUNCH, DEEPSPEED_STEP_LAUNCHES_PER_TENSOR
from llmperf_hook.predict.dispatch import op_id, predict_op_times
from llmperf_hook.schedule.compose import LAUNCH_QUEUE_DEPTH, step_bookkeeping_s

TRAIN = str(Path(__file__).resolve().parents[2] / "examples" / "cpu-testbed" / "train_gpt.py")


def _step(tmp_path: Path, layers: int, hidden: int, zero: int = 1,
          overlap_comm: bool = False) -> tuple[float, float, int]:
    """(predicted optimizer seconds, the step ops' own seconds, parameter tensors) of a bf16 testbed GPT on an H200."""
    ds = tmp_path / f"ds{zero}{overlap_comm}.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": zero, "overlap_comm": overlap_comm}}))
    heads = str(hidden // 128)
    argv = ["deepspeed", "--num_gpus", "1", TRAIN, "--deepspeed_config", str(ds), "--no-pipeline-parallel",
            "--num-layers", str(layers), "--hidden-size", str(hidden), "--num-attention-heads", heads,
            "--seq-length", "2048", "--max-position-embeddings", "2048", "--vocab-size", "32000",
            "--micro-batch-size", "2", "--bf16"]
    pred = predict_command(argv, {}, cluster="dgx-h200")
    graph = build_graph(pred.config, pred.cluster)
    seconds = predict_op_times(graph, pred.cluster, "bf16").seconds
    own = sum(seconds[op_id(op)] for op in graph.stages[0].step_ops)
    (book,) = [op for op in graph.stages[0].step_ops if op.name == "optimizer.deepspeed_mixed_precision"]
    b = pred.estimate.breakdown  # the step's host wait has its own line (host_optimizer_step)
    return b["optimizer"] + b.get("host_optimizer_step", 0.0), own, book.dims["param_tensors"]


@pytest.mark.parametrize("zero", [1, 2])
def test_many_small_tensors_make_the_step_host_bound(tmp_path: Path, zero: int) -> None:
    """32 layers of hidden 1024: 388 tensors whose kernels are short, so the host's 20.5 launches per tensor outlast
    the step's kernels and what the backward left queued; the step is slower than its kernels (it was their sum)."""
    optimizer_s, own_s, tensors = _step(tmp_path, 32, 1024, zero)
    assert tensors == 32 * 12 + 4
    issue_s = tensors * DEEPSPEED_STEP_LAUNCHES_PER_TENSOR[zero] * DEEPSPEED_STEP_HOST_S_PER_LAUNCH
    assert optimizer_s > own_s * 1.3  # 47 ms against 30 ms of kernels and stalls
    assert optimizer_s > issue_s - LAUNCH_QUEUE_DEPTH * DEEPSPEED_STEP_HOST_S_PER_LAUNCH


@pytest.mark.parametrize("zero", [1, 2])
def test_overlap_comm_drains_the_queue_before_the_step(tmp_path: Path, zero: int) -> None:
    """With overlap_comm, the end of the last backward synchronises the device (stage_1_and_2.py
    independent_gradient_partition_epilogue: get_accelerator().synchronize(), reached by engine.allreduce_gradients at
    both stages): the step's loop starts with nothing queued, so no lead hides any of its issue. The 388-tensor model's
    backward leaves more than a full queue, so the difference is that queue."""
    queued, own_s, _ = _step(tmp_path, 32, 1024, zero)
    drained, own_overlap_s, _ = _step(tmp_path, 32, 1024, zero, overlap_comm=True)
    assert own_overlap_s == pytest.approx(own_s)  # one GPU: the same ops
    assert drained - queued == pytest.approx(LAUNCH_QUEUE_DEPTH * DEEPSPEED_STEP_HOST_S_PER_LAUNCH, rel=1e-6)


def test_few_large_tensors_hide_the_issue(tmp_path: Path) -> None:
    """4 layers of hidden 6144 (52 tensors, the kernels of each long): the step costs its kernels, as before."""
    optimizer_s, own_s, tensors = _step(tmp_path, 4, 6144)
    assert tensors == 4 * 12 + 4
    assert optimizer_s == pytest.approx(own_s)


def _loop(launches: float) -> Op:
    return Op("optimizer.deepspeed_mixed_precision", "deepspeed_bookkeeping", "step", {"params": 1},
              tags={"host_launches": f"{launches}", "host_s_per_launch": "5e-06"})


def test_the_lead_hides_at_most_a_full_launch_queue() -> None:
    op = _loop(10_000)  # 50 ms of issue
    assert step_bookkeeping_s(op, 0.010, 0.0, 57e-6) == pytest.approx(0.050)
    assert step_bookkeeping_s(op, 0.010, 0.002, 57e-6) == pytest.approx(0.048)
    capped = 0.050 - LAUNCH_QUEUE_DEPTH * 5e-6  # however long the queued backward, the host gains only the queue
    assert step_bookkeeping_s(op, 0.010, 1.0, 57e-6) == pytest.approx(capped)
    assert step_bookkeeping_s(op, 0.080, 0.0, 57e-6) == pytest.approx(0.080)  # GPU-bound: its kernels


def test_a_device_without_a_launch_queue_runs_the_ops_as_issued() -> None:
    """The CPU cluster (host_overhead_per_op_us 0): the op's own time, already the CPU's."""
    assert step_bookkeeping_s(_loop(10_000), 0.010, 0.0, 0.0) == pytest.approx(0.010)
