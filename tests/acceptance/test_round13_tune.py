"""Issue 7, round 13: `llmperf tune` used as a user would, on Megatron-LM, Megatron-DeepSpeed and DeepSpeed jobs,
checked against what the frameworks themselves do with the command tune hands back (sources cited per test)."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from tests.acceptance.cli import error_lines, run_cli

MDS_PP2 = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--tensor-model-parallel-size", "4",
           "--pipeline-model-parallel-size", "2", "--num-layers", "32", "--hidden-size", "4096",
           "--num-attention-heads", "32", "--seq-length", "2048", "--max-position-embeddings", "2048",
           "--micro-batch-size", "1", "--global-batch-size", "512", "--bf16", "--vocab-size", "50257", "--deepspeed",
           "--deepspeed_config", "ds.json", "--zero-stage", "1"]
MDS_DS = {"train_batch_size": 512, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 512,
          "zero_optimization": {"stage": 1}, "bf16": {"enabled": True}, "gradient_clipping": 1.0}


@pytest.fixture
def home(tmp_path: Path, monkeypatch) -> Path:
    """The user's launch folder as the working directory; an empty llmperf store (no calibration moves a figure)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / ".llmperf"))
    return tmp_path


def _tune_json(args: list[str], capsys) -> dict:
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", *args], capsys)
    assert code == 0, err
    return json.loads(out)


def test_megatron_deepspeed_pipe_model_never_gets_block_recompute(home: Path, capsys) -> None:
    """Megatron-DeepSpeed's GPTModelPipe (built without --no-pipeline-parallel, at PP 1 too) checkpoints only
    --checkpoint-activations or full *uniform* recompute ('deepspeed's pipeline doesn't support the block recompute
    method': megatron/model/gpt_model.py sets activation_checkpoint_interval 0 otherwise), so a block row under the
    PipelineEngine is the no-recompute job. Tune ranked such rows first, priced with recomputation they never get."""
    (home / "ds.json").write_text(json.dumps(MDS_DS))
    (home / "s.yaml").write_text("recompute: [block]\nmicro_batch_size: [1]\ntensor_parallel: [4]\n")
    data = _tune_json(["--top", "20", "--search", "s.yaml", "--", *MDS_PP2], capsys)
    engine_rows = [r for r in data["top"] if r["pp"] > 1 or r["zero_stage"] < 2]
    assert engine_rows and all(r["recompute"] != "block" for r in engine_rows), engine_rows[:3]
    # Without the engine (PP 1, ZeRO-2/3: --apply adds --no-pipeline-parallel) GPTModel's ParallelTransformer
    # recomputes block layers, and tune still offers them.
    assert any(r["recompute"] == "block" for r in data["top"] if r["pp"] == 1 and r["zero_stage"] >= 2)


GPT_16 = ["torchrun", "--nnodes", "2", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "32",
          "--hidden-size", "4096", "--num-attention-heads", "32", "--seq-length", "4096", "--max-position-embeddings",
          "4096", "--micro-batch-size", "1", "--global-batch-size", "512", "--tensor-model-parallel-size", "4",
          "--pipeline-model-parallel-size", "2", "--bf16", "--vocab-size", "32000"]


def _serve_fifo(path: Path, text: str, stop: threading.Event) -> None:
    """A pipe as `--search <(printf ...)` hands one: the text to the first reader, nothing to any later one."""
    sent = False
    while not stop.is_set():
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # no reader yet (ENXIO)
            time.sleep(0.005)
            continue
        with os.fdopen(fd, "w") as pipe:
            pipe.write("" if sent else text)
        sent = True
        time.sleep(0.05)  # the reader sees EOF before the next open


def test_search_from_a_pipe_is_read_once(home: Path, capsys) -> None:
    """`--search <(printf ...)` names /dev/fd/N, a pipe: it was refused as 'no such file' (Path.is_file is False for
    a pipe), and the file was read three times (space, ignored keys, fork pins), the later reads getting nothing."""
    fifo = home / "space.fifo"
    os.mkfifo(fifo)
    stop = threading.Event()
    writer = threading.Thread(target=_serve_fifo, args=(fifo, "micro_batch_size: [2]\nzero_stage: [1]\n", stop))
    writer.start()
    try:
        code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--top", "1", "--search",
                                  str(fifo), "--", *GPT_16], capsys)
    finally:
        stop.set()
        writer.join()
    assert code == 0, err
    assert json.loads(out)["knobs"]["searched"]["micro_batch_size"] == [2]
    assert "zero_stage is not searched for a megatron command" in err  # the ignored key, read from the same text


def test_search_whose_every_layout_is_invalid_says_so(home: Path, capsys) -> None:
    """TP 3 on 16 GPUs: every candidate but the command's own breaks world % (tp*pp*cp); tune ranked the command
    alone and --apply said 'your command is already the fastest configuration found', with no word that the
    search space held nothing this job can run."""
    (home / "s.yaml").write_text("tensor_parallel: [3]\n")
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--top", "2", "--search", "s.yaml", "--", *GPT_16],
                             capsys)
    assert code == 0, err
    warning = [ln for ln in err.splitlines() if "every layout it adds" in ln]
    assert len(warning) == 1 and "s.yaml" in warning[0] and "world % (tp*pp*cp) != 0" in warning[0], err
    (home / "ok.yaml").write_text("tensor_parallel: [1, 3]\n")  # one valid value: no such warning
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--top", "2", "--search", "ok.yaml", "--", *GPT_16],
                             capsys)
    assert code == 0 and "every layout it adds" not in err, err


