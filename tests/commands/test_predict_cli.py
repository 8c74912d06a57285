"""`llmperf predict`: table, JSON, batch, trace, errors; the process never imports torch."""

import json
import subprocess
import sys
from pathlib import Path

GPT = ("torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py --num-layers 24 --hidden-size 2048 "
       "--num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 2 "
       "--global-batch-size 64 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --bf16 "
       "--vocab-size 50257").split()


def llmperf(*args: str, cwd: Path | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    probe = ("import sys\nfrom llmperf_hook.cli import main\ntry:\n    main(sys.argv[1:])\nfinally:\n"
             "    heavy = [m for m in ('torch', 'deepspeed', 'lightgbm', 'sklearn') if m in sys.modules]\n"
             "    sys.stderr.write('TORCH_LOADED=%s HEAVY=%s\\n' % ('torch' in sys.modules, ','.join(heavy)))\n")
    return subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, cwd=cwd,
                          input=stdin, timeout=120)


def test_predict_json_single_command_without_torch() -> None:
    out = llmperf("predict", "--cluster", "dgx-h100", "--format", "json", "--", *GPT)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["schema"] == 1 and data["config"]["tp"] == 2 and data["cluster"]["name"] == "dgx-h100"
    assert data["step_time_s"] > 0 and data["memory"]["fits"] is True
    assert "TORCH_LOADED=False HEAVY=\n" in out.stderr
    fitted = llmperf("predict", "--cluster", "dgx-a100", "--format", "json", "--", *GPT)  # shipped fitted profile
    assert fitted.returncode == 0, fitted.stderr
    assert "TORCH_LOADED=False HEAVY=\n" in fitted.stderr


def test_predict_table_default_cluster_warns() -> None:
    out = llmperf("predict", "--", *GPT)
    assert out.returncode == 0, out.stderr
    assert "step time" in out.stdout and "assuming dgx-h100" in out.stdout


def test_batch_json_keeps_order_and_reports_bad_lines(tmp_path: Path) -> None:
    lines = ["# a comment", "", " ".join(GPT), "torchrun pretrain_gpt.py --num-layers 2 --hidden-size 96 "
             "--num-attention-heads 5 --seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 "
             "--global-batch-size 1 --vocab-size 1000 --tensor-model-parallel-size 2",
             f"--cluster {tmp_path / 'mine.yaml'} -- " + " ".join(GPT)]
    (tmp_path / "mine.yaml").write_text("name: mine\ngpu: h100-sxm5-80gb\ngpus_per_node: 4\n"
                                        "intra_node_bandwidth_GBps: 300\ninter_node_bandwidth_GBps: 25\n")
    batch = tmp_path / "commands.txt"
    batch.write_text("\n".join(lines) + "\n")
    out = llmperf("predict", "--cluster", "dgx-h100", "--batch", str(batch), "--format", "json")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(rows) == 3
    assert rows[0]["cluster"]["name"] == "dgx-h100" and "error" in rows[1] and rows[2]["cluster"]["name"] == "mine"
    assert "1 of 3 commands failed" in out.stderr


def test_batch_resolves_relative_paths_against_the_file(tmp_path: Path) -> None:
    folder = tmp_path / "scenario"
    folder.mkdir()
    (folder / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "train_batch_size": 16,
                                                "bf16": {"enabled": True}, "zero_optimization": {"stage": 3}}))
    (folder / "commands.txt").write_text(
        "deepspeed --num_gpus 8 train.py --deepspeed_config ds.json --num-layers 4 --hidden-size 1024 "
        "--num-attention-heads 16 --seq-length 1024 --max-position-embeddings 1024 --vocab-size 50257 "
        "--micro-batch-size 1 --global-batch-size 16 --no-pipeline-parallel\n")
    out = llmperf("predict", "--batch", "scenario/commands.txt", "--format", "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    row = json.loads(out.stdout)
    assert "error" not in row, row
    assert row["config"]["zero_stage"] == 3


def test_trace_file_and_usage_errors(tmp_path: Path) -> None:
    trace = tmp_path / "step.json"
    out = llmperf("predict", "--cluster", "dgx-h100", "--trace", str(trace), "--", *GPT)
    assert out.returncode == 0, out.stderr
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e["tid"] for e in events if e.get("ph") == "X" and e["pid"] == 0} == {0, 1}
    bad = llmperf("predict", "--cluster", "nowhere", "--", *GPT)
    assert bad.returncode == 2 and "not found" in bad.stderr and "Traceback" not in bad.stderr
    empty = llmperf("predict")
    assert empty.returncode == 2 and "needs the launch command" in empty.stderr
