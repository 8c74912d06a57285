"""Layout rules tune must apply to its candidates as the frameworks apply them to a command:
--overlap-moe-expert-parallel-comm (EP > 1, virtual stages when PP > 1, no full recompute), the flex
dispatcher's DeepEP / NCCL EP (ETP x EP > 1), and Megatron-DeepSpeed's Ulysses (--ds-sequence-parallel-size)
refusing --sequence-parallel. Rejected candidates are counted under the rule's name; `--apply` writes only
commands `explain` accepts."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.frameworks.validation import validate_config
from llmperf_hook.tune.apply import plan_tuned_command
from llmperf_hook.tune.candidate import apply_candidate, candidate_of
from llmperf_hook.tune.candidates import generate_candidates, rule_masks
from llmperf_hook.tune.search_space import load_search_space, parse_search_space

from .helpers import mask_disagreements, rule_rejected, run_cli, tune_apply_json

# Mixtral-8x7B with the alltoall dispatcher and its EP all-to-all overlapped: PP 4 with 2 virtual stages, EP 4.
OVERLAP = [
    "torchrun", "--nnodes", "8", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "32",
    "--hidden-size", "4096", "--ffn-hidden-size", "14336", "--num-attention-heads", "32", "--group-query-attention",
    "--num-query-groups", "8", "--swiglu", "--normalization", "RMSNorm", "--position-embedding-type", "rope",
    "--untie-embeddings-and-output-weights", "--disable-bias-linear", "--num-experts", "8", "--moe-router-topk", "2",
    "--moe-grouped-gemm", "--expert-model-parallel-size", "4", "--moe-token-dispatcher-type", "alltoall",
    "--overlap-moe-expert-parallel-comm", "--seq-length", "4096", "--max-position-embeddings", "32768",
    "--vocab-size", "32000", "--micro-batch-size", "1", "--global-batch-size", "256",
    "--pipeline-model-parallel-size", "4", "--num-layers-per-virtual-pipeline-stage", "4",
    "--use-distributed-optimizer", "--bf16",
]
OVERLAP_RULES = ("EP comm overlap needs ep > 1", "EP comm overlap needs vpp when pp > 1",
                 "EP comm overlap refuses full recompute")
SPACE = {"micro_batch_size": [1, 2], "virtual_pipeline": [1, 2, 4], "context_parallel": [1],
         "recompute": ["none", "selective", "full", "block"], "distributed_optimizer": [True]}


def _with(argv: list[str], flag: str, value: str | None) -> list[str]:
    """argv with `flag`'s value replaced (value None: the flag and its value dropped)."""
    i = argv.index(flag)
    return argv[:i] + argv[i + 2:] if value is None else [*argv[:i + 1], value, *argv[i + 2:]]


def test_tune_never_proposes_what_the_ep_overlap_refuses(tmp_path: Path, capsys) -> None:
    code, out, err = tune_apply_json(tmp_path, capsys, SPACE, OVERLAP)
    assert code == 0, err
    data = json.loads(out)
    invalid = data["search"]["invalid_by_rule"]
    assert all(invalid.get(rule, 0) > 0 for rule in OVERLAP_RULES), invalid
    assert not any(key.startswith("framework validation") for key in invalid), invalid
    for row in data["top"]:
        assert row["ep"] > 1 and (row["pp"] == 1 or row["vpp"] > 1) and row["recompute"] in ("none", "selective"), row
    code, eout, eerr = run_cli(["explain", "--format", "json", "--", *data["applied"]["argv"]], capsys)
    assert code == 0, eerr
    best, resolved = data["top"][0], json.loads(eout)
    assert [resolved[k] for k in ("tp", "pp", "vpp", "ep", "micro_batch_size")] == [
        best[k] for k in ("tp", "pp", "vpp", "ep", "micro_batch_size")]


