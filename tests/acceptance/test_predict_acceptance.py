"""Issues 2-3 (`explain`, `predict`) and issue 5's `predict --batch`, as their acceptance criteria read, through the
real CLI: derived values and their sources for Megatron-LM (torchrun, srun inside an allocation, sbatch) and DeepSpeed
(hostfile with include, ds_config triad) commands; what the frameworks reject exits 2 with one error paragraph; the
memory verdict both ways; the JSON keys; --trace lanes; batch files (order, comments, blank and continued lines, a
failing line as {"error"} with exit 0, relative paths against the file's folder, the command line's own files
against the working directory) agreeing with single predictions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .cli import error_lines, run_cli

SMALL = ["pretrain_gpt.py", "--num-layers", "24", "--hidden-size", "2048", "--num-attention-heads", "16",
         "--seq-length", "2048", "--max-position-embeddings", "2048", "--micro-batch-size", "2",
         "--global-batch-size", "64", "--bf16", "--vocab-size", "50257"]
"""A GPT-1.3B-like Megatron-LM job: fits one 80 GB GPU comfortably."""

GPT3 = ["pretrain_gpt.py", "--tensor-model-parallel-size", "8", "--pipeline-model-parallel-size", "16", "--num-layers",
        "96", "--hidden-size", "12288", "--num-attention-heads", "96", "--seq-length", "2048",
        "--max-position-embeddings", "2048", "--micro-batch-size", "1", "--global-batch-size", "1536", "--bf16",
        "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", "gpt2-vocab.json", "--merge-file", "gpt2-merges.txt",
        "--use-distributed-optimizer", "--sequence-parallel", "--num-layers-per-virtual-pipeline-stage", "2"]
"""GPT-3 175B as Narayanan et al. 2021 laid it out, interleaved: 1,024 GPUs at TP 8 PP 16."""

LLAMA3_8B = ["pretrain_gpt.py", "--tensor-model-parallel-size", "4", "--pipeline-model-parallel-size", "2",
             "--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32", "--group-query-attention",
             "--num-query-groups", "8", "--swiglu", "--ffn-hidden-size", "14336", "--seq-length", "8192",
             "--max-position-embeddings", "8192", "--micro-batch-size", "1", "--global-batch-size", "128", "--bf16",
             "--vocab-size", "128256", "--normalization", "RMSNorm", "--position-embedding-type", "rope",
             "--untie-embeddings-and-output-weights"]


def _json(args: list[str], capsys) -> dict:
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    return json.loads(out)


def _batch(path: Path, capsys, *options: str) -> tuple[list[dict], str]:
    code, out, err = run_cli(["predict", *options, "--batch", str(path), "--format", "json"], capsys)
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()], err


def test_batch_reads_the_command_lines_own_files_from_the_working_directory(tmp_path: Path, monkeypatch,
                                                                           capsys) -> None:
    """`--cluster mine.yaml` names ./mine.yaml; the batch file's folder only anchors paths written in the file."""
    (tmp_path / "mine.yaml").write_text("name: my-a100s\ngpu: a100-sxm4-80gb\ngpus_per_node: 8\n"
                                        "intra_node_bandwidth_GBps: 300\ninter_node_bandwidth_GBps: 25\n")
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "inner.yaml").write_text("name: inner-h100s\ngpu: h100-sxm5-80gb\ngpus_per_node: 8\n"
                                     "intra_node_bandwidth_GBps: 450\ninter_node_bandwidth_GBps: 50\n")
    line = " ".join(["torchrun", "--nproc-per-node", "8", *SMALL])
    (runs / "cmds.txt").write_text(f"{line}\n--cluster inner.yaml -- {line}\n")
    monkeypatch.chdir(tmp_path)
    results, _ = _batch(Path("runs/cmds.txt"), capsys, "--cluster", "mine.yaml")
    assert [r["cluster"]["name"] for r in results] == ["my-a100s", "inner-h100s"]


