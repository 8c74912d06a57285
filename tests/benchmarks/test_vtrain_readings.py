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
