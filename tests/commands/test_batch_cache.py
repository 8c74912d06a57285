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


def test_the_graph_memo_bounds_its_graphs_not_only_its_keys() -> None:
    """Commands that differ only outside the lookup key (here the dropout) share one key: a 10,000-line sweep of
    them must not keep 10,000 graphs (~37 KB each) nor compare each new line with all of them."""
    memo = GraphMemo(limit=2)
    _, _, spec, _ = api.resolve_command(MEGATRON.split(), {}, cluster="dgx-a100")
    cfgs = [api.resolve_command(f"{MEGATRON} --hidden-dropout {p}".split(), {}, cluster="dgx-a100")[1]
            for p in (0.1, 0.2, 0.3)]
    graphs = [build_graph(cfg, spec, memo) for cfg in cfgs]
    assert memo.derived(graphs[0]) is None  # the oldest graph dropped, though its key is still held
    assert build_graph(cfgs[1], spec, memo) is graphs[1] and build_graph(cfgs[2], spec, memo) is graphs[2]


def test_a_profile_rewritten_in_place_is_read_again(_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An editor or `cp` onto the file: the same inode and size, only the times change (here set apart by utime,
    as a coarse-timestamp file system may not)."""
    user = _user_copy(_home, "user copy A")
    meta = user / "profile.json"
    monkeypatch.setattr(fitted, "RACY_NS", 0)  # the stat signature alone decides, though the files are new
    reads = []
    content_key = fitted.content_key
    monkeypatch.setattr(fitted, "content_key", lambda path: reads.append(path) or content_key(path))
    with fitted.batch_lookups():
        assert fitted.find_profile("a100-sxm4-80gb", "fp16").meta.provenance["samples"] == "user copy A"
        assert fitted.find_profile("a100-sxm4-80gb", "fp16").meta.provenance["samples"] == "user copy A"
        assert len(reads) == 1  # kept while unchanged
        inode, size = meta.stat().st_ino, meta.stat().st_size
        text = meta.read_text().replace('"user copy A"', '"user copy B"')
        doc = json.loads(text)
        doc["meta_sha256"] = meta_sha256(doc)
        text = json.dumps(doc)
        with open(meta, "r+", encoding="utf-8") as f:  # in place, the same size
            f.write(text)
            f.truncate()
        os.utime(meta, ns=(meta.stat().st_atime_ns, meta.stat().st_mtime_ns + 1_000_000_000))
        assert (meta.stat().st_ino, meta.stat().st_size) == (inode, size)
        assert fitted.find_profile("a100-sxm4-80gb", "fp16").meta.provenance["samples"] == "user copy B"


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _batch_rows_and_alone(path: Path, cluster: str, capsys: pytest.CaptureFixture) -> tuple[list[str], list[str]]:
    """predict --batch's JSON rows of `path`, and each of its lines predicted on its own (no memo, no lookups kept)."""
    from llmperf_hook.commands.predict import batch_result, join_continued_lines, run_batch, working_directory

    defaults = {**DEFAULTS, "cluster": cluster}
    run_batch(str(path), "json", defaults)
    rows = capsys.readouterr().out.splitlines()
    with working_directory(path.parent):
        alone = [batch_result(number, line, defaults, "json", {})[0]
                 for number, line in join_continued_lines(path.read_text().splitlines())]
    return rows, [row for row in alone if row is not None]


@pytest.mark.parametrize("example, cluster", [("deepspeed-zero3", "dgx-a100"), ("gpt3-175b-dgx-a100", "dgx-a100"),
                                              ("llama3-8b-dgx-h100", "dgx-h100")])
def test_an_example_batch_predicts_each_line_as_alone(example: str, cluster: str,
                                                      capsys: pytest.CaptureFixture) -> None:
    rows, alone = _batch_rows_and_alone(EXAMPLES / example / "commands.txt", cluster, capsys)
    assert len(rows) >= 2 and rows == alone


def test_a_batch_repeating_commands_that_differ_outside_the_memo_key_predicts_each_as_alone(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Equal model, layout, batch and precision (the memo's key) with another environment (launch order), dropout
    or recompute, each repeated: every row is its line's own prediction, warnings included."""
    variants = [MEGATRON, f"CUDA_DEVICE_MAX_CONNECTIONS=8 {MEGATRON}", f"{MEGATRON} --hidden-dropout 0.0",
                f"{MEGATRON} --recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
                f"--cluster dgx-h100 -- {MEGATRON}", f"--id again -- {MEGATRON}"]
    batch = tmp_path / "commands.txt"
    batch.write_text("\n".join(variants + variants[::-1]) + "\n")
    rows, alone = _batch_rows_and_alone(batch, "dgx-a100", capsys)
    assert len(rows) == 12 and rows == alone
    assert len(set(rows[:6])) == 6  # the variants are priced differently (line numbers aside)
    launch_order = ["CUDA_DEVICE_MAX_CONNECTIONS=8 (environment)" in row for row in rows]
    assert launch_order == [i in (1, 10) for i in range(12)]  # the graph's warning, at its second use too


def test_a_profile_rewritten_within_one_timestamp_tick_is_read_again(_home: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A file system whose timestamps are a coarse tick (simulated: whole seconds) gives an in-place, same-size
    rewrite the stat signature of the file it replaced; an answer read from a file that recent is not kept."""
    user = _user_copy(_home, "user copy A")
    stat_signature = fitted._stat_signature
    coarse = lambda paths: tuple(s and s[:4] + (s[4] // 10**9 * 10**9, s[5] // 10**9 * 10**9)  # noqa: E731
                                 for s in stat_signature(paths))
    monkeypatch.setattr(fitted, "_stat_signature", coarse)
    meta = user / "profile.json"
    with fitted.batch_lookups():
        assert fitted.find_profile("a100-sxm4-80gb", "fp16").meta.provenance["samples"] == "user copy A"
        doc = json.loads(meta.read_text())
        doc["provenance"]["samples"] = "user copy B"
        doc["meta_sha256"] = meta_sha256(doc)
        with open(meta, "r+", encoding="utf-8") as f:  # in place, the same size, likely within the same second
            f.write(json.dumps(doc))
            f.truncate()
        assert fitted.find_profile("a100-sxm4-80gb", "fp16").meta.provenance["samples"] == "user copy B"