def test_batch_cluster_preset_beside_a_folder_of_its_name(tmp_path: Path, monkeypatch, capsys) -> None:
    """`--cluster dgx-h100` in a folder holding a `dgx-h100/` directory is the preset, as in a single predict (only a
    file of that name wins over a preset); it was made /cwd/dgx-h100 and every line failed 'it is a folder'."""
    (tmp_path / "dgx-h100").mkdir()
    (tmp_path / "cmds.txt").write_text(" ".join(["torchrun", "--nproc-per-node", "8", *SMALL]) + "\n")
    monkeypatch.chdir(tmp_path)
    results, _ = _batch(Path("cmds.txt"), capsys, "--cluster", "dgx-h100")
    assert [r["cluster"]["name"] for r in results] == ["dgx-h100"]


def _explain(argv: list[str], capsys, *options: str) -> dict:
    return _json(["explain", "--format", "json", *options, "--", *argv], capsys)


def test_explain_megatron_torchrun_derives_every_value_with_its_source(capsys) -> None:
    data = _explain(["torchrun", "--nnodes", "128", "--nproc-per-node", "8", "--rdzv-backend", "c10d",
                     "--rdzv-endpoint", "head:29500", *GPT3], capsys)
    expected = {"world_size": 1024, "nnodes": 128, "nproc_per_node": 8, "tp": 8, "pp": 16, "vpp": 3, "cp": 1, "dp": 8,
                "ep": 1, "micro_batch_size": 1, "global_batch_size": 1536, "num_microbatches": 192,
                "padded_vocab_size": 51200, "sequence_parallel": True, "zero_stage": 0, "precision": "bf16",
                "framework": "megatron", "launcher": "torchrun", "num_query_groups": 96, "ffn_hidden_size": 49152}
    assert {k: data[k] for k in expected} == expected
    sources = data["sources"]
    assert sources["tp"] == "argv --tensor-model-parallel-size" and sources["nnodes"] == "launcher --nnodes"
    assert sources["dp"].startswith("derived") and "1024" in sources["dp"]
    assert sources["vocab_size"].startswith("framework default") and "GPT2BPETokenizer" in sources["vocab_size"]
    assert sources["num_microbatches"].startswith("derived GBS / (MBS*DP)")


@pytest.mark.parametrize(("launch", "env", "size"), [
    (["srun", "python"], {"SLURM_NNODES": "4", "SLURM_NTASKS_PER_NODE": "8", "SLURM_NTASKS": "32"}, (32, 4, 8)),
    (["srun", "-N", "2", "--ntasks-per-node=8", "python"], {}, (16, 2, 8)),
    (["python"], {"WORLD_SIZE": "16"}, (16, None, None)),
    (["torchrun"], {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "4"}, (8, 2, 4)),
    (["torchrun", "--nnodes", "2:4", "--nproc-per-node", "8"], {}, (32, 4, 8)),
    (["python", "-m", "torch.distributed.launch", "--nproc_per_node=8", "--use_env"], {}, (8, 1, 8)),
])
def test_world_size_from_each_launcher(launch: list[str], env: dict[str, str], size: tuple, monkeypatch,
                                       capsys) -> None:
    for key in ("SLURM_NNODES", "SLURM_NTASKS_PER_NODE", "SLURM_NTASKS", "SLURM_JOB_NUM_NODES", "SLURM_GPUS_ON_NODE",
                "WORLD_SIZE", "PET_NNODES", "PET_NPROC_PER_NODE", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    argv = [*launch, *LLAMA3_8B[:-10], "--global-batch-size", "64", *LLAMA3_8B[-8:]]
    data = _explain(argv, capsys)
    world, nnodes, per_node = size
    assert data["world_size"] == world and data["dp"] == world // 8
    assert data["num_microbatches"] == 64 // (data["micro_batch_size"] * data["dp"])
    if nnodes is not None:
        assert (data["nnodes"], data["nproc_per_node"]) == (nnodes, per_node)
    for key in env:
        if key != "SLURM_NTASKS":
            assert any(key in str(src) for src in data["sources"].values()), (key, data["sources"])


def test_explain_sbatch_script_reads_its_allocation_and_launch_line(tmp_path: Path, monkeypatch, capsys) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --nodes=4\n#SBATCH --ntasks-per-node=8\n#SBATCH --gpus-per-node=8\n"
                      "export CUDA_DEVICE_MAX_CONNECTIONS=1\nCP=2\n"
                      f"srun python {' '.join(LLAMA3_8B)} --context-parallel-size $CP\n")
    monkeypatch.chdir(tmp_path)
    data = _explain(["sbatch", "job.sh"], capsys)
    assert (data["world_size"], data["tp"], data["pp"], data["cp"], data["dp"]) == (32, 4, 2, 2, 2)
    assert data["num_microbatches"] == 64 and data["padded_vocab_size"] == 128512  # ceil(128256/512)*512
    assert (data["num_query_groups"], data["ffn_hidden_size"], data["swiglu"]) == (8, 14336, True)
    overridden = _explain(["sbatch", "-N", "2", "job.sh"], capsys)
    assert (overridden["world_size"], overridden["dp"], overridden["num_microbatches"]) == (16, 1, 128)


