"""What DeepSpeed's mixed-precision step adds beyond a plain-torch step, read from kernel tables.

    python benchmarks/deepspeed_step_cost.py measurements/h200-sxm-141gb-2026-11-27/kernels 4.22e12 plain_bf16 \
        ds_bf16_zero0 ds_fp16_zero0_fused ds_fp16_zero0_unfused ds_fp16_zero1
    python benchmarks/deepspeed_step_cost.py measurements/h100-sxm5-80gb-2026-11-26/kernels 2.98e12 plain ds_zero0 ds_zero1

Tables by benchmarks/kernel_breakdown.py for the same model (the testbed GPT 12 x 2048, vocabulary 50,304: 711.5 M
parameters in 148 tensors). Per table: the bookkeeping kernels (everything but the model's own operators and
Adam's _foreach_ kernels) beyond the plain-torch table's, as bytes per parameter at the device's measured copy
bandwidth (the unit of graph/step_ops.py's DEEPSPEED_*_BYTES_PER_PARAM), and the host stall per parameter tensor:
step wall time minus kernel time, beyond the plain step's (DEEPSPEED_HOST_S_PER_TENSOR).
"""

from __future__ import annotations

import sys
from pathlib import Path

PARAMS, TENSORS = 711_520_256, 148
MODEL_OPS = {"mm", "addmm", "_cudnn_attention_backward", "_cudnn_attention_forward", "native_layer_norm_backward",
             "native_layer_norm", "_log_softmax_backward_data", "_log_softmax", "gelu_backward", "gelu",
             "embedding_dense_backward", "gather", "nll_loss_forward", "nll_loss_backward", "arange", "add", "sum",
             "div"}
NOT_KERNELS = {"Command Buffer Full", "Activity Buffer Request", "cudaEventQuery"}  # CUPTI/runtime rows


def read_table(path: Path) -> tuple[float, dict[str, float]]:
    """(wall seconds per step, device microseconds per step by aten op)."""
    wall_s, rows = 0.0, {}
    for line in path.read_text().splitlines():
        if line.startswith("# wall per step"):
            wall_s = float(line.split()[4]) / 1e3
        elif not line.startswith("#") and line.strip():
            us, _calls, name = line.split(None, 2)
            rows[name.strip()] = float(us)
    return wall_s, rows


def split(rows: dict[str, float]) -> tuple[float, float, float]:
    """(Adam, bookkeeping, all kernels) microseconds per step."""
    kernels = {n: t for n, t in rows.items() if n not in NOT_KERNELS}
    adam = sum(t for n, t in kernels.items() if n.startswith("aten::_foreach_"))
    model = sum(t for n, t in kernels.items() if n.removeprefix("aten::") in MODEL_OPS)
    total = sum(kernels.values())
    return adam, total - adam - model, total


def main(argv: list[str]) -> None:
    folder, bandwidth, base, configs = Path(argv[0]), float(argv[1]), argv[2], argv[3:]
    base_wall, base_rows = read_table(folder / f"{base}.txt")
    _, base_keep, base_total = split(base_rows)
    base_host_s = base_wall - base_total / 1e6
    print(f"{base}: wall {base_wall * 1e3:.2f} ms, kernels {base_total / 1e3:.2f} ms, host gap {base_host_s * 1e3:.2f} ms")
    print(f"{'config':24s} {'wall ms':>8s} {'bookkeeping B/param':>20s} {'host us/tensor':>15s} {'Adam ms':>8s}")
    for name in configs:
        wall_s, rows = read_table(folder / f"{name}.txt")
        adam, keep, total = split(rows)
        bytes_per_param = (keep - base_keep) * 1e-6 * bandwidth / PARAMS
        host_us = (wall_s - total / 1e6 - base_host_s) * 1e6 / TENSORS
        print(f"{name:24s} {wall_s * 1e3:8.2f} {bytes_per_param:20.1f} {host_us:15.0f} {adam / 1e3:8.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
