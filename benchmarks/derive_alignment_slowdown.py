"""Derive configs/alignment/hopper.json, the per-FLOP slowdowns predict/gemm_alignment.py prices, from measurement
folders of benchmarks/measure_gpu_alignment.py (their lm_head.csv, attention.csv and gemm_dims.csv, as measured).

    python benchmarks/derive_alignment_slowdown.py measurements/h200-sxm-141gb-2026-11-27-c \
        measurements/h200-sxm-141gb-2026-11-27-d [--out FILE]

What each op class of our graph takes from the CSVs (per dtype and phase, the median over the measured shapes of
(t_u / flop_u) / (t_a / flop_a) against the aligned neighbour that measure_gpu_alignment.neighbour picks):
  gemm       an unaligned n: lm_head rows (Megatron's LM-head GEMMs, width = the vocabulary columns n) and gemm_dims
             rows with n varied; "fwd" from the forward X W^T, "bwd" from dgrad + wgrad of the same shape summed (our
             backward op is both kernels).
  gemm_k     an unaligned k: gemm_dims rows with k varied (the same three GEMMs). gemm_dims' varied m costs nothing
             at any alignment (0.91-1.25 per FLOP), so no m entry exists.
  bmm        attention rows qk_baddbmm and av_bmm in layout "megatron" (the strided views of the fused QKV
             projection DotProductAttention takes), width = head dim; both bmm's pooled.
  attention  attention rows sdpa_flash (contiguous), width = head dim.
Only unaligned widths (alignment below ALIGNED_ELEMENTS) against an aligned neighbour are kept, keyed by their
alignment in elements. Nothing else is in the file: a width class the folders did not measure has no entry.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from measure_gpu_alignment import alignment, neighbour, read_rows  # noqa: E402  (sibling script)

ALIGNED_ELEMENTS = 8
"""16 bytes of a 16-bit dtype (predict/gemm_alignment.py ALIGNED_BYTES)."""
DEFAULT_OUT = ROOT / "configs" / "alignment" / "hopper.json"
GEMMS = frozenset({"fwd", "dgrad", "wgrad"})
CLASS_ROWS = {"gemm": (("lm_head", GEMMS, "megatron"), ("gemm_dims", GEMMS, "vary_n")),
              "gemm_k": (("gemm_dims", GEMMS, "vary_k"),),
              "bmm": (("attention", frozenset({"qk_baddbmm", "av_bmm"}), "megatron"),),
              "attention": (("attention", frozenset({"sdpa_flash"}), "contiguous"),)}
"""Op class -> the (part, ops, layout) rows that measure it."""


def phase_of(op_class: str, row: dict) -> str:
    """Our graph's phase: a GEMM's dgrad and wgrad are its one backward op."""
    return ("fwd" if row["op"] == "fwd" else "bwd") if op_class.startswith("gemm") else row["phase"]


def shape_totals(op_class: str, rows: list[dict]) -> dict[tuple, dict[int, tuple[float, float]]]:
    """{(dtype, phase, op, part, layout, m, k): {width: (seconds, flop)}}; a GEMM's dgrad and wgrad summed into one
    "bwd"."""
    sources = CLASS_ROWS[op_class]
    out: dict[tuple, dict[int, tuple[float, float]]] = defaultdict(dict)
    for r in rows:
        if r["status"] != "ok" or not any(r["part"] == p and r["op"] in ops and r["layout"] == lay
                                          for p, ops, lay in sources):
            continue
        op = "gemm" if op_class.startswith("gemm") else r["op"]
        key = (r["dtype"], phase_of(op_class, r), op, r["part"], r["layout"], int(r["m"]), int(r["k"]))
        t, f = out[key].get(int(r["width"]), (0.0, 0.0))
        out[key][int(r["width"])] = (t + float(r["time_s"]), f + float(r["flop"]))
    return out


def slowdowns(op_class: str, rows: list[dict]) -> dict[str, dict[str, dict[str, dict]]]:
    """{dtype: {phase: {alignment: {"median", "min", "max", "n", "widths"}}}} for the unaligned widths."""
    found: dict[tuple, list[float]] = defaultdict(list)
    widths: dict[tuple, set[str]] = defaultdict(set)
    for (dtype, phase, *_), by_width in shape_totals(op_class, rows).items():
        for width, (t, f) in by_width.items():
            near = neighbour(width, set(by_width))
            if alignment(width) >= ALIGNED_ELEMENTS or near is None or alignment(near) < ALIGNED_ELEMENTS:
                continue
            ta, fa = by_width[near]
            key = (dtype, phase, str(alignment(width)))
            found[key].append((t / f) / (ta / fa))
            widths[key].add(f"{width}->{near}")
    table: dict = {}
    for (dtype, phase, align), xs in sorted(found.items()):
        table.setdefault(dtype, {}).setdefault(phase, {})[align] = {
            "median": round(statistics.median(xs), 3), "min": round(min(xs), 3), "max": round(max(xs), 3),
            "n": len(xs), "widths": sorted(widths[(dtype, phase, align)])}
    return table


def derive(folders: list[Path]) -> dict:
    rows = [row for folder in folders for row in read_rows(folder)]
    metas = [json.loads((folder / "alignment_meta.json").read_text()) for folder in folders]
    sources = []
    for folder, meta in zip(folders, metas):
        try:
            where = str(folder.resolve().relative_to(ROOT))
        except ValueError:
            where = str(folder)
        sources.append(f"{where} (finished {meta['finished_utc']})")
    return {
        "architecture": "sm90",
        "measured_on": metas[0]["fingerprint"],
        "source": "; ".join(sources) + ": benchmarks/measure_gpu_alignment.py",
        "derived_by": "benchmarks/derive_alignment_slowdown.py",
        "statistic": "per-FLOP time over the aligned neighbour's, same dtype, phase, op and other dims; median over "
                     "the measured shapes (min, max, n beside it)",
        "rows": {"gemm": "unaligned n: Megatron's LM-head GEMMs (n = vocabulary columns, m 2048-8192 tokens, k "
                         "1024/2048) and Megatron's linear at (m, k) = (4096, 4096), (8192, 2048) with n varied",
                 "gemm_k": "unaligned k: Megatron's linear at (m, n) = (4096, 4096), (8192, 5120) with k varied",
                 "bmm": "Megatron's unfused attention baddbmm + bmm on strided QKV views, width = head dim",
                 "attention": "SDPA flash attention, width = head dim"},
        "slowdown": {op_class: slowdowns(op_class, rows) for op_class in CLASS_ROWS},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", type=Path, nargs="+")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    unmeasured = [str(f) for f in args.folders if not (f / "alignment_meta.json").is_file()]
    if unmeasured:
        ap.error(f"no alignment_meta.json in {', '.join(unmeasured)}: give the folders measure_gpu_alignment.py "
                 f"wrote (measurements/h200-sxm-141gb-2026-11-27-c and -d)")
    if len({json.loads((f / "alignment_meta.json").read_text())["fingerprint"]["device"] for f in args.folders}) > 1:
        ap.error("the folders were measured on different GPUs: derive one file per GPU")
    table = derive(args.folders)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
