"""Candidate generation: the cross product, duplicates merged, layout rules as named masks."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from llmperf_hook.tune.candidate import apply_candidate, candidate_of, changed_fields
from llmperf_hook.tune.candidates import generate_candidates, rule_masks
from llmperf_hook.tune.search_space import SearchSpace, load_search_space

from .helpers import gpt_config, mask_disagreements


def _rows(table) -> set[tuple]:
    cols = table.columns
    return set(zip(*(cols[k].tolist() for k in cols)))


def test_user_config_is_a_candidate_and_rows_are_unique() -> None:
    cfg = gpt_config()
    table = generate_candidates(cfg, load_search_space(None, "megatron"), gpus_per_node=8)
    assert len(_rows(table)) == len(table) <= table.num_generated
    base = candidate_of(cfg)
    assert base in {table.candidate(i) for i in range(len(table))}


def test_sequence_parallel_is_off_at_tp1_and_block_of_all_layers_is_full() -> None:
    cfg = gpt_config(layers=8, hidden=1024, heads=16, world=8, tp=1, pp=1, gbs=64)
    table = generate_candidates(cfg, load_search_space(None, "megatron"), gpus_per_node=8)
    cols = table.columns
    assert not np.any((cols["tp"] == 1) & (cols["sp"] == 1))
    per_chunk = 8 // (cols["pp"] * cols["vpp"])
    assert not np.any((cols["rc"] == 3) & (cols["rc_layers"] >= np.maximum(per_chunk, 1)) & (per_chunk >= 1)
                      & (8 % (cols["pp"] * cols["vpp"]) == 0))


def test_deepspeed_pins_layout_knobs() -> None:
    cfg = dataclasses.replace(gpt_config(world=16, tp=1, pp=1, gbs=64), framework="deepspeed")
    table = generate_candidates(cfg, load_search_space(None, "deepspeed"), gpus_per_node=8)
    cols = table.columns
    assert set(cols["tp"].tolist()) == {1} and set(cols["pp"].tolist()) == {1}
    assert set(cols["zero"].tolist()) == {0, 1, 2, 3}
    assert set(cols["rc"].tolist()) == {2}  # a plain DeepSpeed script's recompute is its own code: kept


def test_rule_masks_name_each_rule() -> None:
    cfg = gpt_config()
    table = generate_candidates(cfg, load_search_space(None, "megatron"), gpus_per_node=8)
    masks = rule_masks(cfg, table.columns)
    cols = table.columns
    bad_world = masks["world % (tp*pp*cp) != 0"]
    assert np.array_equal(bad_world, 1024 % (cols["tp"] * cols["pp"] * cols["cp"]) != 0)
    assert not masks["num_attention_heads % tp != 0"].any()  # 96 heads, tp in 1..8
    assert masks["layers do not split evenly over pp (and vpp)"][cols["pp"] == 64].all()  # 96 % 64 != 0


@settings(max_examples=60, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4]), mbs=st.sampled_from([1, 2, 4]),
       world=st.sampled_from([8, 16, 32]))
def test_apply_candidate_recomputes_dp_and_microbatches(tp: int, pp: int, mbs: int, world: int) -> None:
    cfg = gpt_config(layers=16, hidden=2048, heads=16, world=world, tp=1, pp=1, gbs=256)
    cand = dataclasses.replace(candidate_of(cfg), tp=tp, pp=pp, micro_batch_size=mbs)
    if world % (tp * pp):
        return
    new = apply_candidate(cfg, cand)
    dp = world // (tp * pp)
    assert new.parallel.dp == dp and new.batch.num_microbatches == 256 // (mbs * dp)
    assert new.model == cfg.model and new.world_size == world and new.batch.global_batch_size == 256
    assert candidate_of(new) == cand
    assert set(changed_fields(candidate_of(cfg), cand)) == {k for k, a, b in
        (("tp", 1, tp), ("pp", 1, pp), ("micro_batch_size", 1, mbs)) if a != b}


def test_megatron_deepspeed_keeps_cp_vpp_and_distopt() -> None:
    """Megatron-DeepSpeed: PipelineEngine (no interleaving), no --context-parallel-size, ZeRO instead of distopt."""
    cfg = dataclasses.replace(gpt_config(layers=24, hidden=2048, heads=16, world=64, tp=2, pp=2, gbs=512),
                              framework="megatron-deepspeed")
    cols = generate_candidates(cfg, load_search_space(None, "megatron-deepspeed"), gpus_per_node=8).columns
    assert set(cols["cp"].tolist()) == {1} and set(cols["vpp"].tolist()) == {1} and set(cols["distopt"].tolist()) == {0}
    assert set(cols["zero"].tolist()) == {0, 1, 2, 3} and len(set(cols["pp"].tolist())) > 1 and len(set(cols["tp"].tolist())) > 1


def test_megatron_deepspeed_searches_zero_2_and_3_where_the_pipeline_engine_does_not_run() -> None:
    """Megatron-DeepSpeed runs ZeRO-2/3 at PP 1 (--no-pipeline-parallel; its ZeRO-3 examples do), while DeepSpeed's
    PipelineEngine asserts 'ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism' at PP > 1. The default space
    searched ZeRO 0/1 only, so a ZeRO-3 user was offered ZeRO-1 layouts and never the ZeRO-3 ones; the PP > 1 rows
    are refused by a named rule that agrees with explain's, not one by one by the framework validation."""
    cfg = dataclasses.replace(gpt_config(layers=24, hidden=2048, heads=16, world=32, tp=1, pp=1, gbs=128, zero=3),
                              framework="megatron-deepspeed")
    table = generate_candidates(cfg, load_search_space(None, "megatron-deepspeed"), gpus_per_node=8)
    cols, masks = table.columns, rule_masks(cfg, table.columns)
    engine = masks["ZeRO-2/3 with DeepSpeed's pipeline engine (pp > 1)"]
    assert np.array_equal(engine, (cols["pp"] > 1) & (cols["zero"] >= 2))
    assert {2, 3} <= set(cols["zero"][~engine & (cols["pp"] == 1)].tolist())
    assert mask_disagreements(cfg, table) == []