@pytest.mark.parametrize("extra", [[], ["--moe-token-dispatcher-type", "flex"]], ids=["alltoall", "flex-deepep"])
def test_every_valid_candidate_rewrites_to_a_command_explain_accepts(extra: list[str]) -> None:
    """Rows the masks and validate_config keep, rewritten as --apply writes them, resolve without an error."""
    argv = _with(OVERLAP, "--moe-token-dispatcher-type", extra[1]) if extra else OVERLAP
    cfg = resolve_job(argv, {})[1]
    table = generate_candidates(cfg, load_search_space(None, "megatron"), 8)
    valid = np.flatnonzero(~rule_rejected(cfg, table))
    for i in np.random.default_rng(5).choice(valid, 60, replace=False):
        cand = table.candidate(int(i))
        new_cfg = apply_candidate(cfg, cand)
        validate_config(new_cfg)
        _, parsed = resolve_job(list(plan_tuned_command(argv, cfg, cand, new_cfg).argv), {})
        assert (parsed.parallel.pp, parsed.parallel.vpp, parsed.parallel.ep) == (cand.pp, cand.vpp, cand.ep)


@pytest.mark.parametrize("change, rule", [
    ({"pp": 2, "vpp": 1}, "without virtual stages"),
    ({"recompute": "full", "recompute_num_layers": 1}, "disable full recomputation"),
    ({"ep": 1}, "only supported with expert model parallelism"),
])
def test_validate_config_refuses_candidates_that_break_the_ep_overlap(change: dict, rule: str) -> None:
    cfg = resolve_job(OVERLAP, {})[1]
    cand = dataclasses.replace(candidate_of(cfg), **change)
    with pytest.raises(ConfigError, match=rule):
        validate_config(apply_candidate(cfg, cand))
    validate_config(apply_candidate(cfg, dataclasses.replace(cand, pp=1, vpp=1, recompute="selective",
                                                             recompute_num_layers=None, ep=4)))


def test_a_virtual_stage_flag_of_one_stage_does_not_satisfy_the_rule_but_a_longer_layout_does() -> None:
    """--num-layers-per-virtual-pipeline-stage 8 at PP 4 gives one virtual stage, which arguments.py resets to None:
    Megatron refuses the overlap then. A --pipeline-model-parallel-layout of 8 stages at PP 4 sets 2 virtual stages
    (get_num_stages_from_str // PP): accepted, and candidates keeping its PP are valid."""
    with pytest.raises(ConfigError, match="without virtual stages"):
        resolve_job(_with(OVERLAP, "--num-layers-per-virtual-pipeline-stage", "8"), {})
    argv = [*_with(OVERLAP, "--num-layers-per-virtual-pipeline-stage", None),
            "--pipeline-model-parallel-layout", "E(t*4|)*7,t*4L"]
    cfg = resolve_job(argv, {})[1]
    assert (cfg.parallel.pp, cfg.parallel.vpp) == (4, 2)
    table = generate_candidates(cfg, parse_search_space(SPACE), 8)
    vpp_rule = rule_masks(cfg, table.columns)["EP comm overlap needs vpp when pp > 1"]
    c = table.columns
    assert not vpp_rule[(c["pp"] == 4) & (c["vpp"] == 2)].any() and vpp_rule[(c["pp"] > 1) & (c["vpp"] == 1)].all()


def test_deepep_needs_an_expert_group() -> None:
    """MoEFlexTokenDispatcher asserts 'DeepEP dispatcher requires TPxEP > 1': EP 1 at TP 1 is pruned by name."""
    argv = _with(_with(OVERLAP, "--moe-token-dispatcher-type", "flex"), "--expert-model-parallel-size", "2")
    argv = [w for w in argv if w != "--overlap-moe-expert-parallel-comm"]
    cfg = resolve_job(argv, {})[1]
    table = generate_candidates(cfg, parse_search_space({**SPACE, "tensor_parallel": [1, 2]}), 8)
    mask = rule_masks(cfg, table.columns)["flex DeepEP / NCCL EP need etp*ep > 1"]
    c = table.columns
    assert np.array_equal(mask, c["ep"] * c["etp"] == 1) and mask.any()
    with pytest.raises(ConfigError, match="requires TPxEP > 1"):
        validate_config(apply_candidate(cfg, dataclasses.replace(candidate_of(cfg), ep=1)))


MDS_ULYSSES = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--num-layers", "24", "--hidden-size", "2048",
               "--num-attention-heads", "16", "--seq-length", "4096", "--max-position-embeddings", "4096",
               "--vocab-size", "50257", "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16", "--deepspeed",
               "--deepspeed_config", "ds.json", "--tensor-model-parallel-size", "2", "--ds-sequence-parallel-size", "2"]


