"""`llmperf tune`'s command-line contract, through the CLI as a user runs it: `--apply --dry-run` on each launch form
prints a command `explain` accepts with the tuned layout and launches nothing; the user's files are byte-identical
afterwards; a second --apply never overwrites a file; nothing fits -> exit 3 naming the largest configuration that
would fit; `--search` narrows and widens, and a bad key or value exits 2 naming it; `--format json` is one JSON object
with the candidate counts and prune reasons; `--top K` beyond the fitting candidates lists what there is."""

from __future__ import annotations

import base64
import dataclasses
import json
from pathlib import Path

import pytest

from llmperf_hook import api
from llmperf_hook.commands import tune as tune_command

from .helpers import run_cli

MODEL = ["--num-layers", "16", "--hidden-size", "2048", "--num-attention-heads", "16", "--seq-length", "2048",
         "--max-position-embeddings", "2048", "--vocab-size", "50257", "--micro-batch-size", "1",
         "--global-batch-size", "64", "--bf16", "--tensor-model-parallel-size", "2"]
SPACE = ("micro_batch_size: [1, 2, 4]\nrecompute: [none, full]\ncontext_parallel: [1]\nmax_virtual_pipeline: 2\n"
         "distributed_optimizer: [true]\n")
DS = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8,
      "zero_optimization": {"stage": 0}, "bf16": {"enabled": True}}
SLURM = {"SLURM_NNODES": "1", "SLURM_NTASKS_PER_NODE": "8", "SLURM_NTASKS": "8", "SLURM_JOB_ID": "1"}
LAYOUT_KEYS = ("tp", "pp", "vpp", "cp", "micro_batch_size", "sequence_parallel", "distributed_optimizer", "zero_stage")


DS_CLUSTER = "dgx-h200"
"""Where the --apply reuse tests tune llama2-7b under DeepSpeed: its micro-batch 2 candidates need ~75.8 GiB per GPU, over
the 95 % tune keeps of the H100's 79.18 GiB; they are about the tuned copy --apply writes or reuses, not memory."""


def _tune(args: list[str], argv: list[str], capsys, tmp_path: Path, space: str = SPACE,
          cluster: str = "dgx-h100") -> tuple[int, dict | None, str]:
    (tmp_path / "search").mkdir(exist_ok=True)  # beside, not among, the user's files
    (tmp_path / "search" / "space.yaml").write_text(space)
    code, out, err = run_cli(["tune", "--cluster", cluster, "--format", "json", "--search",
                              str(tmp_path / "search" / "space.yaml"), *args, "--", *argv], capsys)
    return code, (json.loads(out) if out.strip() else None), err


def _explain(argv: list[str], capsys, model: str | None = None) -> dict:
    code, out, err = run_cli(["explain", "--format", "json", *(["--model", model] if model else []), "--", *argv],
                             capsys)
    assert code == 0, err
    return json.loads(out)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


MEGATRON_FORMS = {
    "torchrun": ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", *MODEL],
    "torch.distributed.run": ["python", "-m", "torch.distributed.run", "--nproc_per_node", "8", "pretrain_gpt.py", *MODEL],
    "deepspeed launcher": ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *MODEL],
    "srun": ["srun", "--ntasks-per-node", "8", "python", "pretrain_gpt.py", *MODEL],
    "srun sh -c": ["srun", "sh", "-c", " ".join(["python", "pretrain_gpt.py", *MODEL])],
    "srun bash -x -c": ["srun", "bash", "-x", "-o", "pipefail", "-c", " ".join(["python", "pretrain_gpt.py", *MODEL])],
    "sbatch --wrap": ["sbatch", "--nodes", "1", "--ntasks-per-node", "8", "--wrap",
                      " ".join(["srun", "python", "pretrain_gpt.py", *MODEL])],
}


@pytest.mark.parametrize("form", sorted(MEGATRON_FORMS))
def test_megatron_apply_gives_a_command_explain_accepts(form: str, tmp_path: Path, capsys, monkeypatch) -> None:
    for k, v in SLURM.items():
        monkeypatch.setenv(k, v)
    monkeypatch.chdir(tmp_path)
    argv = MEGATRON_FORMS[form]
    code, data, err = _tune(["--apply", "--dry-run"], argv, capsys, tmp_path)
    assert code == 0, err
    assert "would run" in err and data["applied"] is not None  # printed, not launched
    best, resolved = data["top"][0], _explain(data["applied"]["argv"], capsys)
    assert {k: resolved[k] for k in LAYOUT_KEYS} == {k: best[k] for k in LAYOUT_KEYS}
    assert (resolved["world_size"], resolved["global_batch_size"]) == (8, 64)


