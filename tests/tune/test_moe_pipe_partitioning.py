"""Megatron-DeepSpeed MoE candidates at TP > 1 and PP > 1 under DeepSpeed's PipelineEngine (H212 item 1).

explain refuses such a job unless its ds_config sets pipeline.pipe_partitioned and grad_partitioned both false
(frameworks/deepspeed_job.check_moe_pipe_partitioning: GPTModelPipe's assert in Megatron-DeepSpeed megatron/model/
gpt_model.py; DeepSpeed runtime/config.py get_pipeline_config reads a missing key as true, and pipe/engine.py
_exec_forward_pass then refuses the MoE loss). tune proposed tp2 pp2 for a tp1 pp2 MoE command, and --apply wrote a
command explain refuses. Now the candidate's ds_config copy sets both keys false and the candidate is priced with the
whole-tensor sends that copy runs.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.tune import surrogate
from llmperf_hook.tune.apply import plan_tuned_command
from llmperf_hook.tune.candidate import apply_candidate, candidate_of
from llmperf_hook.tune.candidates import candidates_from_list

MOE_TP1 = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--tensor-model-parallel-size", "1",
           "--pipeline-model-parallel-size", "2", "--num-layers", "24", "--hidden-size", "2048",
           "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
           "--micro-batch-size", "4", "--global-batch-size", "256", "--tokenizer-type", "GPT2BPETokenizer",
           "--deepspeed", "--deepspeed_config", "ds.json", "--zero-stage", "0", "--fp16", "--num-experts", "8",
           "--moe-expert-parallel-size", "2"]
"""Megatron-DeepSpeed GPT MoE at TP 1 x PP 2 (PipelineEngine), a ds_config without pipeline keys: explain accepts."""


def test_moe_candidate_at_tp2_pp2_sets_both_keys_false_and_is_priced_so(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    original = json.dumps({"train_batch_size": 256, "train_micro_batch_size_per_gpu": 4,
                           "zero_optimization": {"stage": 0}, "fp16": {"enabled": True},
                           "pipeline": {"pipe_partitioned": True}})
    (tmp_path / "ds.json").write_text(original)
    _, cfg = resolve_job(MOE_TP1, {})
    cand = dataclasses.replace(candidate_of(cfg), tp=2)
    new_cfg = apply_candidate(cfg, cand)
    assert cfg.deepspeed_pipe_partitioned and not new_cfg.deepspeed_pipe_partitioned
    plan = plan_tuned_command(MOE_TP1, cfg, cand, new_cfg, tmp_path)
    (path, content), = plan.new_files.items()
    assert json.loads(content)["pipeline"] == {"pipe_partitioned": False, "grad_partitioned": False}
    Path(path).write_text(content)
    _, applied = resolve_job(list(plan.argv), {})  # explain refused the copy without the keys (exit 2)
    assert (applied.parallel.tp, applied.parallel.pp, applied.deepspeed_pipe_partitioned) == (2, 2, False)
    assert (tmp_path / "ds.json").read_text() == original
    # the surrogate prices that row's sends as the graph prices the copy: whole tensors, no TP all-gather
    cluster, cols, tokens = load_cluster("dgx-h100"), candidates_from_list([cand]).columns, np.array([8192.0])
    whole = surrogate._p2p_s(dataclasses.replace(cfg, deepspeed_pipe_partitioned=False), cluster, cols, tokens)
    dense = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, num_experts=0))
    assert np.allclose(surrogate._p2p_s(cfg, cluster, cols, tokens), whole)
    assert not np.allclose(surrogate._p2p_s(dense, cluster, cols, tokens), whole)
