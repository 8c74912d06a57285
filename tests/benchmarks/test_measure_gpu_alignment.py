"""benchmarks/measure_gpu_alignment.py: the prepared device check of GEMM / bmm width alignment (H134), its CPU path,
its time budget and its slowdown reader."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from script_module import load_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "measure_gpu_alignment.py"


def _mod():  # type: ignore[no-untyped-def]
    return load_script(SCRIPT)


def _write(path: Path, rows: list[dict]) -> None:
    fields = _mod().FIELDS
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows([{k: r.get(k, "") for k in fields} for r in rows])


def _row(part: str, op: str, width: int, time_s: float, m: int = 4096, k: int = 2048, phase: str | None = None,
         status: str = "ok") -> dict:
    shape = _mod().Shape(part, "fp16", op, phase or op, "megatron", m, k, width)
    row = {"part": part, "dtype": "fp16", "op": op, "phase": shape.phase, "layout": "megatron", "m": m, "k": k,
           "width": width, "alignment": width & -width, "flop": shape.flop, "status": status}
    return {**row, "time_s": time_s, "tflops": shape.flop / time_s / 1e12} if status == "ok" else row


def test_quick_cpu_run_writes_both_parts_with_fingerprint_and_reports(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu"}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    mod = _mod()
    planned = {"lm_head": mod.lm_head_shapes(True), "attention": mod.attention_shapes(True)}
    for part, shapes in planned.items():
        with open(tmp_path / f"{part}.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        assert list(rows[0]) == list(mod.FIELDS) and len(rows) == len(shapes)
        assert all(r["status"] == "ok" or r["status"].startswith("unsupported: ") for r in rows)
        # GEMMs and Megatron's bmm run on any device: those must be timed, not skipped
        timed = [r for r in rows if not r["op"].startswith("sdpa")]
        assert timed and all(r["status"] == "ok" and float(r["time_s"]) > 0 for r in timed)
    meta = json.loads((tmp_path / "alignment_meta.json").read_text())
    assert meta["fingerprint"]["device"] and meta["fingerprint"]["torch"] and meta["library_versions"]["python"]
    assert meta["rows"] == {p: len(s) for p, s in planned.items()} and meta["quick"] is True
    assert "503 -> 512" in proc.stdout and "140 -> 144" in proc.stdout  # the report printed at the end


def test_reader_gives_per_flop_slowdown_against_the_aligned_neighbour(tmp_path: Path) -> None:
    mod = _mod()
    # 50257 runs 2.5x slower per FLOP than 50304; 25128 as fast per FLOP as 25216; a refused row is left out.
    rows = [_row("lm_head", "fwd", 50304, 1.0e-3), _row("lm_head", "fwd", 50257, 2.5e-3 * 50257 / 50304),
            _row("lm_head", "fwd", 25216, 1.0e-3), _row("lm_head", "fwd", 25128, 1.0e-3 * 25128 / 25216),
            _row("lm_head", "wgrad", 12608, 1.0e-3),
            _row("lm_head", "wgrad", 12564, 0.0, status="unsupported: refused")]
    _write(tmp_path / "lm_head.csv", rows)
    attn = [_row("attention", "qk_baddbmm", d, t, m=24, phase="fwd") for d, t in
            ((128, 1.0e-3), (144, 1.125e-3), (140, 2.0 * 1.125e-3 * 140 / 144))]
    _write(tmp_path / "attention.csv", attn)
    got = {(i["op"], i["width"]): i for i in mod.slowdowns(mod.read_rows(tmp_path))}
    assert got[("fwd", 50257)]["slowdown"] == pytest.approx(2.5) and got[("fwd", 50257)]["neighbour"] == 50304
    assert got[("fwd", 25128)]["slowdown"] == pytest.approx(1.0)
    assert ("wgrad", 12564) not in got and ("fwd", 50304) not in got
    assert got[("qk_baddbmm", 140)]["slowdown"] == pytest.approx(2.0)
    assert got[("qk_baddbmm", 140)]["vs_128"] == pytest.approx(2.0 * 128 / 144 * 1.125)
    assert got[("qk_baddbmm", 144)]["vs_128"] == pytest.approx(1.125 * 128 / 144)
    text = mod.report(tmp_path)
    summary = {line.split()[-5]: line.split()[-4:] for line in text.splitlines() if " -> " in line}
    assert summary["50304"] == ["2.50", "[2.50,", "2.50]", "(1)"] and summary["144"][0] == "2.00"


def test_reader_names_what_a_folder_lacks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _mod().main(["--report", str(tmp_path)]) == 2
    assert "no lm_head.csv, attention.csv or gemm_dims.csv there" in capsys.readouterr().err


def test_a_folder_holding_a_run_is_never_overwritten(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "lm_head.csv").write_text("measured\n")
    with pytest.raises(SystemExit) as exc:
        _mod().main(["--device", "cpu", "--quick", "--out", str(tmp_path)])
    assert exc.value.code == 2 and "already holds a run" in capsys.readouterr().err
    assert (tmp_path / "lm_head.csv").read_text() == "measured\n"


def test_aligned_neighbours_of_the_grid() -> None:
    mod = _mod()
    vocab, heads = set(mod.VOCAB_WIDTHS), set(mod.HEAD_DIMS)
    assert {w: mod.neighbour(w, vocab) for w in vocab} == {
        50257: 50304, 25128: 25216, 12564: 12608, 6282: 6400, 50304: None, 25216: None, 12608: None, 6400: None}
    assert {w: mod.neighbour(w, heads) for w in heads} == {
        140: 144, 150: 152, 144: 160, 152: 160, 128: None, 160: None, 64: None}


def test_the_device_plan_fits_its_budget() -> None:
    """Each part's estimated time (FLOPs at assumed H100 rates, unaligned 10x slower) stays under the 75 s the shell
    script gives it, and the grid is the one the brief names."""
    mod = _mod()
    lm, attn = mod.lm_head_shapes(False), mod.attention_shapes(False)
    assert len(lm) == 2 * 3 * 2 * 8 * 3 and len(attn) == 2 * 3 * 7 * 7 * 2
    assert mod.estimate_s(lm) < 75 and mod.estimate_s(attn) < 75
    assert mod.estimate_s(lm) >= len(lm) * 0.05  # never below the repetitions' own target time
    script = (ROOT / "benchmarks" / "measure_gpu_alignment.sh").read_text()
    assert "source benchmarks/gpu_prologue.sh" in script and "--budget-s 75" in script and "timeout 190" in script


def test_budget_stops_adding_shapes(tmp_path: Path) -> None:
    mod = _mod()
    assert mod.run_part("lm_head", mod.lm_head_shapes(True), tmp_path, "cpu", deadline_s=0.0, target_s=0.001) == 0
    assert (tmp_path / "lm_head.csv").read_text().strip() == ",".join(mod.FIELDS)


def test_megatron_layout_is_the_fused_qkv_view() -> None:
    """DotProductAttention's query.transpose(0, 1) of the [s, b*np, 3 hn] projection: strides (3 hn, 3 b*np hn, 1)."""
    torch = pytest.importorskip("torch")
    mod = _mod()
    s = mod.Shape("attention", "fp16", "qk_baddbmm", "bwd", "megatron", 6, 16, 150)
    q, k, v = mod._qkv(torch, s, {"dtype": torch.float32, "device": "cpu"}, True)
    assert q.shape == (6, 16, 150) and q.stride() == (450, 6 * 450, 1) and q.is_leaf and q.requires_grad
    assert k.data_ptr() - q.data_ptr() == 150 * 4 and v.data_ptr() - q.data_ptr() == 300 * 4