def test_explain_deepspeed_hostfile_include_and_ds_config(tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "hosts").write_text("worker-1 slots=8\nworker-2 slots=8\nworker-3 slots=4\n")
    (tmp_path / "ds.json").write_text(json.dumps({
        "train_batch_size": "auto", "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
        "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}, "bf16": {"enabled": True}}))
    monkeypatch.chdir(tmp_path)
    argv = ["deepspeed", "--hostfile", "hosts", "--include", "worker-1:0,1,2,3@worker-3", "train.py",
            "--deepspeed_config", "ds.json"]
    data = _explain(argv, capsys, "--model", "llama2-7b")
    assert (data["world_size"], data["nnodes"], data["dp"]) == (8, 2, 8)
    assert (data["micro_batch_size"], data["num_microbatches"], data["global_batch_size"]) == (4, 2, 64)
    assert (data["zero_stage"], data["offload_optimizer"], data["precision"], data["framework"]) == (
        3, "cpu", "bf16", "deepspeed")
    assert data["sources"]["world_size"] == "hostfile hosts"
    assert data["sources"]["zero_stage"] == "config file ds.json zero_optimization.stage"
    assert (data["num_layers"], data["hidden_size"]) == (32, 4096)
    assert "--model llama2-7b" in data["sources"]["num_layers"]


def test_explain_hf_trainer_zero3_with_auto_and_a_local_config_json(tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "mdl").mkdir()
    (tmp_path / "mdl" / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32000,
        "max_position_embeddings": 4096, "tie_word_embeddings": False}))
    (tmp_path / "z3.json").write_text(json.dumps({
        "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
        "zero_optimization": {"stage": 3}, "bf16": {"enabled": "auto"}}))
    (tmp_path / "hostfile").write_text("node1 slots=8\nnode2 slots=8\n")
    monkeypatch.chdir(tmp_path)
    data = _explain(["deepspeed", "--hostfile", "hostfile", "run_clm.py", "--model_name_or_path", "mdl", "--deepspeed",
                     "z3.json", "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "8", "--bf16",
                     "--block_size", "2048", "--gradient_checkpointing", "--output_dir", "out"], capsys)
    assert (data["world_size"], data["micro_batch_size"], data["num_microbatches"], data["global_batch_size"]) == (
        16, 4, 8, 512)
    assert (data["hidden_size"], data["ffn_hidden_size"], data["seq_length"], data["zero_stage"]) == (
        4096, 11008, 2048, 3)
    assert (data["precision"], data["recompute"], data["framework"]) == ("bf16", "full", "hf-deepspeed")
    assert data["sources"]["hidden_size"] == "config file mdl/config.json"


REJECTED = [
    (["torchrun", "--nproc-per-node", "8", *SMALL, "--tensor-model-parallel-size", "3"], ["3", "8", "world"]),
    (["torchrun", "--nproc-per-node", "8", *SMALL, "--num-attention-heads", "4", "--tensor-model-parallel-size", "8"],
     ["4", "8", "heads % TP"]),
    (["torchrun", "--nproc-per-node", "8", *SMALL, "--global-batch-size", "60"],  # the last repeated flag wins
     ["60", "micro", "Valid global batch sizes"]),
    (["torchrun", "--nproc-per-node", "8", *SMALL, "--fp16"], ["--fp16", "--bf16"]),
    (["torchrun", "--nproc-per-node", "8", *SMALL, "--num-experts", "6", "--expert-model-parallel-size", "4"],
     ["6", "4", "experts % EP"]),
    (["torchrun", "--nproc-per-node", "8", *SMALL, "--overlap-param-gather"], ["--use-distributed-optimizer"]),
    (["torchrun", "--nproc-per-node", "8", *SMALL, "--seq-length", "4096"], ["max-position-embeddings", "4096"]),
    (["torchrun", "--nproc-per-node", "8", *SMALL, "--pipeline-model-parallel-size", "2",
      "--num-layers-per-virtual-pipeline-stage", "5"], ["12", "5"]),
    (["torchrun", "--nproc-per-node", "8", *SMALL, "--recompute-granularity", "full"], ["--recompute-method"]),
    (["torchrun", "--nproc-per-node", "8", *SMALL, "--group-query-attention", "--num-query-groups", "3",
      "--tensor-model-parallel-size", "2"], ["num-query-groups 3", "2"]),
]


@pytest.mark.parametrize(("argv", "fragments"), REJECTED, ids=[str(i) for i in range(len(REJECTED))])
def test_what_megatron_rejects_exits_2_with_one_paragraph(argv: list[str], fragments: list[str], capsys) -> None:
    for command in ("explain", "predict"):
        code, out, err = run_cli([command, "--cluster", "dgx-a100", "--", *argv] if command == "predict"
                                 else [command, "--", *argv], capsys)
        assert code == 2 and out == "" and "Traceback" not in err
        assert len(error_lines(err)) == 1 and len(err.strip().splitlines()) == 1, err
        assert all(fragment in err for fragment in fragments), err


DS_REJECTED = [
    ({"train_batch_size": 60, "train_micro_batch_size_per_gpu": 2}, ["60", "_batch_assertion"]),
    ({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2}, ["64", "32"]),
    ({"gradient_accumulation_steps": 2}, ["train_batch_size or train_micro_batch_size_per_gpu"]),
    ({"train_batch_size": 64, "zero_optimization": {"stage": 4}}, ["stage", "4"]),
    ({"train_batch_size": 64, "fp16": {"enabled": True}, "bf16": {"enabled": True}}, ["fp16", "bf16"]),
]


@pytest.mark.parametrize(("ds_config", "fragments"), DS_REJECTED, ids=[str(i) for i in range(len(DS_REJECTED))])
def test_what_deepspeed_rejects_exits_2_with_one_paragraph(ds_config: dict, fragments: list[str], tmp_path: Path,
                                                           monkeypatch, capsys) -> None:
    (tmp_path / "ds.json").write_text(json.dumps(ds_config))
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["explain", "--model", "llama2-7b", "--", "deepspeed", "--num_gpus", "8", "train.py",
                              "--deepspeed_config", "ds.json"], capsys)
    assert code == 2 and out == "" and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert all(fragment in err for fragment in fragments), err


