"""Megatron-DeepSpeed MoE at TP > 1: DeepSpeed's experts are whole on every TP rank unless
--enable-expert-tensor-parallelism (graph/moe_ops.megatron_deepspeed_moe_ops,
frameworks/megatron._deepspeed_expert_tp)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.op_graph import OpBlock
from llmperf_hook.graph.params import expert_params
from llmperf_hook.graph.step_ops import dp_groups
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.tune.candidate import apply_candidate, candidate_of
from llmperf_hook.tune.candidates import generate_candidates
from llmperf_hook.tune.megatron_argv import rewrite_megatron_argv
from llmperf_hook.tune.search_space import parse_search_space

H, FFN, T, K, E, EP = 1024, 4096, 2 * 2048, 2, 8, 2
"""hidden, ffn, tokens per micro-batch (mbs 2 x seq 2048), top-k, experts, EP of MDS below."""
MDS = ("deepspeed --num_gpus 8 pretrain_gpt.py --tensor-model-parallel-size 2 --no-pipeline-parallel "
       f"--num-layers 2 --hidden-size {H} --ffn-hidden-size {FFN} --num-attention-heads 16 --seq-length 2048 "
       "--max-position-embeddings 2048 --micro-batch-size 2 --global-batch-size 64 --tokenizer-type GPT2BPETokenizer "
       f"--deepspeed --deepspeed_config ds.json --fp16 --num-experts {E} --expert-interval 1 --topk {K} "
       f"--moe-expert-parallel-size {EP}").split()
DS_CONFIG = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1},
             "fp16": {"enabled": True}}


@pytest.fixture()
def in_job_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps(DS_CONFIG))
    return tmp_path


def _cfg(*extra: str, argv: tuple[str, ...] = tuple(MDS)):
    return resolve_job([*argv, *extra], {})[1]


def _moe_block(cfg) -> OpBlock:
    """The MoE layer's block, its attention ops left out."""
    graph = build_graph(cfg, load_cluster("dgx-h100"))
    blocks = (b for s in graph.stages for c in s.chunks for b in c.blocks)
    block = next(b for b in blocks if any(o.name == "moe.router" for o in b.fwd))
    moe = lambda ops: tuple(op for op in ops if op.name.startswith("moe."))  # noqa: E731
    return dataclasses.replace(block, fwd=moe(block.fwd), bwd=moe(block.bwd))


def _named(ops, name: str) -> list:
    return [op for op in ops if op.name == name]


def test_the_flag_is_read_and_sets_expert_tp(in_job_dir: Path) -> None:
    off, on = _cfg(), _cfg("--enable-expert-tensor-parallelism")
    assert (off.parallel.etp, off.parallel.etp_follows_tp) == (1, False)
    assert "no --enable-expert-tensor-parallelism" in str(off.sources["etp"])
    assert (on.parallel.etp, on.parallel.etp_follows_tp) == (2, True)
    assert "--enable-expert-tensor-parallelism" in str(on.sources["etp"])


