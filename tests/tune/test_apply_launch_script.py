"""`tune --apply -- bash train.sh` / `sbatch job.sh`: a launch script whose launch line passes its own arguments on
("$@", as Megatron-LM's and most cluster launch scripts do for overrides) is applied by appending the tuned flags to
the script's arguments, where argparse's last-wins rule makes them the training script's; the result is re-read the
way `explain` reads it and applied only when that reading is the tuned layout. A script that does not pass "$@" on,
or a layout that needs a flag of the script dropped (appending cannot undo a switch), stays refused (exit 2)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from .helpers import run_cli

FORWARDING = """#!/bin/bash
GPT_ARGS="--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048"
torchrun --nproc-per-node 8 --nnodes 2 pretrain_gpt.py $GPT_ARGS --micro-batch-size 1 --global-batch-size 256 \\
    --bf16 --vocab-size 50257 --tensor-model-parallel-size 2 {extra} "$@"
"""
DS_CLUSTER = "dgx-h200"
"""Where the llama2-7b DeepSpeed scripts below are tuned: their ZeRO-1, micro-batch 2 candidate needs ~75.8 GiB per GPU,
over the 95 % tune keeps of the H100's 79.18 GiB; these tests are about what --apply writes, not about memory."""
SPACE = ("micro_batch_size: [4]\ntensor_parallel: [1]\npipeline_parallel: [1]\nrecompute: [none]\n"
         "distributed_optimizer: [true]\n")


def _tune(tmp_path: Path, capsys, launch: list[str]) -> tuple[int, dict, str]:
    (tmp_path / "s.yaml").write_text(SPACE)
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--format", "json", "--search", "s.yaml", "--apply",
                              "--dry-run", "--", *launch], capsys)
    return code, json.loads(out), err


