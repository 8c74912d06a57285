"""benchmarks/bench_validation.py: the rows that contradict the work order at pipeline 1 (work_order.py, the rule
bench_tune_ranking.py flags its cells by; those are in test_ranking_flags.py) and the source MAPE without them."""

from __future__ import annotations

from pathlib import Path

from script_module import load_script

ROOT = Path(__file__).resolve().parents[2]

HEADER = ("row_id,source_id,model,num_layers,hidden_size,num_attention_heads,seq_length,micro_batch_size,"
          "global_batch_size,tp,pp,dp,recompute,precision,framework,gpu_type,gpus_per_node,num_gpus,iteration_time_s")


def _job(tmp_path: Path, times_by_mbs: dict[int, float], pp: int = 1) -> list:
    """Rows of one S23-style job and layout (3.6B TP 8 DP 8, global batch 512) at several micro-batch sizes."""
    bench = load_script(ROOT / "benchmarks" / "bench_validation.py")
    lines = [HEADER] + [f"{600 + mbs},S23,GPT 3.6B,30,3072,32,2048,{mbs},512,8,{pp},{64 // (8 * pp)},full,fp16,"
                        f"Megatron-DeepSpeed,A100,8,64,{t}" for mbs, t in times_by_mbs.items()]
    path = tmp_path / "job.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return bench.build_measured_runs(bench.read_runs_csv(path))


def _by_work(runs: list) -> dict[str, float]:
    """Predictions that order every pair by its work (one flat step): none of them excuses a contradiction."""
    return {r.row_id: 1.0 for r in runs}


def test_larger_micro_batch_slower_beyond_5_percent_is_a_contradiction_and_the_odd_row_is_flagged(tmp_path) -> None:
    bench = load_script(ROOT / "benchmarks" / "bench_validation.py")
    # S23's 3.6B TP 8: micro-batch 64 measured twice micro-batch 32 over the same 512 samples
    runs = _job(tmp_path, {8: 5.178, 16: 5.018, 32: 4.972, 64: 9.839})
    pairs = bench.work_order_contradictions(runs, _by_work(runs))
    assert {(a.micro_batch_size, b.micro_batch_size) for a, b in pairs} == {(8, 64), (16, 64), (32, 64)}
    assert bench.contradicting_rows(pairs) == {"664"}  # the row in every pair, not its three neighbours
    # 16 -> 32 is 0.9 % cheaper, 8 -> 16 3 % cheaper: no contradiction; a lone pair is flagged whole
    lone = _job(tmp_path, {8: 5.0, 16: 5.4})
    assert bench.contradicting_rows(bench.work_order_contradictions(lone, _by_work(lone))) == {"608", "616"}
    kept = _job(tmp_path, {8: 5.0, 16: 5.2})
    assert bench.work_order_contradictions(kept, _by_work(kept)) == []


def test_rows_follow_the_ranking_rule_more_work_over_5_percent_cheaper(tmp_path) -> None:
    # work_order.contradicts_work_order, as bench_tune_ranking's cells: the smaller micro-batch (more work) 4.9 %
    # cheaper is within 5 % (the larger one is 5.15 % slower: a 'larger micro-batch > 5 % slower' rule flagged it)
    bench = load_script(ROOT / "benchmarks" / "bench_validation.py")
    runs = _job(tmp_path, {8: 0.951 * 5.4, 16: 5.4})
    assert bench.work_order_contradictions(runs, _by_work(runs)) == []


def test_a_pair_the_prediction_orders_the_same_way_is_not_flagged(tmp_path) -> None:
    # the predictor prices the framework's per-shape kernels: where it too makes the smaller micro-batch cheaper, the
    # two run different ops and the smaller one's work is not a superset (work_order.py)
    bench = load_script(ROOT / "benchmarks" / "bench_validation.py")
    runs = _job(tmp_path, {8: 5.0, 16: 5.4})
    assert bench.work_order_contradictions(runs, {"608": 5.0, "616": 5.3}) == []
    # a prediction a hair lower than its neighbour's reproduces nothing: the 8 % contradiction stands
    assert len(bench.work_order_contradictions(runs, {"608": 5.29, "616": 5.3})) == 1


def test_pipelined_rows_are_not_judged(tmp_path) -> None:
    # with pipeline stages fewer micro-batches mean a larger bubble share: a larger micro-batch may be slower
    bench = load_script(ROOT / "benchmarks" / "bench_validation.py")
    runs = _job(tmp_path, {2: 5.0, 8: 6.0}, pp=2)
    assert bench.work_order_contradictions(runs, _by_work(runs)) == []


def test_report_gives_the_source_mape_without_the_flagged_rows(tmp_path, capsys) -> None:
    from types import SimpleNamespace

    bench = load_script(ROOT / "benchmarks" / "bench_validation.py")
    runs = _job(tmp_path, {16: 5.018, 32: 4.972, 64: 9.839})
    errors = {"616": -0.02, "632": 0.04, "664": -0.50}
    measured = {r.row_id: r.iteration_time_s for r in runs}
    report = SimpleNamespace(rows=[SimpleNamespace(row_id=k, source_id="S23", signed_error=v,
                                                   predicted_s=measured[k] * (1 + v)) for k, v in errors.items()])
    bench.report_contradictions(runs, report)
    out = capsys.readouterr().out
    assert "2 pairs" in out and "rows flagged: 664" in out
    assert "S23 without those rows: MAPE 3.00% over 2 of 3 rows" in out


def test_a_source_left_without_rows_prints_no_mape(tmp_path, capsys) -> None:
    from types import SimpleNamespace

    bench = load_script(ROOT / "benchmarks" / "bench_validation.py")
    runs = _job(tmp_path, {8: 5.0, 16: 5.4})  # one lone pair: both rows flagged
    report = SimpleNamespace(rows=[SimpleNamespace(row_id=r.row_id, source_id="S23", signed_error=0.01,
                                                   predicted_s=5.0) for r in runs])
    bench.report_contradictions(runs, report)
    assert "S23 without those rows: MAPE - over 0 of 2 rows" in capsys.readouterr().out
