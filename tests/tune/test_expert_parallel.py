"""Expert parallelism as a tune knob: a Mixtral-8x7B Megatron command on 64 GPUs gets EP candidates that obey
Megatron-LM's rules, round-trip through --apply into what `explain` resolves, and dense models are unchanged."""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.frameworks.validation import validate_config
from llmperf_hook.tune import surrogate
from llmperf_hook.tune.apply import plan_tuned_command
from llmperf_hook.tune.candidate import Candidate, apply_candidate, candidate_of
from llmperf_hook.tune.candidates import candidates_from_list, generate_candidates, knob_values
from llmperf_hook.tune.megatron_argv import rewrite_megatron_argv
from llmperf_hook.tune.search_space import load_search_space, parse_search_space

from .helpers import gpt_config, rule_rejected, run_cli, tune_apply_json, with_model
from .test_tune_command import SMALL_MEGATRON

# Megatron-LM examples/mixtral/train_mixtral_8x7b_distributed.sh, on 8 nodes of 8 GPUs, EP 2.
MIXTRAL = [
    "torchrun", "--nnodes", "8", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "32",
    "--hidden-size", "4096", "--ffn-hidden-size", "14336", "--num-attention-heads", "32", "--group-query-attention",
    "--num-query-groups", "8", "--kv-channels", "128", "--seq-length", "4096", "--max-position-embeddings", "32768",
    "--tokenizer-type", "Llama2Tokenizer", "--vocab-size", "32000", "--position-embedding-type", "rope", "--swiglu",
    "--normalization", "RMSNorm", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
    "--num-experts", "8", "--moe-router-topk", "2", "--moe-token-dispatcher-type", "alltoall", "--moe-grouped-gemm",
    "--expert-model-parallel-size", "2",
    "--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "4", "--use-distributed-optimizer",
    "--micro-batch-size", "1", "--global-batch-size", "256", "--bf16",
]
# A narrower space keeps the end-to-end tests fast; EP stays `auto`.
NARROW = {"micro_batch_size": [1, 2], "virtual_pipeline": [1], "context_parallel": [1], "recompute": ["none", "full"],
          "distributed_optimizer": [True]}


@functools.lru_cache(maxsize=1)
def _mixtral():
    return resolve_job(MIXTRAL, {})[1]


def _valid_rows(cfg, space, gpus_per_node: int = 8):
    table = generate_candidates(cfg, space, gpus_per_node)
    return table, np.flatnonzero(~rule_rejected(cfg, table))


def test_mixtral_candidates_span_the_divisors_of_num_experts() -> None:
    cfg = _mixtral()
    table, valid = _valid_rows(cfg, load_search_space(None, "megatron"))
    assert set(table.columns["ep"].tolist()) == {1, 2, 4, 8}
    assert set(table.columns["ep"][valid].tolist()) == {1, 2, 4, 8}
    assert np.array_equal(table.columns["etp"], table.columns["tp"])  # expert TP follows TP unless asked


def test_valid_expert_candidates_pass_explain_rules() -> None:
    """Every row the masks keep obeys Megatron's expert rules, and (sampled) passes explain's validate_config."""
    cfg = _mixtral()
    table, valid = _valid_rows(cfg, load_search_space(None, "megatron"))
    c = table.columns
    ep, etp, tp, pp, sp = (c[k][valid] for k in ("ep", "etp", "tp", "pp", "sp"))
    assert np.all(8 % ep == 0) and np.all(64 % (etp * ep * pp) == 0)
    assert np.all((tp == 1) | (sp == 1))  # Megatron's MoE layer refuses TP > 1 without sequence parallelism
    for i in np.random.default_rng(0).choice(valid, 150, replace=False):
        validate_config(apply_candidate(cfg, table.candidate(int(i))))


def test_etp_list_searches_pinned_expert_tp() -> None:
    cfg = _mixtral()
    space = parse_search_space({**NARROW, "tensor_parallel": [2], "expert_tensor_parallel": [1]})
    table, valid = _valid_rows(cfg, space)
    cands = {table.candidate(int(i)) for i in valid}
    assert {c.etp for c in cands} == {None, 1}
    assert all(apply_candidate(cfg, c).parallel.etp == c.expert_tp for c in cands)