def test_ulysses_commands_never_get_megatron_sequence_parallel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
                                                  "zero_optimization": {"stage": 1}, "bf16": {"enabled": True}}))
    cfg = resolve_job(MDS_ULYSSES, {})[1]
    with pytest.raises(ConfigError, match="not compatible with Megatron-LM's sequence parallel"):
        validate_config(apply_candidate(cfg, dataclasses.replace(candidate_of(cfg), sequence_parallel=True)))
    (tmp_path / "space.yaml").write_text(json.dumps({"tensor_parallel": [2, 4], "micro_batch_size": [1, 2]}))
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--top", "10", "--search", str(tmp_path / "space.yaml"),
                           "--format", "json", "--apply", "--dry-run", "--", *MDS_ULYSSES], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["search"]["invalid_by_rule"]["DeepSpeed-Ulysses refuses sequence parallel"] > 0
    assert data["top"] and all(row["cp"] == 2 and not row["sequence_parallel"] for row in data["top"])
    code, _, eerr = run_cli(["explain", "--", *data["applied"]["argv"]], capsys)
    assert code == 0, eerr


@pytest.mark.parametrize("argv", [
    OVERLAP,
    _with(OVERLAP, "--moe-token-dispatcher-type", "flex"),
    [*OVERLAP, "--overlap-grad-reduce", "--overlap-param-gather"],
], ids=["alltoall-overlap", "flex-overlap", "overlap-param-gather"])
def test_rule_masks_agree_with_the_frameworks_validation(argv: list[str]) -> None:
    """Every row the masks keep passes validate_config and every row they reject fails it (rows whose TP x PP x CP
    does not divide the world cannot even become a TrainingConfig), so the counts name the real reasons."""
    cfg = resolve_job(argv, {})[1]
    space = {**SPACE, "tensor_parallel": [1, 2], "expert_parallel": [1, 4, 8], "distributed_optimizer": [False, True]}
    table = generate_candidates(cfg, parse_search_space(space), 8)
    assert mask_disagreements(cfg, table) == [] and rule_rejected(cfg, table).sum() < len(table)


def test_a_custom_pipeline_layout_keeps_its_pipeline_degree() -> None:
    """--pipeline-model-parallel-layout names every stage: a candidate with another PP or VPP would launch with
    a layout that no longer matches (the rewritten command keeps the flag), so tune names and drops it."""
    argv = [*_with(OVERLAP, "--num-layers-per-virtual-pipeline-stage", None),
            "--pipeline-model-parallel-layout", "E(t*4|)*7,t*4L"]
    argv = [w for w in argv if w != "--overlap-moe-expert-parallel-comm"]
    cfg = resolve_job(argv, {})[1]
    table = generate_candidates(cfg, parse_search_space(SPACE), 8)
    mask = rule_masks(cfg, table.columns)["custom pipeline layout fixes pp and vpp"]
    c = table.columns
    assert np.array_equal(mask, (c["pp"] != 4) | (c["vpp"] != 2)) and mask.any() and not mask.all()


def test_a_custom_pipeline_layout_is_not_asked_for_an_even_split(tmp_path: Path, capsys) -> None:
    """The layout places each layer itself, so 30 layers over PP 4 x VPP 2 is the command's own valid layout (explain
    accepts it); the even-split rule rejected every candidate, the command's included, and tune exited 3 with
    'No candidate passed the layout rules' (Megatron-LM's CI job moe_scoped_cudagraph: Et|(tt|)*6mL, 13 layers)."""
    argv = [*_with(_with(OVERLAP, "--num-layers-per-virtual-pipeline-stage", None), "--num-layers", "30"),
            "--pipeline-model-parallel-layout", "Et*2|(t*4|)*6,t*4L"]
    argv = [w for w in argv if w != "--overlap-moe-expert-parallel-comm"]
    cfg = resolve_job(argv, {})[1]
    assert (cfg.parallel.pp, cfg.parallel.vpp) == (4, 2)
    table = generate_candidates(cfg, parse_search_space(SPACE), 8)
    own = np.flatnonzero([table.candidate(i) == candidate_of(cfg) for i in range(len(table))])
    assert len(own) == 1 and not rule_rejected(cfg, table)[own].any()
    code, out, err = tune_apply_json(tmp_path, capsys, {**SPACE, "expert_parallel": [4]}, argv)
    assert code == 0, err
    explained = run_cli(["explain", "--format", "json", "--", *json.loads(out)["applied"]["argv"]], capsys)
    assert explained[0] == 0, explained[2]