def test_deepspeed_launcher_rejections(tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "ds.json").write_text('{"train_micro_batch_size_per_gpu": 1}')
    (tmp_path / "hosts").write_text("a slots=8\n")
    monkeypatch.chdir(tmp_path)
    for launch, fragment in ((["--hostfile", "missing-hosts"], "missing-hosts"),
                             (["--hostfile", "hosts", "--num_gpus", "4", "--exclude", "a:0"], "--exclude")):
        code, _, err = run_cli(["explain", "--model", "llama2-7b", "--", "deepspeed", *launch, "train.py",
                                "--deepspeed_config", "ds.json"], capsys)
        assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1, err


PREDICT_KEYS = {"schema", "step_time_s", "tokens_per_s", "mfu", "memory", "breakdown", "config", "warnings",
                "predictor"}


def test_predict_json_and_the_memory_verdict_both_ways(capsys) -> None:
    fits = _json(["predict", "--cluster", "dgx-a100", "--format", "json", "--", "torchrun", "--nproc-per-node", "8",
                  *SMALL], capsys)
    assert PREDICT_KEYS <= set(fits) and fits["schema"] == 1
    memory = fits["memory"]
    assert memory["fits"] is True and memory["peak_bytes_per_gpu"] < memory["capacity_bytes"] == 80 * 2**30
    assert fits["step_time_s"] > 0 and 0 < fits["mfu"] < 0.75 and fits["config"]["dp"] == 8
    tokens = 64 * 2048
    assert fits["tokens_per_s"] == pytest.approx(tokens / fits["step_time_s"], rel=1e-3)
    assert sum(fits["breakdown"].values()) == pytest.approx(fits["step_time_s"], rel=0.02)
    assert {"gemm", "attention"} <= set(fits["predictor"])
    # GPT-3 175B on one 8-GPU node: valid for Megatron, far beyond 80 GB; predict still answers (exit 0)
    argv = ["torchrun", "--nproc-per-node", "8", *GPT3, "--pipeline-model-parallel-size", "1",
            "--num-layers-per-virtual-pipeline-stage", "96", "--global-batch-size", "8"]
    big = _json(["predict", "--cluster", "dgx-a100", "--format", "json", "--", *argv], capsys)
    assert big["memory"]["fits"] is False and big["memory"]["peak_bytes_per_gpu"] > big["memory"]["capacity_bytes"]
    code, out, _ = run_cli(["predict", "--cluster", "dgx-a100", "--", *argv], capsys)
    assert code == 0 and "DOES NOT FIT" in out


