"""Before / after predictions of a 13B-class DeepSpeed ZeRO-3 job on 64 GPUs (8 nodes x 8) with each ZeRO++ and
related ds_config key (graph/step_ops.py, schedule/memory.py).

    python benchmarks/bench_zeropp.py

Llama-2-13B (llama2-13b preset), Hugging Face Trainer + DeepSpeed ZeRO-3 bf16 with full recompute
(--gradient_checkpointing) on dgx-a100 and dgx-h100, in two shapes: micro-batch 4 x 4 accumulation steps at sequence
4096 (compute-bound: ZeRO's gathers hide behind compute) and micro-batch 1 without accumulation at 2048 (the
communication-bound regime of the paper's runs). Each row changes one
key against the baseline ds_config; "paper" quotes what Wang et al. 2023 (ZeRO++, arXiv:2306.10209) report for
the change. The last rows are Megatron-DeepSpeed's --partition-activations / --checkpoint-in-cpu on a TP-4 GPT 13B.
One thread (OMP_NUM_THREADS=1); prints the figures.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import replace
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

from llmperf_hook.api import predict_command  # noqa: E402
from llmperf_hook.frameworks.resolve import JobOverrides  # noqa: E402
from llmperf_hook.hardware.load import load_cluster  # noqa: E402
from llmperf_hook.hardware.spec import ClusterSpec  # noqa: E402

TRAINER = ["torchrun", "--nnodes", "8", "--nproc-per-node", "8", "train.py", "--bf16", "--gradient_checkpointing"]
SHAPES = {"mbs 4 x 4 accumulation, seq 4096": ["--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "4",
                                               "--max_seq_length", "4096"],
          "mbs 1, no accumulation, seq 2048 (comm-bound, as the paper's runs)":
              ["--per_device_train_batch_size", "1", "--max_seq_length", "2048"]}
BASE: dict[str, Any] = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
                        "bf16": {"enabled": True}, "zero_optimization": {"stage": 3, "overlap_comm": True}}
ZERO_CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("baseline ZeRO-3", {}, {}),
    ("hpZ zero_hpz_partition_size 8", {"zero_hpz_partition_size": 8}, {}),
    ("qwZ zero_quantized_weights", {"zero_quantized_weights": True}, {}),
    ("qgZ zero_quantized_gradients", {"zero_quantized_gradients": True}, {}),
    ("ZeRO++ (hpZ 8 + qwZ + qgZ)", {"zero_hpz_partition_size": 8, "zero_quantized_weights": True,
                                    "zero_quantized_gradients": True}, {}),
    ("communication_data_type bf16", {}, {"communication_data_type": "bf16"}),
    ("grad_accum_dtype fp32", {}, {"data_types": {"grad_accum_dtype": "fp32"}}),
    ("offload_optimizer cpu", {"offload_optimizer": {"device": "cpu"}}, {}),
    ("offload_optimizer cpu ratio 0.5 (sub_group 5e7)", {"offload_optimizer": {"device": "cpu", "ratio": 0.5},
                                                          "sub_group_size": 50_000_000}, {}),
]
MEGATRON_DS = ("torchrun --nnodes 8 --nproc-per-node 8 pretrain_gpt.py --num-layers 40 --hidden-size 5120 "
               "--num-attention-heads 40 --seq-length 4096 --max-position-embeddings 4096 --vocab-size 50257 "
               "--tensor-model-parallel-size 4 --no-pipeline-parallel --micro-batch-size 4 --global-batch-size 256 "
               "--bf16 --deepspeed --checkpoint-activations --deepspeed-activation-checkpointing").split()
MEGATRON_CASES = [("Megatron-DS TP4 ZeRO-1 full recompute", []),
                  ("  + --partition-activations", ["--partition-activations"])]


def _ds_file(folder: str, name: str, zero: dict[str, Any], top: dict[str, Any]) -> str:
    raw = {**BASE, **top, "zero_optimization": {**BASE["zero_optimization"], **zero}}
    path = os.path.join(folder, f"{abs(hash(name))}.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(raw, handle)
    return path


def _low_bandwidth() -> ClusterSpec:
    """dgx-a100 with one 100 Gb/s NIC per node instead of eight 200 Gb/s ones (12.5 GB/s a node, 1.56 GB/s a GPU):
    the low-bandwidth clusters the ZeRO++ paper targets (Sec. 1 and 5.2)."""
    spec = load_cluster("dgx-a100")
    return replace(spec, name="dgx-a100-1x100G", inter_node=replace(spec.inter_node, bandwidth_bytes_per_s=12.5e9 / 8))


def _row(name: str, argv: list[str], cluster: str | ClusterSpec, base: tuple[float, float] | None) -> tuple[float, float]:
    start = time.perf_counter()
    overrides = JobOverrides(model="llama2-13b" if "train.py" in argv else None, cluster_gpus_per_node=8)
    pred = predict_command(argv, {}, cluster=cluster, overrides=overrides)
    spent = time.perf_counter() - start
    est = pred.estimate
    step, mem = est.step_time_s, est.memory.peak_bytes_per_gpu / 2**30
    zero_s = sum(est.breakdown.get(k, 0.0) for k in ("comm_zero", "comm_dp_grad", "comm_param_gather"))
    delta = "" if base is None else f"{100 * (step / base[0] - 1):+6.1f}% {mem - base[1]:+6.2f}"
    print(f"{name:48s} {step:8.3f} {100 * est.mfu:6.1f} {zero_s:8.3f} {mem:7.2f} {delta:>15s} {spent:6.2f}")
    return step, mem


def main() -> None:
    clusters: list[str | ClusterSpec] = ["dgx-a100", "dgx-h100", _low_bandwidth()]
    for cluster, (shape, flags) in [(c, s) for c in clusters for s in SHAPES.items()]:
        label = cluster if isinstance(cluster, str) else cluster.name
        print(f"\n{label}: Llama-2-13B, 64 GPUs, HF Trainer + DeepSpeed ZeRO-3 bf16, {shape}")
        print(f"{'case':48s} {'step s':>8s} {'MFU %':>6s} {'ZeRO exp':>8s} {'GiB/GPU':>7s} {'vs base':>15s} "
              f"{'pred s':>6s}")
        with tempfile.TemporaryDirectory() as folder:
            base = None
            for name, zero, top in ZERO_CASES:
                result = _row(name, [*TRAINER, *flags, "--deepspeed", _ds_file(folder, name, zero, top)], cluster, base)
                base = base or result
            if "comm-bound" in shape or not isinstance(cluster, str):
                continue
            ds = _ds_file(folder, "megatron", {"stage": 1}, {"train_batch_size": 256,
                                                            "train_micro_batch_size_per_gpu": 4})
            base = None
            for name, extra in MEGATRON_CASES:
                result = _row(name, [*MEGATRON_DS, "--deepspeed_config", ds, *extra], cluster, base)
                base = base or result
    print("\nZeRO++ paper (arXiv:2306.10209, abstract and Sec. 5): 4x less cross-node communication volume, up to "
          "2.16x throughput at 384 GPUs, most on low-bandwidth clusters; hpZ costs M/k extra weight memory per GPU.")


if __name__ == "__main__":
    main()
