"""Issues 2, 5 and 7, round 12: files a user hands llmperf that are wrong in the ways real files are (a search space
cut short, a knob misspelt, a validation CSV with foreign columns or nothing in it, ds_config batch numbers
DeepSpeed's own arithmetic refuses), and Megatron's pipeline split when the embedding and the loss count as layers.
Each bad file exits 2 with one message naming the file and the fix; the file stays as written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.acceptance.cli import error_lines, run_cli
from tests.acceptance.test_round12_launch_lines import LLAMA_HF

GPT = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "32", "--hidden-size", "4096",
       "--num-attention-heads", "32", "--seq-length", "4096", "--max-position-embeddings", "4096",
       "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16", "--vocab-size", "32000"]


def _refused(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err and len(error_lines(err)) == 1, err
    for word in words:
        assert word in err, (word, err)


@pytest.mark.parametrize("text,words", [("micro_batch_size: [1, 2\n", ["s.yaml", "YAML"]),
                                        ("micro_batch_size: [0, -1]\n", ["micro_batch_size", ">= 1"]),
                                        ("bogus_knob: [1]\n", ["bogus_knob", "Known keys"])],
                         ids=["cut-short", "non-positive-micro-batch", "unknown-knob"])
def test_bad_search_space_exits_2(text: str, words: list[str], tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(text)
    code, _, err = run_cli(["tune", "--search", "s.yaml", "--cluster", "dgx-h100", "--", *GPT], capsys)
    _refused(code, err, *words)
    assert (tmp_path / "s.yaml").read_text() == text


@pytest.mark.parametrize("args,words", [(["--top", "0"], ["--top 0"]),
                                        (["--search", "no-such.yaml"], ["no-such.yaml", "no such file"])],
                         ids=["top-0", "missing-search"])
def test_bad_tune_options_exit_2(args: list[str], words: list[str], capsys) -> None:
    code, _, err = run_cli(["tune", *args, "--cluster", "dgx-h100", "--", *GPT], capsys)
    _refused(code, err, *words)


@pytest.mark.parametrize("text,words", [(None, ["does not exist"]), ("", ["is empty"]),
                                        ("a,b\n1,2\n", ["num_layers", "iteration_time_s"])],
                         ids=["missing", "empty", "foreign-columns"])
def test_bad_validation_csv_exits_2(text: str | None, words: list[str], tmp_path: Path, capsys) -> None:
    csv = tmp_path / "runs.csv"
    if text is not None:
        csv.write_text(text)
    code, _, err = run_cli(["validate", str(csv)], capsys)
    _refused(code, err, *words)


@pytest.mark.parametrize("config,words", [
    # DeepSpeedConfig._set_batch_related_parameters: micro = 64 // 3 // 8 = 2, then _batch_assertion 64 != 2 x 3 x 8
    ({"train_batch_size": 64, "gradient_accumulation_steps": 3}, ["train_batch_size 64", "48"]),
    # only train_batch_size: accumulation 1, micro = 60 // 8 = 7; 7 x 1 x 8 = 56 != 60
    ({"train_batch_size": 60}, ["train_batch_size 60", "56"]),
    ({}, ["train_batch_size or train_micro_batch_size_per_gpu"]),
    ({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 0}, ["train_micro_batch_size_per_gpu is 0"]),
    ({"train_batch_size": "64"}, ["train_batch_size", "'64'"]),
    ({"train_batch_size": 64, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}},
     ["nvme_path"]),
], ids=["gas-does-not-divide", "dp-does-not-divide", "no-batch-key", "zero-micro", "string-number",
        "nvme-without-path"])
def test_deepspeed_batch_arithmetic_refused(config: dict, words: list[str], tmp_path: Path, capsys,
                                            monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    text = json.dumps({**config, "bf16": {"enabled": True}})
    (tmp_path / "d.json").write_text(text)
    code, _, err = run_cli(["explain", "--model", "llama2-7b", "--", "deepspeed", "--num_gpus", "8", "train.py",
                            "--deepspeed_config", "d.json"], capsys)
    _refused(code, err, "d.json", *words)
    assert (tmp_path / "d.json").read_text() == text


def test_offload_param_below_stage_3_is_warned_not_priced(tmp_path: Path, capsys, monkeypatch) -> None:
    """DeepSpeed offloads parameters only in ZeRO-3 (stage3.py); at stage 2 the section is accepted and ignored."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d.json").write_text(json.dumps({"train_batch_size": 64, "bf16": {"enabled": True},
                                                 "zero_optimization": {"stage": 2,
                                                                       "offload_param": {"device": "cpu"}}}))
    code, out, err = run_cli(["explain", "--format", "json", "--model", "llama2-7b", "--", "deepspeed", "--num_gpus",
                              "8", "train.py", "--deepspeed_config", "d.json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["zero_stage"] == 2 and (data["micro_batch_size"], data["num_microbatches"]) == (8, 1)
    assert any("offload_param" in w and "stage 3" in w for w in data["warnings"]), data["warnings"]


def test_embedding_and_loss_counted_as_layers_in_the_pipeline_split(capsys) -> None:
    """Megatron-Core transformer_block get_num_layers_to_build: --account-for-embedding-in-pipeline-split and
    --account-for-loss-in-pipeline-split make (30 + 2) / 4 = 8 layer slots per stage, the first and the last
    stage giving one to the embedding and the loss: 7, 8, 8, 7."""
    argv = [*GPT, "--pipeline-model-parallel-size", "4", "--account-for-embedding-in-pipeline-split",
            "--account-for-loss-in-pipeline-split"]
    argv[argv.index("--num-layers") + 1] = "30"
    code, out, err = run_cli(["predict", "--format", "json", "--cluster", "dgx-h100", "--", *argv], capsys)
    assert code == 0, err
    assert [s["num_layers"] for s in json.loads(out)["stages"]] == [7, 8, 8, 7]
    code, _, err = run_cli(["explain", "--", *[a for a in argv if a != "--account-for-loss-in-pipeline-split"]],
                           capsys)
    assert code == 2 and "not divisible by pipeline-model-parallel-size 4" in err, err  # 31 % 4


@pytest.mark.parametrize("script,key,value", [("train.py", "train_batch_size", "NaN"),
                                              ("train.py", "gradient_accumulation_steps", "Infinity"),
                                              ("train.py", "zero_optimization", '{"stage": Infinity}'),
                                              ("run_clm.py", "zero_optimization", '{"stage": NaN}')])
def test_non_finite_batch_or_stage_exits_2(script: str, key: str, value: str, tmp_path: Path, capsys,
                                           monkeypatch) -> None:
    """Found by fuzzing ds_config values (H166): a non-finite number where DeepSpeed wants an integer."""
    monkeypatch.chdir(tmp_path)
    batch = '"auto"' if script == "run_clm.py" else "64"  # the Trainer's configs leave the batch keys "auto"
    rest = {"train_batch_size": batch, "gradient_accumulation_steps": "4", "train_micro_batch_size_per_gpu": "2",
            "bf16": '{"enabled": true}', key: value}
    (tmp_path / "d.json").write_text("{" + ", ".join(f'"{k}": {v}' for k, v in rest.items()) + "}")
    (tmp_path / "llama").mkdir()
    (tmp_path / "llama" / "config.json").write_text(json.dumps(LLAMA_HF))
    tail = (["--model_name_or_path", "llama", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps",
             "4", "--bf16"] if script == "run_clm.py" else [])
    model = [] if tail else ["--model", "llama2-7b"]
    code, _, err = run_cli(["explain", *model, "--", "deepspeed", "--num_gpus", "8", script,
                            "--deepspeed" if tail else "--deepspeed_config", "d.json", *tail], capsys)
    _refused(code, err, "d.json")