def test_dense_models_get_no_expert_candidates() -> None:
    """Counts of the tree before EP was searched (GPT-3 175B on 1,024 GPUs; the 16-GPU command of the e2e tests),
    less the distributed-optimizer twins at DP x CP = 1 merged since (49,700 -> 48,020, 22,820 -> 20,720)."""
    cases = ((gpt_config(), (48_020, 84_481)), (resolve_job(SMALL_MEGATRON, {})[1], (20_720, 38_401)))
    wide_space = parse_search_space({"expert_parallel": [1, 2, 4], "expert_tensor_parallel": [1]})
    for cfg, (distinct, generated) in cases:
        table = generate_candidates(cfg, load_search_space(None, "megatron"), 8)
        assert (len(table), table.num_generated) == (distinct, generated)
        assert set(table.columns["ep"].tolist()) == {1}
        assert len(generate_candidates(cfg, wide_space, 8)) == len(generate_candidates(cfg, parse_search_space({}), 8))


def test_megatron_deepspeed_keeps_its_ep() -> None:
    """DeepSpeed-MoE's expert groups are not modelled apart from DP: its EP is the command's."""
    cfg = dataclasses.replace(_mixtral(), framework="megatron-deepspeed")
    vals = knob_values(cfg, load_search_space(None, "megatron-deepspeed"), 8)
    assert vals["ep"] == [2] and vals["etp"] == [0]


@settings(max_examples=40, deadline=None)
@given(experts=st.sampled_from([2, 4, 6, 8, 16, 64]), world=st.sampled_from([8, 16, 24, 32, 64, 128]),
       tp=st.sampled_from([1, 2, 4]), pp=st.sampled_from([1, 2, 4]), user_ep=st.sampled_from([1, 2]),
       listed=st.lists(st.integers(1, 32), max_size=4))
def test_expert_candidates_never_break_divisibility(experts: int, world: int, tp: int, pp: int, user_ep: int,
                                                     listed: list[int]) -> None:
    assume(world % (tp * pp) == 0)
    base = gpt_config(layers=8, hidden=1024, heads=16, seq=2048, world=world, tp=tp, pp=pp, gbs=4 * world)
    cfg = with_model(base, num_experts=experts, moe_router_topk=2, moe_ffn_hidden_size=2048)
    ep = user_ep if experts % user_ep == 0 else 1
    cfg = dataclasses.replace(cfg, parallel=dataclasses.replace(cfg.parallel, ep=ep, etp=tp, sequence_parallel=tp > 1))
    space = parse_search_space({"micro_batch_size": [1], "recompute": ["none"], "virtual_pipeline": [1],
                                **({"expert_parallel": listed} if listed else {})})
    table, valid = _valid_rows(cfg, space)
    c = table.columns
    ep, etp, pp_ = c["ep"][valid], c["etp"][valid], c["pp"][valid]
    assert np.all(experts % ep == 0) and np.all(world % (etp * ep * pp_) == 0)
    for i in valid[:20]:
        try:
            validate_config(apply_candidate(cfg, table.candidate(int(i))))
        except ConfigError as err:  # another rule may still reject it, never an expert one
            assert "expert" not in str(err), str(err)


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_apply_roundtrips_expert_layouts(data) -> None:
    cfg = _mixtral()
    space = parse_search_space({**NARROW, "tensor_parallel": [1, 2, 4], "expert_tensor_parallel": [1, 2]})
    table, valid = _valid_rows(cfg, space)
    cand = table.candidate(int(data.draw(st.sampled_from(valid.tolist()))))
    new_cfg = apply_candidate(cfg, cand)
    plan = plan_tuned_command(MIXTRAL, cfg, cand, new_cfg)
    _, parsed = resolve_job(list(plan.argv), {})
    p, q = parsed.parallel, new_cfg.parallel
    assert (p.tp, p.pp, p.dp, p.ep, p.etp, p.sequence_parallel) == (q.tp, q.pp, q.dp, q.ep, q.etp, q.sequence_parallel)
    assert parsed.batch == new_cfg.batch and parsed.model.num_experts == 8


def _cand(tp: int, sp: bool, ep: int = 1, etp: int | None = None) -> Candidate:
    return Candidate(tp, 1, 1, 1, sp, 1, "none", None, False, 0, ep=ep, etp=etp)