def _ds_forms(folder: Path) -> dict[str, tuple[list[str], str | None]]:
    (folder / "ds.json").write_text(json.dumps(DS, indent=1))
    (folder / "hf.json").write_text(json.dumps({**DS, "train_micro_batch_size_per_gpu": "auto",
                                                "gradient_accumulation_steps": "auto", "train_batch_size": "auto"}))
    (folder / "acc.yaml").write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\n"
                                     "deepspeed_config:\n  zero_stage: 0\n  gradient_accumulation_steps: 8\n"
                                     "mixed_precision: bf16\nnum_machines: 1\nnum_processes: 8\n")
    inline = json.dumps(DS)
    hf = ["--model_name_or_path", "meta-llama/Llama-2-7b-hf", "--per_device_train_batch_size", "1",
          "--gradient_accumulation_steps", "8", "--bf16"]
    return {
        "ds_config file": (["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config", "ds.json"], "llama2-7b"),
        "ds_config inline JSON": (["deepspeed", "--num_gpus", "8", "run_clm.py", "--deepspeed", inline, *hf],
                                  "llama2-7b"),
        # DeepSpeed decodes a base64 word; Megatron-DeepSpeed's pretrain() opens it as a file and stops (exit 2)
        "ds_config base64": (["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config",
                              base64.urlsafe_b64encode(inline.encode()).decode()], "llama2-7b"),
        "HF Trainer --deepspeed": (["deepspeed", "--num_gpus", "8", "run_clm.py", "--deepspeed", "hf.json", *hf],
                                   "llama2-7b"),
        "accelerate": (["accelerate", "launch", "--config_file", "acc.yaml", "run_clm.py", *hf], "llama2-7b"),
    }


@pytest.mark.parametrize("form", ["ds_config file", "ds_config inline JSON", "ds_config base64",
                                  "HF Trainer --deepspeed", "accelerate"])
