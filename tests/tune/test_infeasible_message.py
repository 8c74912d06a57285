"""Exit 3 when nothing fits names the largest configuration that would: the most layers of this model (whole pipeline
chunks, width / sequence / batch / GPUs kept) on the least-memory layout, or says that not even one chunk fits."""

from __future__ import annotations

from .helpers import run_cli

WIDE = ["torchrun", "--nproc-per-node", "1", "pretrain_gpt.py", "--num-layers", "4", "--hidden-size", "32768",
        "--num-attention-heads", "64", "--seq-length", "2048", "--max-position-embeddings", "2048", "--vocab-size",
        "50257", "--micro-batch-size", "1", "--global-batch-size", "8", "--bf16"]


def test_when_not_even_one_layer_fits_the_message_says_so(capsys) -> None:
    """A 32768-wide layer alone needs more than an 80 GB GPU (12 h^2 = 12.9 G parameters, ~16 bytes each with
    Adam): the message named only the least-memory layout, so 'the largest configuration that would fit' was left
    unsaid."""
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--", *WIDE], capsys)
    assert code == 3
    assert "tp1 pp1" in err and "not even 1 layer" in err and "hidden size 32768" in err
    assert "the largest model that would fit has no layers" in err  # the largest is named, as issue 7 asks


def test_the_exit_3_json_object_says_which_knobs_were_searched(capsys) -> None:
    """docs/output.md: `knobs` is in tune's JSON object also when nothing fits (it was only inside `header`)."""
    import json

    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--format", "json", "--", *WIDE], capsys)
    data = json.loads(out)
    assert code == 3 and data["exit_code"] == 3 and data["fits"] is False
    assert data["knobs"] == data["header"]["knobs"] and "micro_batch_size" in data["knobs"]["searched"]


def _uneven_command(tmp_path) -> list[str]:
    """tune's arguments for a 30-layer, 16384-wide model on PP 4 with --decoder-first/last-pipeline-num-layers 6
    (search space pinned to that layout, written to tmp_path, the working folder)."""
    (tmp_path / "s.yaml").write_text("tensor_parallel: [1]\npipeline_parallel: [4]\nvirtual_pipeline: [1]\n"
                                     "context_parallel: [1]\n")
    uneven = [*WIDE, "--hidden-size", "16384", "--num-layers", "30", "--pipeline-model-parallel-size", "4",
              "--decoder-first-pipeline-num-layers", "6", "--decoder-last-pipeline-num-layers", "6"]
    uneven[uneven.index("--nproc-per-node") + 1] = "4"
    return ["--search", "s.yaml", "--", *uneven]


def test_a_smaller_model_that_breaks_the_commands_stage_sizes_is_not_called_too_big(capsys, tmp_path, monkeypatch) -> None:
    """--decoder-first/last-pipeline-num-layers 6 stay on the command's PP 4, where a 4-layer model cannot take them
    (Megatron refuses it): shrinking the model says nothing about memory, so the message must not claim 'not even 4
    layers' fit (predict puts 4 such layers, one per stage, at 70.9 GiB of 76 GiB usable on an H100)."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", *_uneven_command(tmp_path)], capsys)
    assert code == 3 and "tp1 pp4" in err and "nothing fits" in err
    assert "not even" not in err


def test_the_json_tells_no_layer_count_fits_from_not_known(capsys, tmp_path, monkeypatch) -> None:
    """`nearest.layers_that_fit` was null both when no layer count fits and when the largest is not known: 0 is
    'none fits', null 'not known', and `layers_that_fit_means` says which in words (as the message does)."""
    import json

    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--format", "json", "--", *WIDE], capsys)
    near = json.loads(out)["nearest"]
    assert code == 3 and near["layers_that_fit"] == 0 and "no layer count fits" in near["layers_that_fit_means"]
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--format", "json", *_uneven_command(tmp_path)], capsys)
    near = json.loads(out)["nearest"]
    assert code == 3 and near["layers_that_fit"] is None and near["layers_that_fit_means"].startswith("not known")
    assert "largest model that would fit with that layout is not known" in err


def test_the_json_says_by_how_much_the_nearest_is_short(capsys) -> None:
    """The message says '... GiB over'; the JSON gave only the peak, so a script had to redo the margin arithmetic:
    `short_bytes` is the nearest layout's must-fit bytes (its allocated bytes: schedule/memory_rule.py, below its
    peak by the allocator's reserve) minus the usable memory (95 % of the GPU), `short_of` the side."""
    import json

    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--format", "json", "--", *WIDE], capsys)
    data = json.loads(out)
    near, usable = data["nearest"], (1 - data["search"]["memory_margin"]) * data["header"]["capacity_bytes"]
    assert code == 3 and near["short_of"] == "gpu" and near["short_bytes"] > 0
    assert abs(near["short_bytes"] - (near["must_fit_bytes"] - usable)) < 1.0
    assert near["must_fit_bytes"] < near["peak_bytes"]
    assert f"{near['short_bytes'] / 2**30:.1f} GiB over" in data["error"]