def test_trace_has_one_lane_per_pipeline_stage_and_spares_user_files(tmp_path: Path, capsys) -> None:
    argv = ["torchrun", "--nproc-per-node", "8", *SMALL, "--pipeline-model-parallel-size", "4"]
    trace = tmp_path / "step.json"
    code, out, err = run_cli(["predict", "--cluster", "dgx-a100", "--trace", str(trace), "--", *argv], capsys)
    assert code == 0, err
    events = json.loads(trace.read_text())["traceEvents"]
    lanes = {e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
    assert {f"pipeline stage {i}" for i in range(4)} <= lanes
    spans = [e for e in events if e.get("ph") == "X"]
    assert spans and all(e["dur"] >= 0 for e in spans)
    assert any("bubble" in e["name"].lower() for e in spans)
    theirs = tmp_path / "config.json"
    theirs.write_text('{"mine": true}')
    code, _, err = run_cli(["predict", "--trace", str(theirs), "--", *argv], capsys)
    assert code == 2 and theirs.read_text() == '{"mine": true}' and "not a trace" in err


def test_batch_file_order_comments_failures_and_relative_paths(tmp_path: Path, monkeypatch, capsys) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
                                              "zero_optimization": {"stage": 2}, "bf16": {"enabled": True}}))
    (jobs / "hosts").write_text("n1 slots=8\nn2 slots=8\n")
    megatron = " ".join(["torchrun", "--nproc-per-node", "8", *SMALL])
    deepspeed = "deepspeed --hostfile hosts train.py --deepspeed_config ds.json"
    (jobs / "cmds.txt").write_text("\n".join([
        "# cluster history, one launch per line",
        megatron,
        "",
        f"--model llama2-7b -- {deepspeed}   # trailing comment",
        f"{megatron} --tensor-model-parallel-size 3",
        "   # an indented comment",
        f"llmperf predict --model llama2-7b -- {deepspeed.replace('hosts', 'no-such-hosts')}",
        "torchrun --nproc-per-node 8 \\",
        "  " + " ".join(SMALL) + " --pipeline-model-parallel-size 2",
        '"unbalanced quote',
    ]) + "\n")
    monkeypatch.chdir(tmp_path / "..")  # relative paths in the file resolve against its folder, not the cwd
    results, err = _batch(jobs / "cmds.txt", capsys, "--cluster", "dgx-a100")
    assert len(results) == 6
    ok = [r for r in results if "error" not in r]
    assert [r["config"]["dp"] for r in ok] == [8, 16, 4]
    assert results[1]["config"]["num_microbatches"] == 4 and results[1]["config"]["zero_stage"] == 2
    errors = [r["error"] for r in results if "error" in r]
    assert [e.split(":")[0] for e in errors] == ["line 5", "line 7", "line 10"]
    assert "tensor-model-parallel-size 3" in errors[0] and "no-such-hosts" in errors[1]
    assert "3 of 6 commands failed" in err
    single = _json(["predict", "--cluster", "dgx-a100", "--format", "json", "--", *megatron.split()], capsys)
    assert results[0]["step_time_s"] == single["step_time_s"] and results[0]["memory"] == single["memory"]


def test_batch_from_stdin_and_in_table_form(monkeypatch, capsys) -> None:
    import io
    import sys

    line = " ".join(["torchrun", "--nproc-per-node", "8", *SMALL])
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{line}\n{line} --fp16\n"))
    code, out, err = run_cli(["predict", "--cluster", "dgx-h100", "--batch", "-"], capsys)
    assert code == 0 and out.count("step time") == 1 and "line 2: error:" in out and "1 of 2" in err