def test_deepspeed_apply_gives_a_command_explain_accepts(form: str, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    argv, model = _ds_forms(tmp_path)[form]
    before = _snapshot(tmp_path)
    space = "micro_batch_size: [1, 2, 4, 8]\nrecompute: [none, full]\nzero_stage: [0, 1, 2, 3]\n"
    code, data, err = _tune(["--apply", "--dry-run", *(["--model", model] if model else [])], argv, capsys, tmp_path,
                            space)
    assert code == 0, err
    best, resolved = data["top"][0], _explain(data["applied"]["argv"], capsys, model)
    assert (resolved["micro_batch_size"], resolved["zero_stage"]) == (best["micro_batch_size"], best["zero_stage"])
    assert (resolved["world_size"], resolved["global_batch_size"]) == (8, 64)
    after = _snapshot(tmp_path)
    assert {k: after[k] for k in before} == before  # the user's files, byte for byte
    assert set(after) - set(before) == {Path(p).name for p in data["applied"]["new_files"]}


def test_a_second_apply_never_overwrites(tmp_path: Path, capsys, monkeypatch) -> None:
    """Two --apply runs of the same command: the tuned copy the first wrote is reused as it is (not rewritten); a
    tuned name holding something else is left alone and a fresh name is taken."""
    monkeypatch.chdir(tmp_path)
    argv, model = _ds_forms(tmp_path)["ds_config file"]
    space = "micro_batch_size: [2]\nrecompute: [none]\nzero_stage: [2]\n"
    first = _tune(["--apply", "--dry-run", "--model", model], argv, capsys, tmp_path, space, DS_CLUSTER)
    assert first[0] == 0, first[2]
    written = _snapshot(tmp_path)
    second = _tune(["--apply", "--dry-run", "--model", model], argv, capsys, tmp_path, space, DS_CLUSTER)
    assert second[0] == 0 and second[1]["applied"]["argv"] == first[1]["applied"]["argv"]
    assert _snapshot(tmp_path) == written and second[1]["applied"]["new_files"] == []
    (tmp_path / "ds.llmperf-tuned.json").write_text("{}")
    third = _tune(["--apply", "--dry-run", "--model", model], argv, capsys, tmp_path, space, DS_CLUSTER)
    assert third[0] == 0 and (tmp_path / "ds.llmperf-tuned.json").read_text() == "{}"
    assert "ds.llmperf-tuned-2.json" in third[1]["applied"]["argv"]


def test_a_reused_tuned_copy_still_lists_the_keys_it_changes(tmp_path: Path, capsys, monkeypatch) -> None:
    """A second tune of the same command points its best row at the tuned copy the first --apply wrote (reused, not
    written again): its changes listed only '--deepspeed_config ds.json->ds.llmperf-tuned.json', as if the
    micro-batch and ZeRO stage it sets were the user's."""
    monkeypatch.chdir(tmp_path)
    argv, model = _ds_forms(tmp_path)["ds_config file"]
    space = "micro_batch_size: [2]\nrecompute: [none]\nzero_stage: [2]\n"
    first = _tune(["--apply", "--dry-run", "--model", model], argv, capsys, tmp_path, space, DS_CLUSTER)
    assert first[0] == 0, first[2]
    second = _tune(["--model", model], argv, capsys, tmp_path, space, DS_CLUSTER)
    assert second[0] == 0, second[2]
    best = second[1]["top"][0]
    assert best["changes"] == first[1]["top"][0]["changes"]
    keys = {c["key"]: (c["old"], c["new"]) for c in best["changes"]}
    assert keys["train_micro_batch_size_per_gpu"] == ("1", "2") and keys["zero_optimization.stage"] == ("0", "2")


def test_a_second_apply_reuses_accelerates_tuned_config_file(tmp_path: Path, capsys, monkeypatch) -> None:
    """`accelerate launch --deepspeed_config_file ds.json`: the tuned copy a first --apply (a dry run writes it too)
    left is reused by the next one, as for --deepspeed_config; each run wrote another ds.llmperf-tuned-N.json."""
    monkeypatch.chdir(tmp_path)
    _ds_forms(tmp_path)
    argv = ["accelerate", "launch", "--use_deepspeed", "--num_processes", "8", "--deepspeed_config_file", "ds.json",
            "run_clm.py", "--model_name_or_path", "meta-llama/Llama-2-7b-hf", "--per_device_train_batch_size", "1",
            "--gradient_accumulation_steps", "8", "--bf16"]
    space = "micro_batch_size: [2]\nrecompute: [none]\nzero_stage: [2]\n"
    first = _tune(["--apply", "--dry-run", "--model", "llama2-7b"], argv, capsys, tmp_path, space, DS_CLUSTER)
    assert first[0] == 0, first[2]
    assert first[1]["applied"]["new_files"] == [str(tmp_path / "ds.llmperf-tuned.json")]
    written = _snapshot(tmp_path)
    second = _tune(["--apply", "--dry-run", "--model", "llama2-7b"], argv, capsys, tmp_path, space, DS_CLUSTER)
    assert second[0] == 0 and second[1]["applied"]["argv"] == first[1]["applied"]["argv"], second[2]
    assert _snapshot(tmp_path) == written and second[1]["applied"]["new_files"] == []


def test_nothing_fits_exits_3_naming_the_largest_that_would(tmp_path: Path, capsys) -> None:
    """GPT-3 175B on 8 GPUs: exit 3, in text and JSON, with the least-memory layout and the most layers it fits; that
    many layers do fit with that layout (predict says so), one more pipeline chunk does not."""
    argv = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "96", "--hidden-size", "12288",
            "--num-attention-heads", "96", "--seq-length", "2048", "--max-position-embeddings", "2048",
            "--vocab-size", "50257", "--micro-batch-size", "1", "--global-batch-size", "8", "--bf16"]
    code, data, err = _tune([], argv, capsys, tmp_path)
    assert code == 3 and "Traceback" not in err
    near = data["nearest"]
    assert data["exit_code"] == 3 and data["fits"] is False and near["layers_that_fit"]
    assert f"largest model that would fit has {near['layers_that_fit']} layers" in err and near["layout"] in err
    search = data["search"]
    assert search["num_fitting"] == 0 and search["num_oom_estimated"] + search["num_oom_predicted"] > 0
    _, cfg, spec, _ = api.resolve_command(argv, {}, cluster="dgx-h100")
    result, _, _ = tune_command._search(cfg, spec, str(tmp_path / "search" / "space.yaml"), 5)
    layout, usable = result.nearest.config, 0.95 * spec.gpu.memory_capacity_bytes
    step = layout.parallel.pp * layout.parallel.vpp

    def need(layers: int) -> float:  # tune's rule: the must-fit bytes (schedule/memory_rule.py)
        shape = dataclasses.replace(layout.model, num_layers=layers)
        return tune_command.memory_only(dataclasses.replace(layout, model=shape), spec).must_fit_bytes

    assert need(near["layers_that_fit"]) <= usable < need(near["layers_that_fit"] + step)


