"""Peak memory per GPU against the frameworks' own memory code and against measured peaks.

    python benchmarks/bench_memory_reference.py [measurements/h100-sxm5-80gb-2026-11-26]

1. Megatron-LM megatron/training/theoretical_memory_usage.py (as shipped, with a stub args namespace; needs a
   Megatron-LM checkout: the mirror or $LLMPERF_MEGATRON_LM) on the Megatron rows of
   tests/schedule/test_memory_reference.py: weight + optimizer bytes of the most loaded rank and activation bytes
   of the first stage, Megatron's figure, ours, and the documented differences (the test checks ours = Megatron +
   those terms).
2. DeepSpeed estimate_zero2/3_model_states_mem_needs (the installed deepspeed) on the DeepSpeed rows: the
   estimator's GPU bytes and our model-state bytes in each phase (backward, optimizer step).
3. Host memory per node of the offloading DeepSpeed rows: the same estimators' cpu_mem against ours.
4. The measured single-GPU runs of one or more measurements folders (default: DeepSpeed ZeRO-0/1 and plain torch on
   an H100): the peak allocated and reserved bytes the hook recorded against our peak (which includes the CUDA
   context, absent from torch's counters: compared with allocated + context and with reserved + context), and our
   allocated bytes (the peak less the allocator's reserve, schedule/allocator_reserve.py) against allocated +
   context, per folder.

    python benchmarks/bench_memory_reference.py measurements/h100-sxm5-80gb-2026-11-26 \
        measurements/h200-sxm-141gb-2026-11-28
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DEFAULT_RUNS = ROOT / "measurements" / "h100-sxm5-80gb-2026-11-26"
GB = 1e9


def _gb(x: float | None) -> str:
    return f"{x / GB:8.2f}" if x is not None else "       -"


def megatron_table(ref: object, resolved: dict) -> None:
    from tests.schedule import test_memory_reference as t

    print("Megatron-LM theoretical_memory_usage.py (GB per GPU; expected = Megatron + documented terms)")
    print(f"{'case':34} {'W+O mlm':>8} {'ours':>8} {'exp':>8}  {'act mlm':>8} {'ours':>8} {'exp':>8}  differences")
    for case in t.MEGATRON_CASES:
        r = resolved[case.name]
        s_mlm, s_exp, s_note = t.megatron_state_expected(ref, r)
        skip = t.megatron_activations_comparable(r.cfg)
        a_mlm, a_exp, a_note = (None, None, skip) if skip else t.megatron_activation_expected(ref, r)
        ours_a = t.our_stage0_activations(r)
        print(f"{case.name:34} {_gb(s_mlm)} {_gb(t.our_state(r))} {_gb(s_exp)}  {_gb(a_mlm)} {_gb(ours_a)} "
              f"{_gb(a_exp)}  W+O: {s_note}; act: {a_note}")


def deepspeed_table(resolved: dict) -> None:
    from tests.schedule import test_memory_reference_deepspeed as t

    print("\nDeepSpeed estimate_zero{2,3}_model_states_mem_needs (GB per GPU, model states only)")
    print(f"{'case':36} {'DS est':>8} {'ours bwd':>8} {'exp bwd':>8} {'ours step':>9} {'exp step':>8}  differences")
    for case in t.DEEPSPEED_CASES:
        r = resolved[case.name]
        want = t.deepspeed_state_expected(r)
        backward, step = t.our_deepspeed_phases(r)
        print(f"{case.name:36} {_gb(want.estimator_bytes)} {_gb(backward)} {_gb(want.backward_bytes)} "
              f"{_gb(step)} {_gb(want.step_bytes)}   {want.note}")


def host_table(resolved: dict) -> None:
    """Host bytes per node of the offloading DeepSpeed rows: the estimators' cpu_mem at zero_init and no buffer
    factor (18 / 16 B per parameter over the nodes at ZeRO-3, max(4 x GPUs, 16) at ZeRO-2) against ours
    (schedule/host_memory.py: ZeRO-3 also keeps its 16-bit gradient partition on the host, ZeRO-1/2 a 16-bit
    parameter copy, a staging buffer of the largest parameter and, with gradient accumulation, a 16-bit buffer per
    parameter its partition touches; the buffers DeepSpeed pins, pin_memory's default since v0.19.5, take torch's
    power-of-two blocks, and zero.Init's pinned copies of ZeRO-3's offloaded parameters stay in torch's pinned
    cache: none of which the estimators count)."""
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    from llmperf_hook.api import build_graph
    from llmperf_hook.graph.build import ranks_per_node
    from llmperf_hook.schedule.host_memory import host_memory_per_node
    from tests.schedule import test_memory_reference_deepspeed as t

    print("\nHost memory per node of the offloading rows (GB; DS = estimate_zero{2,3}_model_states_mem_needs cpu_mem, "
          "zero_init, buffer factor 1)")
    print(f"{'case':36} {'DS est':>8} {'ours':>8}  ours by component")
    for case in t.DEEPSPEED_CASES:
        r = resolved[case.name]
        cfg, o = r.cfg, r.cfg.optimizer
        if o.offload_optimizer == "none" and o.offload_param == "none":
            continue
        total = t.total_params(r)
        if o.zero_stage == 3:
            theirs, _, _ = estimate_zero3_model_states_mem_needs(
                total, 0, cfg.nproc_per_node, cfg.nnodes, cpu_offload=o.offload_optimizer != "none",
                cpu_offload_params=o.offload_param != "none", additional_buffer_factor=1.0)
        else:
            theirs, _ = estimate_zero2_model_states_mem_needs(total, cfg.nproc_per_node, cfg.nnodes,
                                                              additional_buffer_factor=1.0)
        ours = host_memory_per_node(cfg, build_graph(cfg, r.cluster), r.cluster, ranks_per_node(cfg, r.cluster))
        parts = ", ".join(f"{k.removeprefix('host_')} {v / GB:.1f}" for k, v in ours.items())
        print(f"{case.name:36} {_gb(theirs)} {_gb(sum(ours.values()))}  {parts}")


def measured_table(folder: Path) -> None:
    from llmperf_hook.api import predict_command

    print(f"\nMeasured peaks, {folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder} (GB; ctx = our "
          "CUDA context, outside torch's counters; ours alloc = our peak less the allocator's reserve)")
    print(f"{'run':4} {'alloc+ctx':>9} {'resv+ctx':>9} {'ours':>8} {'vs alloc':>9} {'vs resv':>8} {'ours alloc':>10} "
          f"{'vs alloc':>9}")
    errors: dict[str, list[float]] = {"alloc": [], "resv": [], "ours alloc vs alloc": []}
    meta = folder / "op_samples_meta.json"
    for run_dir in sorted(p for p in (folder / "runs").iterdir() if p.is_dir()):
        session = json.loads((run_dir / "session.json").read_text())
        hardware = (json.loads(meta.read_text())["hardware_name"] if meta.exists()
                    else json.loads((run_dir / "prediction.json").read_text())["cluster"]["gpu"])
        argv = [a.replace("examples/", f"{ROOT}/examples/").replace("/tmp/llmperf-gpu/", f"{folder}/")
                for a in session["argv"]]
        records = (run_dir / "rank0.jsonl").read_text().splitlines()
        steps = [json.loads(line) for line in records if '"kind":"step"' in line]
        pred = predict_command(argv, {"PATH": os.environ.get("PATH", "")}, hardware=hardware)
        mem = pred.estimate.memory
        ctx = mem.components.get("cuda_context", 0)
        ours_alloc = mem.peak_bytes_per_gpu - mem.components.get("allocator_fragmentation", 0)
        alloc = max(s["gpu_peak_allocated_bytes"] for s in steps) + ctx
        resv = max(s["gpu_peak_reserved_bytes"] for s in steps) + ctx
        e_a, e_r, e_o = mem.peak_bytes_per_gpu / alloc - 1, mem.peak_bytes_per_gpu / resv - 1, ours_alloc / alloc - 1
        for name, e in zip(errors, (e_a, e_r, e_o)):
            errors[name].append(abs(e))
        print(f"{run_dir.name:4} {_gb(alloc)}  {_gb(resv)} {_gb(mem.peak_bytes_per_gpu)} {e_a * 100:+8.1f}% "
              f"{e_r * 100:+7.1f}% {_gb(ours_alloc):>10} {e_o * 100:+8.1f}%")
    for name, errs in errors.items():
        print(f"peak memory MAPE vs {name:5} {100 * statistics.fmean(errs):5.1f}%  (n={len(errs)})")


def main() -> None:
    from tests.schedule import test_memory_reference as t

    folders = [Path(a).resolve() for a in sys.argv[1:]] or [DEFAULT_RUNS]
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["LLMPERF_HOME"] = str(Path(tmp) / "home")  # no user calibration
        resolved = {c.name: t.resolve(c, Path(tmp) / str(i)) for i, c in enumerate(t.CASES)}  # both tables
        if t.REFERENCE is None:
            print("Megatron-LM checkout not found (set LLMPERF_MEGATRON_LM): Megatron table skipped")
        else:
            megatron_table(t.REFERENCE, resolved)
        deepspeed_table(resolved)
        host_table(resolved)
        for folder in folders:
            if (folder / "runs").is_dir():
                measured_table(folder)


if __name__ == "__main__":
    main()