def test_megatron_deepspeed_pipe_model_block_recompute_is_priced_as_none(home: Path, capsys) -> None:
    """The same rule for the command itself: predict priced the user's block recompute under GPTModelPipe as
    recomputation (74.3 GiB, fits) where the job recomputes nothing (87.7 GiB, over the 80 GB H100), so tune's
    'you' row said it fits and its table row (merged with no recompute) said it does not."""
    (home / "ds.json").write_text(json.dumps({**MDS_DS, "train_micro_batch_size_per_gpu": 2,
                                              "gradient_accumulation_steps": 64}))
    argv = [*MDS_PP2, "--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "4"]
    argv[argv.index("--tensor-model-parallel-size") + 1] = "1"
    argv[argv.index("--micro-batch-size") + 1] = "2"
    code, out, err = run_cli(["predict", "--format", "json", "--cluster", "dgx-h100", "--", *argv], capsys)
    assert code == 0, err
    assert json.loads(out)["config"]["recompute"] == "none"
    said = [w for w in json.loads(out)["warnings"] if "block under DeepSpeed's PipelineEngine recomputes nothing" in w]
    assert len(said) == 1, out
    # At PP 1 with --no-pipeline-parallel, GPTModel's ParallelTransformer._checkpointed_forward runs block recompute.
    (home / "ds.json").write_text(json.dumps({**MDS_DS, "train_micro_batch_size_per_gpu": 2,
                                              "gradient_accumulation_steps": 32}))
    argv[argv.index("--pipeline-model-parallel-size") + 1] = "1"
    argv.append("--no-pipeline-parallel")
    code, out, err = run_cli(["predict", "--format", "json", "--cluster", "dgx-h100", "--", *argv], capsys)
    assert code == 0, err
    assert json.loads(out)["config"]["recompute"].startswith("full") and "recomputes nothing" not in out, out


def test_sequence_parallel_needs_the_ranks_sequence_divisible_by_tp(home: Path, capsys) -> None:
    """Megatron scatters the embeddings' output along the sequence over the TP ranks under --sequence-parallel and
    asserts 'First dimension of the tensor should be divisible by tensor parallel size' (megatron/core/
    tensor_parallel/mappings.py _split_along_first_dim; the local sequence is seq / CP). A 4,100-token job at TP 8
    with SP was accepted by explain and offered by tune; it stops at the first forward."""
    gpt = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "24", "--hidden-size", "2048",
           "--num-attention-heads", "16", "--seq-length", "4100", "--max-position-embeddings", "4100",
           "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16", "--vocab-size", "50257"]
    code, _, err = run_cli(["explain", "--", *gpt, "--tensor-model-parallel-size", "8", "--sequence-parallel"], capsys)
    assert code == 2 and len(error_lines(err)) == 1 and "--sequence-parallel" in err and "Traceback" not in err, err
    # Megatron-LM's validate_args (megatron/training/arguments.py) and Megatron-DeepSpeed's (megatron/arguments.py)
    # have no such check: the message must not read as an argument error the framework would give at start-up.
    assert "4100 tokens" in err and "validate_args accept" in err and "first forward" in err, err
    (home / "s.yaml").write_text("tensor_parallel: [2, 8]\nrecompute: [none]\ndistributed_optimizer: [true]\n")
    data = _tune_json(["--top", "30", "--search", "s.yaml", "--apply", "--dry-run", "--", *gpt,
                       "--tensor-model-parallel-size", "2"], capsys)
    assert data["search"]["invalid_by_rule"]["sequence parallel needs (seq_length / cp) % tp == 0"] > 0
    for row in data["top"]:
        assert not row["sequence_parallel"] or (4100 // row["cp"]) % row["tp"] == 0, row["layout"]
    code, _, err = run_cli(["explain", "--", *data["applied"]["argv"]], capsys)
    assert code == 0, err


HF_FSDP = ["torchrun", "--nproc-per-node", "8", "run_clm.py", "--model_name_or_path", "llama",
           "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "2", "--bf16", "--do_train",
           "--output_dir", "out", "--block_size", "2048", "--fsdp", "full_shard auto_wrap"]
LLAMA_7B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
            "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
            "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}


def test_hf_trainer_without_deepspeed_gets_its_batch_flags_rewritten(home: Path, capsys) -> None:
    """A Hugging Face Trainer job under FSDP (framework torch, no ds_config) that does not fit at
    --per_device_train_batch_size 8: tune searched the micro-batch, found 4 fits, then printed 'change it by hand' for
    every row and --apply launched the user's own command, 'already the fastest configuration found' (it is over
    the GPU's memory). The Trainer's own flags set it (TrainingArguments.per_device_train_batch_size /
    gradient_accumulation_steps), as tune rewrites them for hf-deepspeed."""
    (home / "llama").mkdir()
    (home / "llama" / "config.json").write_text(json.dumps(LLAMA_7B))
    data = _tune_json(["--top", "3", "--apply", "--dry-run", "--", *HF_FSDP], capsys)
    best, applied = data["top"][0], data["applied"]["argv"]
    assert not data["baseline"]["fits"] and best["micro_batch_size"] < 8
    assert applied != HF_FSDP and applied[applied.index("--per_device_train_batch_size") + 1] == str(
        best["micro_batch_size"])
    assert {c["key"] for c in best["changes"]} == {"--per_device_train_batch_size", "--gradient_accumulation_steps"}
    code, out, err = run_cli(["explain", "--format", "json", "--", *applied], capsys)
    assert code == 0, err
    resolved = json.loads(out)
    assert (resolved["micro_batch_size"], resolved["global_batch_size"]) == (best["micro_batch_size"], 128)


def test_torch_script_of_its_own_keeps_its_micro_batch(home: Path, capsys) -> None:
    """A DDP script with no batch flag sets its micro-batch in its own code: tune cannot change it from the
    command, so it is kept, not searched (the rows it offered could only be applied by hand)."""
    (home / "train.py").write_text("import torch\n")
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--hardware", "mi300x-192gb",
                              "--model", "llama2-7b", "--", "torchrun", "--nproc-per-node", "8", "train.py"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert "micro_batch_size" not in data["knobs"]["searched"] and data["knobs"]["kept"]["micro_batch_size"] == 1
    assert all(not row["changes"] for row in data["top"])


def test_launcher_option_and_script_flag_of_one_name_are_told_apart(home: Path, capsys) -> None:
    """`accelerate launch --gradient_accumulation_steps 2 run_clm.py ...`: the Trainer hands Accelerator its own
    GradientAccumulationPlugin, so the launcher's value is not the job's (explain: 1, the Trainer default). --apply
    rewrote the launcher's option (2->4) and left the Trainer at 1 (global batch 16, not 64), and the change list,
    comparing flags by name over the whole command, reported the launcher's value as the old one."""
    (home / "llama").mkdir()
    (home / "llama" / "config.json").write_text(json.dumps(LLAMA_7B))
    script = ["run_clm.py", "--model_name_or_path", "llama", "--per_device_train_batch_size", "8", "--bf16",
              "--do_train", "--output_dir", "out", "--block_size", "2048"]
    argv = ["accelerate", "launch", "--num_processes", "8", "--use_fsdp", "--gradient_accumulation_steps", "2", *script]
    (home / "s.yaml").write_text("micro_batch_size: [2]\n")
    data = _tune_json(["--top", "1", "--search", "s.yaml", "--apply", "--dry-run", "--", *argv], capsys)
    applied, best = data["applied"]["argv"], data["top"][0]
    assert applied[:applied.index("run_clm.py")] == argv[:argv.index("run_clm.py")]  # the launcher's, untouched
    assert {(c["key"], c["old"], c["new"]) for c in best["changes"]} == {
        ("--per_device_train_batch_size", "8", "2"), ("--gradient_accumulation_steps", None, "4")}
    code, out, err = run_cli(["explain", "--format", "json", "--", *applied], capsys)
    assert code == 0, err
    assert (json.loads(out)["micro_batch_size"], json.loads(out)["global_batch_size"]) == (2, 64)


def test_accumulation_from_the_environment_pins_the_micro_batch(home: Path, capsys, monkeypatch) -> None:
    """A script driving Accelerator itself (no Trainer, no DeepSpeed) with ACCELERATE_GRADIENT_ACCUMULATION_STEPS in
    the environment accumulates that many steps whatever its --gradient_accumulation_steps says: Accelerator.__init__
    builds its GradientAccumulationPlugin from int(parse_choice_from_env('ACCELERATE_GRADIENT_ACCUMULATION_STEPS',
    gradient_accumulation_steps)) (accelerate accelerator.py). --apply rewrote the flag to hold the global batch
    (mbs 8 -> 2, accumulation 2 -> 16) and the job then ran 2 x 4 x 8 = 64 samples a step, not 256. The command
    cannot change the accumulation, so the micro-batch is kept."""
    (home / "llama").mkdir()
    (home / "llama" / "config.json").write_text(json.dumps(LLAMA_7B))
    (home / "run_clm_no_trainer.py").write_text("from accelerate import Accelerator\nacc = Accelerator()\n")
    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "4")
    argv = ["accelerate", "launch", "--num_processes", "8", "--use_fsdp", "run_clm_no_trainer.py",
            "--model_name_or_path", "llama", "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "2",
            "--block_size", "2048"]
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-h100", "--hardware", "mi300x-192gb",
                              "--top", "3", "--", *argv], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert "micro_batch_size" not in data["knobs"]["searched"] and data["knobs"]["kept"]["micro_batch_size"] == 8
    assert all(not row["changes"] for row in data["top"]), data["top"]
