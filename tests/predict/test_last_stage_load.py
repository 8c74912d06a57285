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


def _s24_like(pp: int, layers: int = 12, gbs: int = 8, vpp: int = 1, framework: str = "megatron-deepspeed"):
    """A vTrain S24-like job: GPT hidden 1024, seq 1024, fp16, full recompute, Megatron-DeepSpeed, TP 2."""
    return make_config(num_layers=layers, hidden_size=1024, num_attention_heads=16, seq_length=1024, tp=2, pp=pp,
                       vpp=vpp, dp=1, micro_batch_size=1, global_batch_size=gbs, precision="fp16", recompute="full",
                       framework=framework, attention_backend="unfused")


def _loading_blocks(chunk) -> list[str]:
    """Names of the blocks of a chunk whose forward pass pays the micro-batch prologue."""
    return [b.name for b in chunk.blocks if host_issue.prologue_units(b.fwd)]


def _prologue_passes(stage) -> list[str]:
    return [name for chunk in stage.chunks for name in _loading_blocks(chunk)]


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


def test_interleaved_only_the_embedding_chunk_and_the_head_chunk_load() -> None:
    """Megatron-LM's get_batch checks the virtual stage (core_v0.16.1 pretrain_gpt.py get_batch ->
    is_first_or_last_pipeline_stage(vp_stage)): of each rank's model chunks only the first stage's first and the
    last stage's last load a micro-batch."""
    stages = build_graph(_s24_like(pp=2, layers=8, vpp=2, framework="megatron"), A100).stages
    assert [[_loading_blocks(chunk) for chunk in stage.chunks] for stage in stages] == [[["embedding"], []],
                                                                                         [[], ["head"]]]
