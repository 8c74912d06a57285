"""`tune --apply` on a multi-node Megatron-DeepSpeed job launched by the deepspeed launcher with a hostfile, its
ds_config in another folder: the default space searches ZeRO 0-3 (2/3 at PP 1 only, where --apply adds
--no-pipeline-parallel), the tuned copy is written next to the original, and explain reads the applied command as the
tuned layout."""

from __future__ import annotations

import json
from pathlib import Path

from .helpers import run_cli

DS = {"train_batch_size": 256, "train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
      "zero_optimization": {"stage": 3, "overlap_comm": True, "contiguous_gradients": True}}
LAYOUT = ("tp", "pp", "micro_batch_size", "zero_stage", "sequence_parallel")


def _argv() -> list[str]:
    return ["deepspeed", "--hostfile", "hostfile", "--num_nodes", "2", "--num_gpus", "8", "pretrain_gpt.py",
            "--deepspeed", "--deepspeed_config=conf/ds.json", "--zero-stage", "3", "--no-pipeline-parallel",
            "--num-layers", "40", "--hidden-size", "5120", "--num-attention-heads", "40", "--seq-length", "2048",
            "--max-position-embeddings", "2048", "--micro-batch-size", "2", "--global-batch-size", "256", "--bf16",
            "--checkpoint-activations", "--vocab-size", "50257"]


def test_zero3_job_is_tuned_over_zero_0_to_3_and_applied_next_to_its_config(tmp_path: Path, capsys,
                                                                             monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "ds.json").write_text(json.dumps(DS, indent=1))
    (tmp_path / "hostfile").write_text("node1 slots=8\nnode2 slots=8\n")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    code, out, err = run_cli(["tune", "--cluster", "dgx-a100", "--top", "40", "--format", "json", "--apply",
                              "--dry-run", "--", *_argv()], capsys)
    assert code == 0, err
    data = json.loads(out)
    stages = {row["zero_stage"] for row in data["top"]}
    assert {2, 3} & stages and {0, 1} & stages, stages  # both sides of the PipelineEngine rule are searched
    assert all(row["pp"] == 1 for row in data["top"] if row["zero_stage"] >= 2)
    applied = data["applied"]["argv"]
    code, out, err = run_cli(["explain", "--format", "json", "--", *applied], capsys)
    assert code == 0, err
    resolved, best = json.loads(out), data["top"][0]
    assert {k: resolved[k] for k in LAYOUT} == {k: best[k] for k in LAYOUT}
    assert (resolved["world_size"], resolved["global_batch_size"]) == (16, 256)
    assert {p: p.read_bytes() for p in before} == before  # the user's files, byte for byte
    for path in data["applied"]["new_files"]:
        assert Path(path).parent == tmp_path / "conf"