def test_a_script_that_passes_its_arguments_on_gets_the_tuned_flags_appended(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text(FORWARDING.format(extra=""))
    before = (tmp_path / "train.sh").read_bytes()
    for launch in (["bash", "train.sh"], ["bash", "-x", "train.sh"]):
        code, data, err = _tune(tmp_path, capsys, launch)
        assert code == 0, err
        applied = data["applied"]["argv"]
        assert applied[:len(launch)] == launch and "--micro-batch-size" in applied[len(launch):]
        assert f"would run: {shlex.join(applied)}" in err
        code, out, err = run_cli(["explain", "--format", "json", "--", *applied], capsys)  # explain accepts it
        assert code == 0, err
        top = data["top"][0]
        assert (top["tp"], top["pp"], top["micro_batch_size"], top["distributed_optimizer"]) == (1, 1, 4, True)
    assert (tmp_path / "train.sh").read_bytes() == before


def test_a_layout_that_needs_a_flag_of_the_script_dropped_stays_refused(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text(FORWARDING.format(extra="--recompute-activations"))
    code, data, err = _tune(tmp_path, capsys, ["bash", "train.sh"])
    assert code == 2 and data["applied"] is None
    assert "--recompute-activations" in err and "would run" not in err


def test_an_sbatch_script_that_passes_its_arguments_on_is_applied(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    script = FORWARDING.format(extra="").replace("torchrun --nproc-per-node 8 --nnodes 2", "srun python")
    script = script.replace("#!/bin/bash\n", "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=8\n")
    (tmp_path / "job.sh").write_text(script)
    code, data, err = _tune(tmp_path, capsys, ["sbatch", "job.sh"])
    assert code == 0, err
    assert data["applied"]["argv"][:2] == ["sbatch", "job.sh"] and "--micro-batch-size" in data["applied"]["argv"]


def test_a_script_that_does_not_pass_its_arguments_on_stays_refused(tmp_path: Path, capsys, monkeypatch) -> None:
    """Read again as explain reads it, `bash train.sh --micro-batch-size 4 ...` still runs the script's own layout
    (its arguments are never used), so nothing is applied and the script is untouched."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text(FORWARDING.format(extra="").replace(' "$@"', ""))
    before = (tmp_path / "train.sh").read_bytes()
    code, data, err = _tune(tmp_path, capsys, ["bash", "train.sh"])
    assert code == 2 and data["applied"] is None and "would run" not in err
    assert "cannot rewrite a shell script" in err and '"$@"' in err
    assert (tmp_path / "train.sh").read_bytes() == before


def test_flags_forwarded_before_the_scripts_own_do_not_win_and_are_refused(tmp_path: Path, capsys, monkeypatch) -> None:
    """`pretrain_gpt.py "$@" $GPT_ARGS --micro-batch-size 1 ...`: the script's own flags come last and win, so the
    appended --micro-batch-size 4 would not take effect."""
    monkeypatch.chdir(tmp_path)
    script = FORWARDING.format(extra="").replace(' "$@"', "").replace("pretrain_gpt.py $GPT_ARGS",
                                                                     'pretrain_gpt.py "$@" $GPT_ARGS')
    (tmp_path / "train.sh").write_text(script)
    code, data, err = _tune(tmp_path, capsys, ["bash", "train.sh"])
    assert code == 2 and data["applied"] is None and "cannot rewrite a shell script" in err


DS_SCRIPT = """#!/bin/bash
deepspeed --num_gpus 8 train.py --deepspeed_config conf/ds.json "$@"
"""


def test_a_deepspeed_script_gets_a_tuned_config_copy_and_its_flag_appended(tmp_path: Path, capsys, monkeypatch) -> None:
    """The ds_config named inside the script: the changes list its keys (they read 'differs from yours, but no flag or
    ds_config key of your command sets it'), --apply writes the tuned copy next to it and appends
    --deepspeed_config COPY (last wins), which explain reads as the tuned ZeRO stage and micro-batch."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "ds.json").write_text(json.dumps({
        "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8, "bf16": {"enabled": True},
        "zero_optimization": {"stage": 2}}))
    (tmp_path / "train.sh").write_text(DS_SCRIPT)
    (tmp_path / "s.yaml").write_text("micro_batch_size: [1]\nzero_stage: [1]\n")  # ZeRO-1 beats the script's 2
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    code, out, err = run_cli(["tune", "--cluster", DS_CLUSTER, "--model", "llama2-7b", "--format", "json", "--search",
                              "s.yaml", "--apply", "--dry-run", "--", "bash", "train.sh"], capsys)
    assert code == 0, err
    data = json.loads(out)
    keys = {c["key"] for c in data["top"][0]["changes"]}
    assert keys == {"--deepspeed_config", "zero_optimization.stage"}, keys
    applied, (new_file,) = data["applied"]["argv"], data["applied"]["new_files"]
    assert applied[:2] == ["bash", "train.sh"] and applied[2:] == ["--deepspeed_config", "conf/ds.llmperf-tuned.json"]
    assert Path(new_file) == tmp_path / "conf" / "ds.llmperf-tuned.json" and Path(new_file).is_file()
    assert {p: p.read_bytes() for p in before} == before
    code, out, err = run_cli(["explain", "--format", "json", "--model", "llama2-7b", "--", *applied], capsys)
    assert code == 0, err
    resolved = json.loads(out)
    assert (resolved["zero_stage"], resolved["micro_batch_size"], resolved["global_batch_size"]) == (1, 1, 64)


def test_a_deepspeed_script_that_does_not_forward_writes_nothing(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "ds.json").write_text(json.dumps({
        "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8, "bf16": {"enabled": True},
        "zero_optimization": {"stage": 2}}))
    (tmp_path / "train.sh").write_text(DS_SCRIPT.replace(' "$@"', ""))
    (tmp_path / "s.yaml").write_text("micro_batch_size: [1]\nzero_stage: [1]\n")
    code, out, err = run_cli(["tune", "--cluster", DS_CLUSTER, "--model", "llama2-7b", "--search", "s.yaml", "--apply",
                              "--dry-run", "--", "bash", "train.sh"], capsys)
    assert code == 2 and "cannot rewrite a shell script" in err
    assert sorted(p.name for p in (tmp_path / "conf").iterdir()) == ["ds.json"]


def test_a_deepspeed_script_s_config_limits_the_zero_stages_as_on_the_command_line(tmp_path: Path, capsys,
                                                                                   monkeypatch) -> None:
    """A partial optimizer offload (ratio < 1) is ZeRO-3 only (DeepSpeedZeroConfig asserts 'Partial offloading only
    supported for ZeRO Stage 3.'): the script's ds_config keeps the search at stage 3 as the same command typed out
    does; the ds_config inside the script was not read, so ZeRO-1/2 copies DeepSpeed refuses were offered."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "ds.json").write_text(json.dumps({
        "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4, "bf16": {"enabled": True},
        "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}}))
    (tmp_path / "train.sh").write_text(DS_SCRIPT)
    config = (tmp_path / "conf" / "ds.json").read_text()  # the same config written by the script's here-document
    (tmp_path / "heredoc.sh").write_text(f"#!/bin/bash\ncat <<EOT > conf/written.json\n{config}\nEOT\n"
                                         + DS_SCRIPT.splitlines()[1].replace("ds.json", "written.json") + "\n")
    (tmp_path / "s.yaml").write_text("micro_batch_size: [1, 2]\n")
    for launch in (["bash", "train.sh"], ["bash", "heredoc.sh"],
                   ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config", "conf/ds.json"]):
        code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--model", "llama2-7b", "--format", "json",
                                  "--search", "s.yaml", "--", *launch], capsys)
        assert code == 0, err
        data = json.loads(out)
        assert data["knobs"]["kept"]["zero_stage"] == 3 and {row["zero_stage"] for row in data["top"]} == {3}, launch


HEREDOC_SCRIPT = """#!/bin/bash
CONFIG=conf/ds.json
cat <<EOT > $CONFIG
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8, "bf16": {"enabled": true},
 "zero_optimization": {"stage": 2}}