LONG = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "32", "--hidden-size", "4096",
        "--ffn-hidden-size", "14336", "--num-attention-heads", "32", "--group-query-attention", "--num-query-groups", "8",
        "--swiglu", "--normalization", "RMSNorm", "--position-embedding-type", "rope", "--disable-bias-linear",
        "--untie-embeddings-and-output-weights", "--seq-length", "131072", "--max-position-embeddings", "131072",
        "--vocab-size", "128256", "--micro-batch-size", "1", "--global-batch-size", "8", "--bf16"]


def test_a_sequence_too_long_for_any_layer_count_names_the_longest_that_fits(capsys, tmp_path, monkeypatch) -> None:
    """Llama-3-8B at a 128k sequence on 8 GPUs without TP or CP: not even one layer per stage fits (the logits of one
    sequence alone are 131072 x 128256 values), so 'the largest model that would fit has no layers' named nothing that
    fits. The longest sequence with every layer kept is named, and it is the longest: one token more does not fit."""
    import dataclasses
    import json

    from llmperf_hook import api
    from llmperf_hook.commands.tune import memory_only

    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text("tensor_parallel: [1]\ncontext_parallel: [1]\n")
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--search", "s.yaml", "--format", "json", "--", *LONG],
                             capsys)
    near = json.loads(out)["nearest"]
    seq = near["seq_length_that_fits"]
    assert code == 3 and near["layers_that_fit"] == 0 and 0 < seq < 131072
    assert f"all 32 layers with a sequence of at most {seq:,} tokens" in err
    _, cfg, spec, _ = api.resolve_command(LONG, {}, cluster="dgx-h100")
    pp = int(near["layout"].split("pp")[1].split()[0])
    layout = dataclasses.replace(cfg, parallel=dataclasses.replace(cfg.parallel, pp=pp, dp=8 // pp),
                                 recompute=dataclasses.replace(cfg.recompute, granularity="full", method="uniform",
                                                               num_layers=1))
    usable = 0.95 * spec.gpu.memory_capacity_bytes

    def need(tokens: int) -> float:  # tune's rule: the must-fit bytes (schedule/memory_rule.py)
        shape = dataclasses.replace(layout.model, seq_length=tokens)
        return memory_only(dataclasses.replace(layout, model=shape), spec).must_fit_bytes

    assert "rc:full" in near["layout"] and need(seq) <= usable < need(seq + 1)


def test_weights_alone_over_say_no_sequence_helps(capsys) -> None:
    import json

    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--format", "json", "--", *WIDE], capsys)
    assert code == 3 and json.loads(out)["nearest"]["seq_length_that_fits"] is None
    assert "Nor would a shorter sequence" in err


def test_a_plain_ddp_job_is_not_told_to_edit_a_ds_config(capsys, tmp_path, monkeypatch) -> None:
    """`accelerate launch --multi_gpu` (plain DDP, no DeepSpeed) of a 7B model does not fit; the advice named
    'offload_optimizer / offload_param ... in the ds_config', a file such a job does not have."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    argv = ["accelerate", "launch", "--multi_gpu", "--num_processes", "8", "run_clm.py", "--model_name_or_path",
            "meta-llama/Llama-2-7b-hf", "--per_device_train_batch_size", "8", "--output_dir", "out", "--bf16"]
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--model", "llama2-7b", "--", *argv], capsys)
    assert code == 3 and "largest model that would fit" in err
    assert "in the ds_config" not in err
    assert "FSDP" in err and "checkpointing" in err
