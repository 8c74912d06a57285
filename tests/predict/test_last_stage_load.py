"""The last pipeline stage loads every micro-batch too (labels and loss mask: DeepSpeed's TrainSchedule issues
LoadMicroBatch on stage 0 and stage pp - 1; Megatron-LM's get_batch skips only the middle stages), so with pp > 1 its
head pass carries the same host prologue as the first stage's embedding pass (predict/host_issue.py); with pp = 1
one rank loads once."""

from __future__ import annotations

from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.sample_configs import make_config
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.predict import host_issue

A100 = load_cluster("dgx-a100")


def _s24_like(pp: int, layers: int = 12, gbs: int = 8):
    """A vTrain S24-like job: GPT hidden 1024, seq 1024, fp16, full recompute, Megatron-DeepSpeed, TP 2."""
    return make_config(num_layers=layers, hidden_size=1024, num_attention_heads=16, seq_length=1024, tp=2, pp=pp,
                       dp=1, micro_batch_size=1, global_batch_size=gbs, precision="fp16", recompute="full",
                       framework="megatron-deepspeed", attention_backend="unfused")


def _prologue_passes(stage) -> list[str]:
    """Names of the blocks of a stage whose forward pass pays the micro-batch prologue."""
    return [b.name for chunk in stage.chunks for b in chunk.blocks if host_issue.prologue_units(b.fwd)]


def test_first_and_last_stage_each_load_the_micro_batch_middle_stages_do_not() -> None:
    stages = build_graph(_s24_like(pp=4), A100).stages
    assert [_prologue_passes(s) for s in stages] == [["embedding"], [], [], ["head"]]
    head = stages[-1].chunks[-1].blocks[-1]
    assert host_issue.pass_host_s(head.fwd, 1.0) - host_issue.pass_host_s(head.fwd[1:], 1.0) == \
        host_issue.MICROBATCH_PROLOGUE_UNITS + host_issue.op_host_units(head.fwd[0])
    assert host_issue.prologue_units(head.bwd) == 0


def test_one_stage_loads_once() -> None:
    (stage,) = build_graph(_s24_like(pp=1), A100).stages
    assert _prologue_passes(stage) == ["embedding"]