def test_without_the_flag_experts_are_whole_and_tokens_are_dropped_then_gathered(in_job_dir: Path) -> None:
    block = _moe_block(_cfg())
    local, copies = E // EP, T * K
    fc1 = _named(block.fwd, "moe.expert_fc1")
    assert len(fc1) == local and fc1[0].dims == {"m": copies // 2 // local, "n": FFN, "k": H}  # c / t copies, whole
    assert not [op for op in block.fwd + block.bwd if op.op_class == "allreduce"]  # no TP collective in the experts
    a2a = _named(block.fwd, "moe.dispatch_alltoall") + _named(block.fwd, "moe.combine_alltoall")
    assert [op.dims["bytes"] for op in a2a] == [copies // 2 * H * 2] * 2  # drop_tokens: this rank's half of the slots
    gathers = [op for op in block.fwd + block.bwd if op.op_class == "allgather"]
    assert [(op.phase, op.collective.group, op.dims["bytes"]) for op in gathers] == [
        ("fwd", "tp", copies * H * 2), ("bwd", "tp", copies * H * 2)]  # gather_tokens; drop_tokens' backward
    assert not [op for op in block.bwd if op.op_class == "reducescatter"]


def test_with_the_flag_experts_split_over_tp_and_all_reduce_per_expert(in_job_dir: Path) -> None:
    block = _moe_block(_cfg("--enable-expert-tensor-parallelism"))
    local, copies = E // EP, T * K
    assert _named(block.fwd, "moe.expert_fc1")[0].dims == {"m": copies // local, "n": FFN // 2, "k": H}
    assert [op.phase for op in block.fwd + block.bwd if op.op_class == "allgather"] == ["fwd", "fwd", "bwd", "bwd"]
    fwd_ar = _named(block.fwd, "moe.expert_fc2_tp_allreduce")
    bwd_ar = _named(block.bwd, "moe.expert_fc1.dgrad_allreduce")
    assert len(fwd_ar) == len(bwd_ar) == local  # RowParallelLinear's output, ColumnParallelLinear's input gradient
    assert {op.dims["bytes"] for op in fwd_ar + bwd_ar} == {copies // local * H * 2}
    assert not [op for op in block.bwd if op.op_class in ("allreduce", "reducescatter") and "dgrad" not in op.name]


def test_expert_memory_and_gradient_group_follow_the_flag(in_job_dir: Path) -> None:
    off, on = _cfg(), _cfg("--enable-expert-tensor-parallelism")
    # per expert fc1 + fc2 weights and biases (Megatron-DeepSpeed's linears are biased): whole, or fc1 column-split
    # and fc2 row-split over TP 2 (fc2's bias whole)
    assert expert_params(off) == E // EP * (2 * H * FFN + FFN + H)
    assert expert_params(on) == E // EP * (2 * H * FFN // 2 + FFN // 2 + H)
    # DeepSpeed groups.py: expert data-parallel = world // pp // EP without the flag (ranks i, i+EP, ...), DP // EP with
    assert dp_groups(off, 8)[1].group_size == 8 // EP and dp_groups(on, 8)[1].group_size == 4 // EP
    assert _moe_block(off).fwd != _moe_block(dataclasses.replace(
        off, parallel=dataclasses.replace(off.parallel, etp=2))).fwd


def test_tune_candidates_keep_the_users_setting(in_job_dir: Path) -> None:
    tp1 = [*MDS]
    tp1[tp1.index("--tensor-model-parallel-size") + 1] = "1"
    off, on = _cfg(argv=tuple(tp1)), _cfg("--enable-expert-tensor-parallelism", argv=tuple(tp1))
    for cfg, expected in ((off, 1), (on, 2)):
        moved = apply_candidate(cfg, dataclasses.replace(candidate_of(cfg), tp=2))
        assert moved.parallel.etp == expected
        table = generate_candidates(cfg, parse_search_space({"tensor_parallel": [1, 2, 4]}), 8)
        runs = set(zip(table.columns["tp"].tolist(), table.columns["etp"].tolist()))
        assert runs == {(tp, 1 if cfg is off else tp) for tp in (1, 2, 4)}  # what the surrogates price
        # the TP-2 command: Megatron-DeepSpeed's parser has no --expert-tensor-parallel-size to write
        row = next(i for i in range(len(table)) if table.columns["tp"][i] == 2)
        argv = rewrite_megatron_argv(tp1, candidate_of(cfg), table.candidate(row), 2, cfg.framework)
        assert argv[argv.index("--tensor-model-parallel-size") + 1] == "2"
        assert "--expert-tensor-parallel-size" not in argv


def test_the_flag_needs_data_parallel_divisible_by_ep(in_job_dir: Path) -> None:
    argv = [*MDS]
    argv[argv.index("--moe-expert-parallel-size") + 1] = "8"  # DP 4 of 8 ranks at TP 2
    assert _cfg(argv=tuple(argv)).parallel.ep == 8  # legacy groups: (world // pp) % EP holds
    with pytest.raises(ConfigError, match="_create_expert_data_and_model_parallel"):
        _cfg("--enable-expert-tensor-parallelism", argv=tuple(argv))


def test_the_flag_asserts_dp_divisible_by_ep_at_tp_1_too(in_job_dir: Path) -> None:
    """MoE._create_process_groups takes _create_expert_data_and_model_parallel whenever the flag is on and an mpu is
    set (Megatron-DeepSpeed always passes one), whatever the TP; its DP excludes DeepSpeed-Ulysses' ranks."""
    argv = [*MDS]
    argv[argv.index("--tensor-model-parallel-size") + 1] = "1"
    argv[argv.index("--moe-expert-parallel-size") + 1] = "8"
    ulysses = (*argv, "--ds-sequence-parallel-size", "2")  # DP 4 of 8 ranks
    assert _cfg(argv=ulysses).parallel.ep == 8  # legacy groups: world // pp = 8 splits into EP 8
    with pytest.raises(ConfigError, match="_create_expert_data_and_model_parallel"):
        _cfg("--enable-expert-tensor-parallelism", argv=ulysses)


def test_sequence_parallel_is_refused_with_deepspeed_moe(in_job_dir: Path) -> None:
    """Under --sequence-parallel each TP rank holds its own sequence shard, but MOELayer.forward's drop_tokens /
    gather_tokens take the TP ranks' slots as copies: without the flag the experts' RowParallelLinear reduce-scatters
    their output over TP (Megatron-DeepSpeed layers.py), which breaks the shapes at the first step; with it the
    gathered slots mix the ranks' tokens."""
    with pytest.raises(ConfigError, match="reduce_scatter_to_sequence_parallel_region"):
        _cfg("--sequence-parallel")
    with pytest.raises(ConfigError, match="other TP ranks' tokens"):
        _cfg("--sequence-parallel", "--enable-expert-tensor-parallelism")
    moe_flags = ("--num-experts", "--expert-interval", "--topk", "--moe-expert-parallel-size")
    at = [MDS.index(flag) for flag in moe_flags]
    dense = [a for i, a in enumerate(MDS) if i not in at and i - 1 not in at]
    assert _cfg("--sequence-parallel", argv=tuple(dense)).parallel.sequence_parallel  # dense MDS keeps SP


def test_tune_masks_what_deepspeed_moe_refuses(in_job_dir: Path) -> None:
    from llmperf_hook.tune.candidates import rule_masks

    for extra in ((), ("--enable-expert-tensor-parallelism",)):
        cfg = _cfg(*extra)
        table = generate_candidates(cfg, parse_search_space(
            {"tensor_parallel": [1, 2, 4], "sequence_parallel": [False, True]}), 8)
        masks = rule_masks(cfg, table.columns)
        sp = masks["Megatron-DeepSpeed MoE refuses sequence parallel"]
        assert sp.tolist() == ((table.columns["sp"] > 0) & (table.columns["tp"] > 1)).tolist() and sp.any()
    cfg = _cfg("--enable-expert-tensor-parallelism")  # EP 2 of 8 ranks: TP 4 leaves DP 2, TP 8 DP 1
    table = generate_candidates(cfg, parse_search_space({"tensor_parallel": [1, 2, 4, 8], "pipeline_parallel": [1]}), 8)
    dp_rule = rule_masks(cfg, table.columns)["--enable-expert-tensor-parallelism needs dp % ep == 0"]
    assert sorted(set(table.columns["tp"][dp_rule].tolist())) == [8] and len(set(table.columns["tp"])) == 4
