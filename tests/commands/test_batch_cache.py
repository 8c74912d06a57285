"""predict --batch's caches (graph/build.GraphMemo, predict/fitted.batch_lookups): a repeated command is answered as
if alone, and a file changed between two commands of one batch is read again."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from llmperf_hook import api
from llmperf_hook.commands.predict import predict_batch_line
from llmperf_hook.graph.build import GraphMemo, build_graph
from llmperf_hook.predict import dispatch, fitted
from llmperf_hook.profile.profile_io import meta_sha256
from llmperf_hook.resources import configs_dir

MEGATRON = ("torchrun --nnodes 1 --nproc-per-node 8 pretrain_gpt.py --num-layers 4 --hidden-size 1024 "
            "--num-attention-heads 16 --seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 2 "
            "--global-batch-size 32 --tensor-model-parallel-size 2 --bf16 --vocab-size 50257")
DEEPSPEED = ("deepspeed --num_nodes 1 --num_gpus 8 pretrain_gpt.py --deepspeed --deepspeed_config ds.json --no-pipeline-parallel "
             "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
             "--max-position-embeddings 1024 --micro-batch-size 2 --global-batch-size 16 --bf16 --vocab-size 50257")
DEFAULTS = {"cluster": "dgx-a100", "hardware": None, "nnodes": None, "nproc_per_node": None, "model": None, "id": None}


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _json(pred: api.Prediction) -> str:
    return json.dumps(api.prediction_json(pred))


def test_a_repeated_configuration_reuses_its_graph_and_predicts_the_same() -> None:
    job, cfg, spec, _ = api.resolve_command(MEGATRON.split(), {}, cluster="dgx-a100")
    _, same_cfg, _, _ = api.resolve_command(MEGATRON.split(), {}, cluster="dgx-a100")
    _, other_cfg, _, _ = api.resolve_command(MEGATRON.replace("--micro-batch-size 2", "--micro-batch-size 1").split(),
                                             {}, cluster="dgx-a100")
    memo = GraphMemo()
    graph = build_graph(cfg, spec, memo)
    assert build_graph(same_cfg, spec, memo) is graph
    assert build_graph(other_cfg, spec, memo) is not graph
    assert graph == build_graph(cfg, spec)  # what a batch builds is what one command builds
    alone = api.Prediction(job, cfg, api.predict_config(cfg, spec), spec)
    assert _json(api.Prediction(job, cfg, api.predict_config(cfg, spec, graphs=memo), spec)) == _json(alone)


def test_the_op_times_of_a_remembered_graph_follow_its_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    _, cfg, spec, _ = api.resolve_command(MEGATRON.split(), {}, cluster="dgx-a100")
    memo = GraphMemo()
    graph = build_graph(cfg, spec, memo)
    derived = memo.derived(graph)
    fitted_times = dispatch.predict_op_times(graph, spec, cfg.precision, derived)
    assert dispatch.predict_op_times(graph, spec, cfg.precision, derived) is fitted_times
    monkeypatch.setattr(dispatch, "find_operator_profile", lambda cluster, dtype: None)  # the profile removed
    roofline = dispatch.predict_op_times(graph, spec, cfg.precision, derived)
    assert roofline != fitted_times and roofline == dispatch.predict_op_times(graph, spec, cfg.precision)
    assert memo.derived(build_graph(cfg, spec)) is None  # a graph the memo does not hold has no results in it


def test_the_graph_memo_keeps_at_most_its_limit() -> None:
    memo = GraphMemo(limit=2)
    _, _, spec, _ = api.resolve_command(MEGATRON.split(), {}, cluster="dgx-a100")
    cfgs = [api.resolve_command(MEGATRON.replace("--num-layers 4", f"--num-layers {n}").split(), {},
                                cluster="dgx-a100")[1] for n in (2, 4, 6)]
    graphs = [build_graph(cfg, spec, memo) for cfg in cfgs]
    assert build_graph(cfgs[2], spec, memo) is graphs[2]
    assert memo.derived(graphs[0]) is None and memo.derived(graphs[2]) == {}  # dropped with its graph
    assert build_graph(cfgs[0], spec, memo) is not graphs[0]  # the oldest was dropped, built again
    assert build_graph(cfgs[0], spec, memo) == graphs[0]


def test_a_ds_config_changed_between_two_lines_of_a_batch_is_read_again(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    ds = tmp_path / "ds.json"
    clusters: dict = {}
    memo = GraphMemo()
    rows, alone = [], []
    with fitted.batch_lookups():
        for stage in (1, 3, 1):
            ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": stage},
                                      "bf16": {"enabled": True}}))
            rows.append(_json(predict_batch_line(DEEPSPEED, DEFAULTS, clusters, memo)[0]))
            alone.append(_json(predict_batch_line(DEEPSPEED, DEFAULTS, {})[0]))  # no memo: the line on its own
    assert [json.loads(row)["config"]["zero_stage"] for row in rows] == [1, 3, 1]
    assert rows == alone and rows[1] != rows[0]


def _user_copy(home: Path, note: str) -> Path:
    """A user profile of a100-sxm4-80gb (the shipped one's files) whose provenance says `note`."""
    user = home / "profiles" / "a100-sxm4-80gb"
    if not user.exists():
        shutil.copytree(configs_dir() / "profiles" / "a100-sxm4-80gb", user)
    doc = json.loads((user / "profile.json").read_text())
    doc["provenance"]["samples"] = note
    doc["meta_sha256"] = meta_sha256(doc)
    staged = user / "profile.json.new"
    staged.write_text(json.dumps(doc))
    os.replace(staged, user / "profile.json")  # as a writer that renames into place: a new inode, maybe one size
    return user


def test_a_profile_changed_between_two_commands_of_a_batch_is_read_again(_home: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    reads = []
    content_key = fitted.content_key
    monkeypatch.setattr(fitted, "content_key", lambda path: reads.append(path) or content_key(path))
    with fitted.batch_lookups():
        shipped = fitted.find_profile("a100-sxm4-80gb", "fp16")
        assert fitted.find_profile("a100-sxm4-80gb", "fp16") is shipped
        assert len(reads) == 1  # the second command looked nothing up
        user = _user_copy(_home, "user copy 1")  # a profile fitted while the batch runs
        assert fitted.find_profile("a100-sxm4-80gb", "fp16").meta.provenance["samples"] == "user copy 1"
        _user_copy(_home, "user copy 2")  # the same size, replaced within the same second
        assert fitted.find_profile("a100-sxm4-80gb", "fp16").meta.provenance["samples"] == "user copy 2"
        assert fitted.find_profile("a100-sxm4-80gb", "fp16").meta.provenance["samples"] == "user copy 2"
        shutil.rmtree(user)
        assert fitted.find_profile("a100-sxm4-80gb", "fp16") is shipped
    reads.clear()
    fitted.find_profile("a100-sxm4-80gb", "fp16")
    fitted.find_profile("a100-sxm4-80gb", "fp16")
    assert len(reads) == 2  # outside a batch every call looks up afresh


def test_a_comm_model_removed_between_two_commands_of_a_batch_is_not_used(_home: Path) -> None:
    user = _home / "profiles" / "comm" / "perlmutter"
    with fitted.batch_lookups():
        shipped = fitted.find_comm_model("perlmutter")
        assert shipped is not None and fitted.find_comm_model("perlmutter") is shipped
        user.parent.mkdir(parents=True)
        user.write_text("not a folder")  # damage: refused, never silently the shipped model
        with pytest.raises(Exception, match="is a file, not a folder"):
            fitted.find_comm_model("perlmutter")
        user.unlink()
        assert fitted.find_comm_model("perlmutter") is shipped
