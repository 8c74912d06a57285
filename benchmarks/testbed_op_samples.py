"""Per operator of CPU testbed configurations: what the profile predicts against the op timed alone now.

    python benchmarks/testbed_op_samples.py gemm 9,10,11 [--home ~/.cache/llmperf-cpu-testbed]

For each distinct op of the class in the configurations' graphs (testbed_configs.CONFIGS): the profile's prediction
(predict/dispatch.predict_ops, the operator profile alone: no framework cost), the op timed alone by the profile's own
runner and clock (op_sampler.sample_op, median of 3), and their ratio; for a gelu op also the ratio had it been priced
by the tanh GELU's samples (the profiles before gelu_exact). One thread (the testbed's). A check of whether the profile
samples what the testbed runs (H192: the bf16 GEMM backward at k 256 / 512, the exact GELU), not a score: the step's
framework terms (predict/cpu_framework.py) are left out.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import replace
from pathlib import Path

from testbed_configs import CLUSTER, CONFIGS, REPO


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("op_class", help="a graph op class: gemm, gelu, layernorm, attention, ...")
    ap.add_argument("configs", help="comma-separated indices of testbed_configs.CONFIGS")
    ap.add_argument("--home", type=Path, default=Path.home() / ".cache" / "llmperf-cpu-testbed")
    args = ap.parse_args()
    try:
        args.indices = [int(i) for i in args.configs.split(",")]
    except ValueError:
        ap.error(f"{args.configs!r}: comma-separated integers, e.g. 9,10,11")
    if not all(0 <= i < len(CONFIGS) for i in args.indices):
        ap.error(f"{args.configs}: indices of CONFIGS, 0 to {len(CONFIGS) - 1}")
    if not (args.home / "profiles" / CLUSTER / "profile.json").is_file():
        ap.error(f"--home {args.home}: no profiles/{CLUSTER}/profile.json there (bench_cpu_testbed.py makes it)")
    return args


def main() -> None:
    args = parse_args()
    os.environ["LLMPERF_HOME"] = str(args.home)
    import torch

    from llmperf_hook.api import build_graph, resolve_job
    from llmperf_hook.hardware.load import load_hardware
    from llmperf_hook.hardware.spec import ClusterSpec, NetworkTier
    from llmperf_hook.predict import fitted
    from llmperf_hook.predict.dispatch import op_id, predict_ops
    from llmperf_hook.profile.features import profile_class
    from llmperf_hook.profile.op_sampler import sample_op

    torch.set_num_threads(1)
    tier = NetworkTier(1e9, 1e-5)
    cluster = ClusterSpec(CLUSTER, load_hardware(CLUSTER), 2, tier, tier)
    ratios, seen = [], set()
    for i in args.indices:
        c = CONFIGS[i]
        _, cfg = resolve_job(c.argv(REPO / "examples" / "cpu-testbed" / f"ds_zero{c.zero}.json", 29999), {})
        ops = [op for op in build_graph(cfg, cluster).all_ops() if op.op_class == args.op_class and not op.is_comm]
        as_tanh = [replace(op, tags={**op.tags, "approximate": "tanh"}) if op.op_class == "gelu" else op for op in ops]
        profile = fitted.find_profile(CLUSTER, c.dtype)
        seconds, used = predict_ops(ops + as_tanh, cluster, profile, None)
        for op, tanh_op in zip(ops, as_tanh):
            cls, phase = profile_class(op.op_class, op.tags), "bwd" if op.phase == "bwd" else "fwd"
            key = (c.dtype, cls, phase, tuple(sorted(op.dims.items())))
            if key in seen:
                continue
            seen.add(key)
            timed_s = statistics.median(sample_op(cls, op.dims, phase, c.dtype, "cpu").time_s for _ in range(3))
            ratio = seconds[op_id(op)] / timed_s
            ratios.append(ratio)
            tanh = f"  (as tanh GELU x{seconds[op_id(tanh_op)] / timed_s:.2f})" if op.op_class == "gelu" else ""
            print(f"config {i} {c.dtype} {cls} {phase} {dict(op.dims)}: predicted {seconds[op_id(op)] * 1e3:.3f} ms, "
                  f"timed {timed_s * 1e3:.3f} ms, x{ratio:.2f}{tanh}", flush=True)
        print(f"  config {i} priced by: {used.get(args.op_class, 'nothing of this class')}")
    if not ratios:
        print(f"the configurations {args.configs} run no {args.op_class!r} op: give a class their graphs hold "
              f"(gemm, attention, layernorm, gelu, embedding, cross_entropy, ...)", file=sys.stderr)
        sys.exit(2)
    print(f"predicted / timed over {len(ratios)} ops: median x{statistics.median(ratios):.2f}, "
          f"range x{min(ratios):.2f}-x{max(ratios):.2f}")


if __name__ == "__main__":
    main()