def test_rule_masks_agree_with_the_frameworks_validation() -> None:
    """The vectorised rules never reject what `validate_config` (explain's rules) accepts, and miss nothing it
    rejects for these layouts (so the pruning counts name the real reasons)."""
    cfg = gpt_config(layers=24, hidden=2048, heads=16, world=32, tp=2, pp=2, gbs=128)
    table = generate_candidates(cfg, load_search_space(None, "megatron"), gpus_per_node=8)
    assert mask_disagreements(cfg, table) == []


def test_deepspeed_pipeline_engine_candidates_may_split_layers_unevenly() -> None:
    # BLOOM-176B: 70 layers on 384 GPUs with global batch 2048 needs a PP with a factor 3 (12, 3, 6, 24);
    # Megatron-DeepSpeed's PipelineEngine splits 70 over those, so they are valid layouts (they were all refused).
    cfg = dataclasses.replace(gpt_config(layers=70, hidden=14336, heads=112, world=384, tp=4, pp=12, gbs=2048),
                              framework="megatron-deepspeed", deepspeed_pipeline_engine=True)
    table = generate_candidates(cfg, load_search_space(None, "megatron"), gpus_per_node=8)
    cols, masks = table.columns, rule_masks(cfg, table.columns)
    uneven = masks["layers do not split evenly over pp (and vpp)"]
    assert not uneven[(cols["pp"] == 12) & (cols["vpp"] == 1)].any()
    assert uneven[(cols["pp"] == 12) & (cols["vpp"] > 1)].all()  # the engine never interleaves
    plain = dataclasses.replace(cfg, framework="megatron", deepspeed_pipeline_engine=False)
    assert rule_masks(plain, cols)["layers do not split evenly over pp (and vpp)"][cols["pp"] == 12].all()


def test_pad_vocab_size_to_keeps_its_padded_vocab_and_needs_tp_to_split_it() -> None:
    """The bigscience fork's --pad-vocab-size-to N: every candidate keeps N (no re-padding for its TP), and a TP
    that does not divide N is invalid (VocabParallelEmbedding's divide assert). GPT-2's BPE sizes the vocabulary
    (50257): the fork, known by --pad-vocab-size-to, has no --vocab-size (frameworks/megatron_unknown_args)."""
    from tests.frameworks.helpers import megatron

    cfg = megatron("--pad-vocab-size-to", "50260", "--make-vocab-size-divisible-by", "4", "--tensor-model-parallel-size",
                   "2", "--global-batch-size", "32", "--vocab-file", "vocab.json", "--merge-file", "merges.txt", gpus=32)
    assert cfg.model.vocab_size == 50257
    assert cfg.model.padded_vocab_size == 50260  # 4 x 12565
    four = dataclasses.replace(candidate_of(cfg), tp=4, micro_batch_size=1)
    assert apply_candidate(cfg, four).model.padded_vocab_size == 50260
    table = generate_candidates(cfg, load_search_space(None, "megatron"), gpus_per_node=8)
    tp = table.columns["tp"]
    bad = rule_masks(cfg, table.columns)["--pad-vocab-size-to % tp != 0 (VocabParallelEmbedding)"]
    assert set(tp[bad]) == {8} and 4 in set(tp[~bad])  # 50260 = 4 x 12565


def test_distributed_optimizer_with_nothing_to_shard_is_one_candidate() -> None:
    """At DP x CP = 1 (one GPU, or TP x PP = world) the distributed optimizer shards over one rank: the same job as
    without it, which filled the top rows twice ('mbs8' and 'mbs8 distopt', identical figures)."""
    cfg = gpt_config(world=8, tp=1, pp=1, mbs=1, gbs=64, layers=24, hidden=2048, heads=16)
    table = generate_candidates(cfg, load_search_space(None, "megatron"), 8)
    cands = [table.candidate(i) for i in range(len(table))]
    alone = [c for c in cands if c.tp * c.pp == 8]
    assert alone and not any(c.distributed_optimizer for c in alone)
    assert any(c.distributed_optimizer for c in cands if c.tp * c.pp < 8)  # still searched where it shards
    keys = [dataclasses.replace(c, distributed_optimizer=False) for c in alone]
    assert len(keys) == len(set(keys))