@pytest.mark.parametrize("argv, base, new, expect", [
    # expert TP follows TP: nothing to write
    (["--tensor-model-parallel-size", "2"], _cand(2, False), _cand(4, True),
     ["--tensor-model-parallel-size", "4", "--sequence-parallel"]),
    # the user's --expert-tensor-parallel-size equal to the old TP would pin the old TP: dropped
    (["--tensor-model-parallel-size", "2", "--expert-tensor-parallel-size", "2"], _cand(2, False), _cand(4, True, ep=4),
     ["--tensor-model-parallel-size", "4", "--expert-model-parallel-size", "4", "--sequence-parallel"]),
    # inline spelling kept; a pinned expert TP is added
    (["--tensor-model-parallel-size", "2", "--expert-model-parallel-size=2"], _cand(2, False, ep=2),
     _cand(2, True, ep=8, etp=1),
     ["--tensor-model-parallel-size", "2", "--expert-model-parallel-size=8", "--expert-tensor-parallel-size", "1",
      "--sequence-parallel"]),
])
def test_expert_flags_rewritten(argv: list[str], base: Candidate, new: Candidate, expect: list[str]) -> None:
    assert rewrite_megatron_argv(argv, base, new, 32, "megatron") == expect


def test_mixtral_tune_apply_is_accepted_by_explain(tmp_path: Path, capsys) -> None:
    code, out, err = tune_apply_json(tmp_path, capsys, NARROW, MIXTRAL)
    assert code == 0, err
    data = json.loads(out)
    s = data["search"]
    assert s["num_considered"] == (s["num_invalid"] + s["num_oom_estimated"] + s["num_oom_predicted"]
                                   + s["num_over_margin"] + s["num_slower_by_estimate"] + s["num_fitting"])
    best = data["top"][0]
    assert best["ep"] != 2  # EP 2 holds 4 of the 8 experts per GPU: the model prefers more expert parallelism
    changed = {c["key"]: (c["old"], c["new"]) for c in best["changes"]}
    assert changed["--expert-model-parallel-size"] == ("2", str(best["ep"]))
    code, eout, eerr = run_cli(["explain", "--format", "json", "--", *data["applied"]["argv"]], capsys)
    assert code == 0, eerr
    resolved = json.loads(eout)
    assert (resolved["ep"], resolved["tp"], resolved["pp"], resolved["micro_batch_size"]) == (
        best["ep"], best["tp"], best["pp"], best["micro_batch_size"])
    code, pout, perr = run_cli(["predict", "--cluster", "dgx-h100", "--format", "json", "--",
                             *data["applied"]["argv"]], capsys)
    assert code == 0, perr
    assert json.loads(pout)["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-5)


def test_moe_without_sequence_parallel_does_not_compete(tmp_path: Path, capsys) -> None:
    """TP 2 without --sequence-parallel: Megatron's MoE layer raises in training. The command itself is rejected
    (exit 2, naming the rule, as explain does); from a valid command, tune never ranks such a layout."""
    argv = list(MIXTRAL)
    argv[argv.index("--tensor-model-parallel-size") + 1] = "2"
    code, _, err = run_cli(["tune", "--cluster", "dgx-h100", "--", *argv], capsys)
    assert code == 2 and "needs --sequence-parallel" in err and "moe_layer.py" in err
    (tmp_path / "space.yaml").write_text(json.dumps({**NARROW, "tensor_parallel": [1, 2]}))
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--top", "3", "--format", "json", "--search",
                           str(tmp_path / "space.yaml"), "--", *argv, "--sequence-parallel"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["search"]["invalid_by_rule"]["MoE with tp > 1 needs sequence parallel"] > 0
    assert all(t["tp"] == 1 or t["sequence_parallel"] for t in data["top"])


def test_memory_estimate_is_the_memory_models_for_moe() -> None:
    """The surrogate's expert states (EP x ETP split, expert-DP sharding) are the memory model's: the OOM prune is
    predict's verdict."""
    from llmperf_hook import api
    from llmperf_hook.commands.tune import memory_only

    cfg, spec = _mixtral(), api.load_cluster("dgx-h100")
    table, valid = _valid_rows(cfg, load_search_space(None, "megatron"))
    picks = np.random.default_rng(3).choice(valid, 60, replace=False)
    cands = tuple(table.candidate(int(i)) for i in picks)
    est = surrogate.estimate(cfg, spec, candidates_from_list(cands).columns).peak_bytes
    full = np.array([memory_only(apply_candidate(cfg, c), spec).peak_bytes_per_gpu for c in cands])
    np.testing.assert_allclose(est, full, rtol=0, atol=64)  # stage_memory rounds each component to whole bytes
    assert candidate_of(cfg).ep == 2 and {c.ep for c in cands} == {1, 2, 4, 8}