def test_gemm_dims_part_varies_one_dimension_at_a_time(tmp_path: Path) -> None:
    """Part gemm_dims (which GEMM dimension's alignment costs): each shape keeps two of Megatron's linear (m, k, n) at
    the base and sets the third to base - 0/8/4/2/1; its runner multiplies exactly those dimensions."""
    torch = pytest.importorskip("torch")
    mod = _mod()
    shapes = mod.gemm_dims_shapes(False)
    assert len(shapes) == 2 * len(mod.GEMM_BASES) * 3 * len(mod.GEMM_OFFSETS) * 3
    assert mod.estimate_s(shapes) < 75
    for base in mod.GEMM_BASES:
        widths = {b - off for b in base for off in mod.GEMM_OFFSETS}
        assert {b - 1: mod.neighbour(b - 1, widths) for b in base} == {b - 1: b for b in base}
    kw = {"dtype": torch.float32, "device": "cpu"}
    for layout, (m, k, n) in {"vary_m": (7, 4, 5), "vary_k": (4, 7, 5), "vary_n": (4, 5, 7)}.items():
        fixed = [d for d, name in zip((m, k, n), "mkn") if f"vary_{name}" != layout]
        out = {op: mod._gemm_dims_runner(torch, mod.Shape("gemm_dims", "fp32", op, op, layout, *fixed, 7), kw)()
               for op in ("fwd", "dgrad", "wgrad")}
        assert out["fwd"].shape == (m, n) and out["dgrad"].shape == (m, k) and out["wgrad"].shape == (n, k)
    assert mod.run_part("gemm_dims", mod.gemm_dims_shapes(True)[:3], tmp_path, "cpu", 1e18, 0.001) == 3
    assert (tmp_path / "gemm_dims.csv").read_text().count("\n") == 4