EOT
deepspeed --num_gpus 8 train.py --deepspeed_config $CONFIG "$@"
"""


def test_a_ds_config_the_script_writes_itself_is_read_from_its_here_document(tmp_path: Path, capsys,
                                                                              monkeypatch) -> None:
    """Megatron-DeepSpeed's example scripts write their ds_config with `cat <<EOT > $config_json` before launching:
    explain reads the here-document, and so must tune. Reading the disk instead made `tune -- bash train.sh` exit 2
    with 'conf/ds.json does not exist' (a stale file from an earlier run would have been copied instead)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conf").mkdir()
    (tmp_path / "train.sh").write_text(HEREDOC_SCRIPT)
    (tmp_path / "s.yaml").write_text("micro_batch_size: [1]\nzero_stage: [1]\n")
    code, out, err = run_cli(["tune", "--cluster", DS_CLUSTER, "--model", "llama2-7b", "--format", "json", "--search",
                              "s.yaml", "--apply", "--dry-run", "--", "bash", "train.sh"], capsys)
    assert code == 0, err
    data = json.loads(out)
    changes = {(c["key"], c["old"], c["new"]) for c in data["top"][0]["changes"]}
    assert ("zero_optimization.stage", "2", "1") in changes and len(changes) == 2, changes  # and --deepspeed_config
    (new_file,) = data["applied"]["new_files"]
    assert json.loads(Path(new_file).read_text())["zero_optimization"] == {"stage": 1}
    assert sorted(p.name for p in (tmp_path / "conf").iterdir()) == ["ds.llmperf-tuned.json"]  # the script writes ds.json
    code, out, err = run_cli(["explain", "--format", "json", "--model", "llama2-7b", "--", *data["applied"]["argv"]],
                             capsys)
    assert code == 0, err
    assert (json.loads(out)["zero_stage"], json.loads(out)["micro_batch_size"]) == (1, 1)


def test_a_config_given_inline_on_the_scripts_launch_line_is_appended_rewritten(tmp_path: Path, capsys,
                                                                                 monkeypatch) -> None:
    """`--deepspeed_config <base64>` inside the script: the tuned config is appended as the same flag with the
    rewritten word (last wins), and explain reads the appended command as the tuned ZeRO stage; it was refused as
    'drops ds_config in argv zero_optimization.stage, which the script gives'."""
    import base64

    monkeypatch.chdir(tmp_path)
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8, "bf16": {"enabled": True},
              "zero_optimization": {"stage": 2}}
    word = base64.urlsafe_b64encode(json.dumps(config).encode()).decode()
    (tmp_path / "train.sh").write_text(DS_SCRIPT.replace("conf/ds.json", word))
    (tmp_path / "s.yaml").write_text("micro_batch_size: [1]\nzero_stage: [1]\n")
    code, out, err = run_cli(["tune", "--cluster", DS_CLUSTER, "--model", "llama2-7b", "--format", "json", "--search",
                              "s.yaml", "--apply", "--dry-run", "--", "bash", "train.sh"], capsys)
    assert code == 0, err
    applied = json.loads(out)["applied"]
    assert applied["argv"][:3] == ["bash", "train.sh", "--deepspeed_config"] and not applied["new_files"]
    code, out, err = run_cli(["explain", "--format", "json", "--model", "llama2-7b", "--", *applied["argv"]], capsys)
    assert code == 0, err
    assert (json.loads(out)["zero_stage"], json.loads(out)["micro_batch_size"]) == (1, 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml", "train.sh"]