def test_apply_on_an_sbatch_script_lists_the_changes_and_touches_nothing(tmp_path: Path, capsys) -> None:
    """The launch line lives in the script: --apply exits 2 after the table, saying which changes to make there;
    the script is byte-identical and nothing is written beside it."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --ntasks-per-node=8\n"
                      f"srun python pretrain_gpt.py {' '.join(MODEL)}\n")
    before = _snapshot(tmp_path)
    (tmp_path / "search").mkdir()
    (tmp_path / "search" / "space.yaml").write_text(SPACE)
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--search", str(tmp_path / "search" / "space.yaml"),
                              "--apply", "--", "sbatch", str(script)], capsys)
    assert code == 2 and "Traceback" not in err
    assert "cannot rewrite an sbatch script" in err and "--micro-batch-size" in out
    assert _snapshot(tmp_path) == before


def test_json_counts_add_up_and_name_prune_reasons(tmp_path: Path, capsys) -> None:
    argv = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "32", "--hidden-size", "4096",
            "--num-attention-heads", "32", "--seq-length", "2048", "--max-position-embeddings", "2048", "--vocab-size",
            "50257", "--micro-batch-size", "1", "--global-batch-size", "512", "--bf16"]
    code, data, err = _tune([], argv, capsys, tmp_path, "micro_batch_size: [1, 16, 64]\nrecompute: [none]\n"
                            "context_parallel: [1]\nmax_virtual_pipeline: 1\n")
    assert code == 0, err
    s = data["search"]
    assert s["num_considered"] == (s["num_invalid"] + s["num_oom_estimated"] + s["num_oom_predicted"]
                                   + s["num_over_margin"] + s["num_slower_by_estimate"] + s["num_fitting"])
    assert s["num_invalid"] == sum(s["invalid_by_rule"].values()) and s["invalid_by_rule"]
    assert s["num_oom_estimated"] > 0  # micro-batch 64 x 2,048 tokens of a 6.7B model does not fit an H100
    assert all(isinstance(k, str) and v > 0 for k, v in s["invalid_by_rule"].items())
    assert data["top"] and all(r["fits"] for r in data["top"]) and data["baseline"]["layout"]


def test_top_k_beyond_the_fitting_candidates(tmp_path: Path, capsys) -> None:
    space = "micro_batch_size: [1, 2]\ntensor_parallel: [2]\npipeline_parallel: [1]\nrecompute: [none]\n"
    code, data, err = _tune(["--top", "500"], MEGATRON_FORMS["torchrun"], capsys, tmp_path, space)
    assert code == 0, err
    assert 1 <= len(data["top"]) == data["search"]["num_fitting"] <= data["search"]["num_considered"] < 500
    times = [r["step_time_s"] for r in data["top"]]
    assert times == sorted(times)


def test_search_widens_beyond_the_default_space(tmp_path: Path, capsys) -> None:
    """micro-batch 32 is past the default max_micro_batch_size 16; a listed value is searched as given."""
    code, data, err = _tune(["--top", "50"], MEGATRON_FORMS["torchrun"], capsys, tmp_path,
                            "micro_batch_size: [32]\nrecompute: [full]\ntensor_parallel: [8]\npipeline_parallel: [1]\n")
    assert code == 0, err
    assert {r["micro_batch_size"] for r in data["top"] if r["changes"]} == {32}


@pytest.mark.parametrize(("space", "named"), [
    ("pipline_parallel: [2]\n", "pipline_parallel"),
    ("micro_batch_size: [0]\n", "micro_batch_size"),
    ("tensor_parallel: [two]\n", "tensor_parallel"),
    ("recompute: [sometimes]\n", "recompute"),
    ("zero_stage: [5]\n", "zero_stage"),
    ("memory_margin: 1.5\n", "memory_margin"),
    ("max_virtual_pipeline: -1\n", "max_virtual_pipeline"),
    ("- 1\n- 2\n", "mapping"),
])
def test_bad_search_key_or_value_exits_2_naming_it(space: str, named: str, tmp_path: Path, capsys) -> None:
    code, data, err = _tune([], MEGATRON_FORMS["torchrun"], capsys, tmp_path, space)
    assert code == 2 and "Traceback" not in err
    assert named in err and data["exit_code"] == 2 and named in data["error"]


@pytest.mark.parametrize("args, named", [
    (["--top", "0"], "--top 0"),
    (["--top", "-3"], "--top -3"),
    (["--top", "abc"], "--top 'abc' is not a whole number"),  # click's type=int printed its usage text, no JSON
    (["--top", "2.5"], "--top '2.5'"),
    (["--dry-run"], "--dry-run"),
])
def test_usage_errors_still_print_one_json_object(args: list[str], named: str, tmp_path: Path, capsys) -> None:
    """--format json promises one JSON object on stdout, also for an option tune refuses (exit 2)."""
    code, data, err = _tune(args, MEGATRON_FORMS["torchrun"], capsys, tmp_path)
    assert code == 2 and "Traceback" not in err and named in err
    assert data is not None and data["exit_code"] == 2 and named in data["error"]
