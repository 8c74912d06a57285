"""benchmarks/bench_validation.py --audit-s24 section (5): vTrain's simulator readings of its configs at pipeline 1
(one micro-batch of global batch / DP; no recompute on the last stage) tested against the rows."""

from __future__ import annotations

from pathlib import Path

from script_module import load_script

ROOT = Path(__file__).resolve().parents[2]

HEADER = ("row_id,source_id,model,num_layers,hidden_size,num_attention_heads,seq_length,micro_batch_size,"
          "global_batch_size,tp,pp,dp,recompute,precision,framework,gpu_type,gpus_per_node,num_gpus,iteration_time_s")


def _rows(tmp_path: Path) -> Path:
    """Two single-stage vTrain-style rows of one configuration at micro-batch 1 and 4 (times as S24 has them)."""
    common = "S24,GPT,12,1024,16,1024,{mbs},16,1,1,1,full,fp16,Megatron-DeepSpeed,A100,8,1,{t}"
    path = tmp_path / "rows.csv"
    path.write_text("\n".join([HEADER, "1," + common.format(mbs=1, t=0.349), "2," + common.format(mbs=4, t=0.164)])
                    + "\n", encoding="utf-8")
    return path


def test_no_recompute_reading_is_predicted_and_scored_beside_the_rows_as_read(tmp_path: Path, capsys) -> None:
    bench = load_script(ROOT / "benchmarks" / "bench_validation.py")
    runs = bench.build_measured_runs(bench.read_runs_csv(_rows(tmp_path)))
    report = bench.validate_runs(runs, clusters_dir=bench.configs_dir() / "clusters", num_worst=0)
    bench.audit_vtrain_readings(runs, report)
    out = capsys.readouterr().out
    assert "1 configurations measured at several micro-batch sizes; slowest / fastest median 2.13" in out
    line = next(x for x in out.splitlines() if x.strip().startswith("S24 2 pipeline-1 rows"))
    as_read, without = line.split("full recompute (as read)")[1].split("; no recompute (vTrain's simulator)")
    bias = [float(part.split("bias")[1].split("%")[0]) for part in (as_read, without)]
    assert bias[1] < bias[0] - 5  # the same rows without the recompute pass are predicted much faster


def _job(tmp_path: Path, times_by_mbs: dict[int, float], pp: int = 1) -> list:
    """Rows of one S23-style job and layout (3.6B TP 8 DP 8, global batch 512) at several micro-batch sizes."""
    bench = load_script(ROOT / "benchmarks" / "bench_validation.py")
    lines = [HEADER] + [f"{600 + mbs},S23,GPT 3.6B,30,3072,32,2048,{mbs},512,8,{pp},{64 // (8 * pp)},full,fp16,"
                        f"Megatron-DeepSpeed,A100,8,64,{t}" for mbs, t in times_by_mbs.items()]
    path = tmp_path / "job.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return bench.build_measured_runs(bench.read_runs_csv(path))


def test_larger_micro_batch_slower_beyond_5_percent_is_a_contradiction_and_the_odd_row_is_flagged(tmp_path) -> None:
    bench = load_script(ROOT / "benchmarks" / "bench_validation.py")
    # S23's 3.6B TP 8: micro-batch 64 measured twice micro-batch 32 over the same 512 samples
    runs = _job(tmp_path, {8: 5.178, 16: 5.018, 32: 4.972, 64: 9.839})
    pairs = bench.work_order_contradictions(runs)
    assert {(a.micro_batch_size, b.micro_batch_size) for a, b in pairs} == {(8, 64), (16, 64), (32, 64)}
    assert bench.contradicting_rows(pairs) == {"664"}  # the row in every pair, not its three neighbours
    # 16 -> 32 is 0.9 % cheaper, 8 -> 16 3 % cheaper: no contradiction; a lone pair is flagged whole
    lone = bench.work_order_contradictions(_job(tmp_path, {8: 5.0, 16: 5.4}))
    assert bench.contradicting_rows(lone) == {"608", "616"}
    assert bench.work_order_contradictions(_job(tmp_path, {8: 5.0, 16: 5.2})) == []


def test_pipelined_rows_are_not_judged(tmp_path) -> None:
    # with pipeline stages fewer micro-batches mean a larger bubble share: a larger micro-batch may be slower
    bench = load_script(ROOT / "benchmarks" / "bench_validation.py")
    assert bench.work_order_contradictions(_job(tmp_path, {2: 5.0, 8: 6.0}, pp=2)) == []


def test_report_gives_the_source_mape_without_the_flagged_rows(tmp_path, capsys) -> None:
    from types import SimpleNamespace

    bench = load_script(ROOT / "benchmarks" / "bench_validation.py")
    runs = _job(tmp_path, {16: 5.018, 32: 4.972, 64: 9.839})
    errors = {"616": -0.02, "632": 0.04, "664": -0.50}
    report = SimpleNamespace(rows=[SimpleNamespace(row_id=k, source_id="S23", signed_error=v)
                                   for k, v in errors.items()])
    bench.report_contradictions(runs, report)
    out = capsys.readouterr().out
    assert "2 pairs" in out and "rows flagged: 664" in out
    assert "S23 without those rows: MAPE 3.00% over 2 of 3 rows" in out