def test_interleaving_masks_follow_the_commands_micro_batch_group() -> None:
    """With --microbatch-group-size-per-virtual-pipeline-stage N Megatron needs PP <= N <= M and M % N = 0 or >= PP
    (schedules.py), not M % PP == 0: the mask applied M % PP and so let through layouts explain refuses (N 4 < PP 8)
    and rejected none it should have counted under the group rule."""
    base = gpt_config(layers=24, hidden=2048, heads=16, world=16, tp=1, pp=2, gbs=48)
    cfg = dataclasses.replace(base, parallel=dataclasses.replace(base.parallel, vpp=4, microbatch_group_size=4))
    table = generate_candidates(cfg, load_search_space(None, "megatron"), gpus_per_node=8)
    assert mask_disagreements(cfg, table) == []


def test_uneven_stage_masks_require_vpp_to_split_each_stage() -> None:
    """--decoder-first/last-pipeline-num-layers stay at the command's PP, where every stage's layers must split over
    the virtual chunks: first 5 / last 9 admit no VPP > 1 and first 4 / last 8 (middle 10) only VPP 2. The masks
    accepted any VPP there (2,600 rows explain refuses, counted as 'framework validation' after a wasted check)."""
    base = gpt_config(layers=32, hidden=2048, heads=16, world=32, tp=1, pp=4, gbs=128)
    for first, last in ((5, 9), (4, 8)):
        parallel = dataclasses.replace(base.parallel, decoder_first_pipeline_num_layers=first,
                                       decoder_last_pipeline_num_layers=last)
        cfg = dataclasses.replace(base, parallel=parallel)
        table = generate_candidates(cfg, load_search_space(None, "megatron"), gpus_per_node=8)
        assert mask_disagreements(cfg, table) == []


_ONE_NODE = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "24", "--hidden-size", "2048",
             "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
             "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16", "--vocab-size", "50257",
             "--tensor-model-parallel-size", "2"]


@pytest.mark.parametrize("flags", [
    ["--sequence-parallel", "--tp-comm-overlap"],
    ["--transformer-impl", "local"],
    ["--cpu-offloading", "--cpu-offloading-num-layers", "4"],
    ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads_params", "--use-distributed-optimizer",
     "--ckpt-format", "fsdp_dtensor"],
    ["--no-overlap-p2p-communication", "--pipeline-model-parallel-size", "4", "--num-layers-per-virtual-pipeline-stage", "3"],
    ["--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather",
     "--overlap-param-gather-with-optimizer-step", "--ckpt-format", "torch", "--pipeline-model-parallel-size", "2",
     "--num-layers-per-virtual-pipeline-stage", "4"],
])
def test_masks_of_flags_apply_keeps_agree_with_validation(flags: list[str]) -> None:
    """Flags --apply keeps bring rules in (--tp-comm-overlap needs sequence parallel, local attention refuses CP,
    --cpu-offloading refuses PP and recompute, FSDP needs the distributed optimizer, --no-overlap-p2p-communication
    refuses interleaving at PP 2, --overlap-param-gather-with-optimizer-step needs distopt and virtual stages): the
    masks let 739-4,754 rows of such commands through to a full check each, counted as 'framework validation'."""
    from llmperf_hook.frameworks.resolve import resolve_job

    _, cfg = resolve_job([*_ONE_NODE, *flags], {})
    table = generate_candidates(cfg, load_search_space(None, "megatron"), gpus_per_node=8)
    assert mask_disagreements(cfg, table) == []


def test_megatron_deepspeed_ulysses_heads_rule_is_a_named_mask() -> None:
    """Megatron-DeepSpeed with --ds-sequence-parallel-size 4 (kept) and 16 heads: TP 8 leaves 2 heads per rank for 4
    Ulysses ranks, which explain refuses (validation._check_ulysses); they were counted one by one as 'framework
    validation' instead of by the rule."""
    base = dataclasses.replace(gpt_config(layers=24, hidden=2048, heads=16, world=32, tp=1, pp=1, gbs=128),
                               framework="megatron-deepspeed")
    cfg = dataclasses.replace(base, parallel=dataclasses.replace(base.parallel, cp=4, dp=8))
    table = generate_candidates(cfg, load_search_space(None, "megatron-deepspeed"), gpus_per_node=8)
    masks = rule_masks(cfg, table.columns)
    heads = masks["DeepSpeed-Ulysses needs heads % sp == 0 and heads per TP rank divisible by or more than sp"]
    assert heads.any() and np.array_equal(heads, table.columns["tp"] == 8)
    assert mask_disagreements(cfg, table) == []
