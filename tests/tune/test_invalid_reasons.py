"""tune's pruned counts name the rule that pruned them: a framework-validation message is grouped by its rule
with the per-candidate sources in parentheses dropped. It used to be cut at the first ' (', so Megatron-DeepSpeed's
'ZeRO stage 2 (argv --zero-stage) with DeepSpeed's pipeline engine: ...' was counted as 'ZeRO stage N'."""

from __future__ import annotations

import json

from llmperf_hook.tune.search import _first_sentence

from .helpers import run_cli


def test_parenthesised_sources_are_dropped_not_cut_at() -> None:
    msg = ("ZeRO stage 2 (argv --zero-stage) with DeepSpeed's pipeline engine: DeepSpeed rejects it ('ZeRO-2 and "
           "ZeRO-3 are incompatible with pipeline parallelism'). Use ZeRO 0/1.")
    assert _first_sentence(msg) == "ZeRO stage N with DeepSpeed's pipeline engine: DeepSpeed rejects it"
    nested = "world size 8 (derived nnodes (1) * nproc (8)) is not divisible by 3. Change it."
    assert _first_sentence(nested) == "world size N is not divisible by N"
    assert _first_sentence("tp 3 (see e.g. the docs) is wrong") == "tp N is wrong"
    assert _first_sentence("cut at an open (e.g. here") == "cut at an open"
    long = ("--pp-partition-method 'type:transformer' leaves a pipeline stage without a transformer layer on 3 of "
            "the 8 stages")
    assert _first_sentence(long) == ("--pp-partition-method 'type:transformer' leaves a pipeline stage without a "
                                     "...")  # whole words only: it read '... without a trans'


def test_megatron_deepspeed_zero2_with_pipeline_engine_is_named(tmp_path, capsys) -> None:
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_batch_size": 512, "train_micro_batch_size_per_gpu": 1,
                              "bf16": {"enabled": True}, "zero_optimization": {"stage": 0}}))
    (tmp_path / "s.yaml").write_text("zero_stage: [0, 1, 2, 3]\ntensor_parallel: [2]\nrecompute: [none]\n")
    argv = ["deepspeed", "--num_nodes", "1", "--num_gpus", "8", "pretrain_gpt.py", "--deepspeed", "--deepspeed_config",
            str(ds), "--zero-stage", "0", "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
            "--num-layers", "24", "--hidden-size", "2048", "--num-attention-heads", "16", "--seq-length", "2048",
            "--max-position-embeddings", "2048", "--micro-batch-size", "1", "--global-batch-size", "512", "--bf16",
            "--vocab-size", "50257"]
    code, out, err = run_cli(["tune", "--cluster", "dgx-a100", "--format", "json", "--search", str(tmp_path / "s.yaml"),
                              "--", *argv], capsys)
    assert code == 0, err
    rules = json.loads(out)["search"]["invalid_by_rule"]
    # Named by the vectorised rule (candidates.rule_masks) before any full check, so never under 'framework validation'.
    assert rules.get("ZeRO-2/3 with DeepSpeed's pipeline engine (pp > 1)", 0) > 0, rules
    assert not any(k.startswith("framework validation: ZeRO stage N") for k in rules), rules
