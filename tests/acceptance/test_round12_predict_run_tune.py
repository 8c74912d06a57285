"""Issues 3 and 7, round 12: what `predict`, `run --dry-run` and `tune --apply --dry-run` promise in docs/output.md
and docs/commands.md, checked on jobs of four kinds at once (an sbatch Mixtral with experts, a Hugging Face ZeRO-3
offload fine-tune with "auto" values, GPT-3 175B interleaved with recompute, Llama-3-70B-shaped with CP and full
recompute): the JSON's figures agree with each other as documented, the table has its documented lines, the batch
file's relative paths and error lines, the trace, a cluster file of only the required keys, and nothing the user
wrote is overwritten."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.acceptance.cli import GPT3_ON_8, error_lines, run_cli
from tests.acceptance.test_round12_launch_lines import HF_AUTO, LLAMA_HF, MIXTRAL_SBATCH

GPT3_VPP = ("torchrun --nnodes 16 --nproc-per-node 8 pretrain_gpt.py --num-layers 96 --hidden-size 12288 "
            "--num-attention-heads 96 --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 "
            "--global-batch-size 1536 --tensor-model-parallel-size 8 --pipeline-model-parallel-size 8 "
            "--num-layers-per-virtual-pipeline-stage 3 --sequence-parallel --use-distributed-optimizer "
            "--overlap-grad-reduce --overlap-param-gather --bf16 --vocab-size 50257 --recompute-activations").split()
LLAMA70_CP = ("torchrun --nnodes 8 --nproc-per-node 8 pretrain_gpt.py --num-layers 80 --hidden-size 8192 "
              "--ffn-hidden-size 28672 --num-attention-heads 64 --group-query-attention --num-query-groups 8 "
              "--seq-length 8192 --max-position-embeddings 8192 --swiglu --normalization RMSNorm "
              "--position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear "
              "--micro-batch-size 1 --global-batch-size 128 --tensor-model-parallel-size 8 "
              "--pipeline-model-parallel-size 4 --context-parallel-size 2 --sequence-parallel "
              "--use-distributed-optimizer --bf16 --vocab-size 128256 --recompute-granularity full "
              "--recompute-method uniform --recompute-num-layers 1").split()
HF_Z3 = ["deepspeed", "--num_gpus", "8", "run_clm.py", "--deepspeed", "ds.json", "--model_name_or_path", "llama",
         "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "4", "--bf16", "--do_train",
         "--output_dir", "out", "--block_size", "2048"]
JOBS = {"sbatch-mixtral": ["sbatch", "job.sh"], "hf-zero3-offload": HF_Z3, "gpt3-interleaved": GPT3_VPP,
        "llama70b-cp": LLAMA70_CP}
H100_BF16_DENSE_FLOP_PER_S = 989.4e12  # configs/hardware/h100-sxm5-80gb.yaml (NVIDIA H100 datasheet, SXM5 dense)


@pytest.fixture
def job_dir(tmp_path: Path, monkeypatch) -> Path:
    """The files the four jobs read, in the working directory as the user launches from it."""
    (tmp_path / "job.sh").write_text(MIXTRAL_SBATCH)
    (tmp_path / "ds.json").write_text(json.dumps(HF_AUTO))
    (tmp_path / "llama").mkdir()
    (tmp_path / "llama" / "config.json").write_text(json.dumps(LLAMA_HF))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))  # no calibration of the user's store moves a figure
    return tmp_path


@pytest.mark.parametrize("name", list(JOBS))
def test_json_figures_agree_as_documented(name: str, job_dir: Path, capsys) -> None:
    """docs/output.md: the breakdown sums to step_time_s, the memory components to the peak, headroom = capacity
    - peak, throughput = global batch x seq / step, MFU = model FLOPs / (step x GPUs x dense peak), fits is true for
    both 'fits' verdicts; the slowest stage's compute is at most the step (DESIGN.md's invariant)."""
    code, out, err = run_cli(["predict", "--format", "json", "--cluster", "dgx-h100", "--", *JOBS[name]], capsys)
    assert code == 0, err
    d = json.loads(out)
    cfg, mem, step_s = d["config"], d["memory"], d["step_time_s"]
    assert d["schema"] == 1 and d["command"] == JOBS[name]
    assert sum(d["breakdown"].values()) == pytest.approx(step_s, rel=1e-4)
    assert sum(mem["components"].values()) == pytest.approx(mem["peak_bytes_per_gpu"], rel=1e-6)
    assert mem["headroom_bytes"] == pytest.approx(mem["capacity_bytes"] - mem["peak_bytes_per_gpu"], abs=2)
    assert d["tokens_per_s"] == pytest.approx(cfg["global_batch_size"] * cfg["seq_length"] / step_s, rel=1e-3)
    mfu = d["model_flops_per_step"] / (step_s * cfg["world_size"] * H100_BF16_DENSE_FLOP_PER_S)
    assert d["mfu"] == pytest.approx(mfu, rel=2e-3)
    assert mem["fits"] == (mem["verdict"] in ("fits", "fits, tight"))
    assert len(d["stages"]) == cfg["pp"]
    assert max(s["compute_s"] for s in d["stages"]) <= step_s * (1 + 1e-6)
    assert d["predictor"] and all(isinstance(v, str) for v in d["predictor"].values())


def test_table_has_its_documented_lines(job_dir: Path, capsys) -> None:
    code, out, err = run_cli(["predict", "--cluster", "dgx-h100", "--", *GPT3_VPP], capsys)
    assert code == 0, err
    for line in ("step time", "throughput", "MFU", "memory per GPU", "where the step goes", "pipeline bubble",
                 "memory of the busiest rank", "cost models", "VPP"):
        assert line in out, (line, out)
    assert "TP8 PP8" in out and "DP2" in out  # 128 / (8 x 8)


def test_batch_relative_paths_resolve_against_the_files_folder(job_dir: Path, tmp_path_factory, capsys,
                                                               monkeypatch) -> None:
    """docs/commands.md: relative paths in a batch line resolve against the batch file's folder; `#` comments and
    blank lines are skipped; a line that fails (here an unterminated quote, and an unknown cluster) is an error
    object with its line number and the rest go on; the run exits 0."""
    batch = job_dir / "commands.txt"
    batch.write_text("# fine-tunes\n\n" + " ".join(HF_Z3) + "\n"
                     "torchrun --nproc-per-node 8 'unterminated\n"
                     "--id mix --cluster no-such-cluster -- sbatch job.sh\n"
                     "--id mix2 --cluster dgx-a100 -- sbatch job.sh\n")
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    code, out, err = run_cli(["predict", "--format", "json", "--cluster", "dgx-h100", "--batch", str(batch)], capsys)
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["line"] for r in rows] == [3, 4, 5, 6]
    assert "step_time_s" in rows[0] and rows[0]["config"]["zero_stage"] == 3
    assert set(rows[1]) == {"line", "id", "error"} and rows[1]["error"].startswith("line 4")
    assert rows[2]["id"] == "mix" and "no-such-cluster" in rows[2]["error"]
    assert rows[3]["id"] == "mix2" and rows[3]["cluster"]["name"] == "dgx-a100"


def test_trace_has_one_lane_per_stage_and_spares_a_users_file(job_dir: Path, capsys) -> None:
    """--trace FILE: Chrome trace events, process 0 holding one lane (thread) per pipeline stage with its passes
    and bubbles (report/trace.py); it replaces only an empty file or a trace llmperf wrote, never a user's file."""
    code, _, err = run_cli(["predict", "--cluster", "dgx-h100", "--trace", "step.json", "--", *LLAMA70_CP], capsys)
    assert code == 0, err
    events = json.loads((job_dir / "step.json").read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    stage_lanes = [e for e in events if e.get("ph") == "X" and e["pid"] == 0]
    assert {e["tid"] for e in stage_lanes} == {0, 1, 2, 3}  # PP 4
    assert any(e.get("cat") == "bubble" and e["dur"] > 0 for e in stage_lanes)
    mine = job_dir / "notes.json"
    mine.write_text('{"my": "notes"}')
    code, _, err = run_cli(["predict", "--cluster", "dgx-h100", "--trace", str(mine), "--", *LLAMA70_CP], capsys)
    assert code == 2 and "Traceback" not in err and str(mine.name) in err, err
    assert mine.read_text() == '{"my": "notes"}'


def _cluster(job_dir: Path, **over) -> Path:
    raw = {"name": "my-cluster", "gpu": "h100-sxm5-80gb", "gpus_per_node": 8, "intra_node_bandwidth_GBps": 450,
           "inter_node_bandwidth_GBps": 50, **over}
    path = job_dir / "cluster.yaml"
    path.write_text("".join(f"{k}: {v}\n" for k, v in raw.items() if v is not None))
    return path


def test_cluster_file_of_only_the_required_keys(job_dir: Path, capsys) -> None:
    """Issue 3 item 5: a held-out cluster file with name, gpu, gpus_per_node and the two bandwidths is enough; a
    slower network makes the multi-node job slower, never faster."""
    fast = run_cli(["predict", "--format", "json", "--cluster", str(_cluster(job_dir)), "--", *LLAMA70_CP], capsys)
    slow = run_cli(["predict", "--format", "json", "--cluster", str(_cluster(job_dir, inter_node_bandwidth_GBps=5)),
                    "--", *LLAMA70_CP], capsys)
    assert fast[0] == slow[0] == 0, (fast[2], slow[2])
    fast_d, slow_d = json.loads(fast[1]), json.loads(slow[1])
    assert fast_d["cluster"]["name"] == "my-cluster" and fast_d["cluster"]["gpus_per_node"] == 8
    assert slow_d["step_time_s"] > fast_d["step_time_s"]


@pytest.mark.parametrize("over,words", [({"gpus_per_node": None}, ["gpus_per_node"]),
                                        ({"gpu": "no-such-gpu"}, ["no-such-gpu"]),
                                        ({"inter_node_bandwidth_GBps": -5}, ["inter_node_bandwidth_GBps"])],
                         ids=["missing-key", "unknown-gpu", "negative-bandwidth"])
def test_bad_cluster_file_exits_2(over: dict, words: list[str], job_dir: Path, capsys) -> None:
    code, _, err = run_cli(["predict", "--cluster", str(_cluster(job_dir, **over)), "--", *LLAMA70_CP], capsys)
    assert code == 2 and "Traceback" not in err and len(error_lines(err)) == 1, err
    for word in words:
        assert word in err, err


def test_hardware_overrides_the_clusters_gpu(job_dir: Path, capsys) -> None:
    code, out, err = run_cli(["predict", "--format", "json", "--cluster", "dgx-h100", "--hardware", "a100-sxm4-80gb",
                              "--", *LLAMA70_CP], capsys)
    assert code == 0, err
    assert json.loads(out)["cluster"]["gpu"] == "a100-sxm4-80gb"


def test_run_dry_run_json_prints_the_exact_command(job_dir: Path, capsys) -> None:
    """docs/output.md: two JSON lines, the prediction then {dry_run, command, environment, ...}."""
    code, out, err = run_cli(["run", "--dry-run", "--format", "json", "--cluster", "dgx-h100", "--", *HF_Z3], capsys)
    assert code == 0, err
    first, second = (json.loads(line) for line in out.strip().splitlines())
    assert first["schema"] == 1 and second["dry_run"] is True and second["command"] == HF_Z3
    assert {"environment", "environment_inherited", "environment_added"} <= set(second)


def test_run_gates_exit_3_before_sbatch(job_dir: Path, capsys) -> None:
    code, _, err = run_cli(["run", "--dry-run", "--require-fit", "--cluster", "dgx-a100", "--", *GPT3_ON_8], capsys)
    assert code == 3 and "Traceback" not in err, err
    code, _, err = run_cli(["run", "--dry-run", "--max-step-time", "0.5", "--cluster", "dgx-h100", "--",
                            "sbatch", "job.sh"], capsys)
    assert code == 3 and "--max-step-time 0.5" in err, err


def test_tune_apply_dry_run_on_hf_trainer_keeps_every_user_file(job_dir: Path, capsys) -> None:
    """Issue 7: --apply writes a new ds_config next to the original, never over it, nor over a file already named
    like the one it would write; the command it prints is accepted by `explain`."""
    (job_dir / "ds.llmperf-tuned.json").write_text('{"mine": 1}')
    before = {p.name: p.read_bytes() for p in job_dir.iterdir() if p.is_file()}
    code, out, err = run_cli(["tune", "--apply", "--dry-run", "--format", "json", "--top", "2", "--cluster",
                              "dgx-h100", "--", *HF_Z3], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert all((job_dir / name).read_bytes() == text for name, text in before.items())
    applied = data["applied"]
    assert applied and applied["new_files"] and all(Path(f).name not in before for f in applied["new_files"])
    code, out, err = run_cli(["explain", "--format", "json", "--", *applied["argv"]], capsys)
    assert code == 0, err
    explained, best = json.loads(out), data["top"][0]
    assert (explained["micro_batch_size"], explained["zero_stage"]) == (best["micro_batch_size"], best["zero_stage"])
    assert explained["global_batch_size"] == 64  # tune holds the global batch fixed


def test_tune_nothing_fits_exits_3_naming_the_nearest_layout(capsys) -> None:
    code, out, err = run_cli(["tune", "--format", "json", "--cluster", "dgx-a100", "--", *GPT3_ON_8], capsys)
    assert code == 3, err
    data = json.loads(out)
    assert data["fits"] is False and data["exit_code"] == 3 and data["nearest"]["layout"]
    assert data["nearest"]["short_bytes"] > 0


@pytest.mark.parametrize("launch", [["torchrun", "--nproc-per-node", "16"],
                                    ["torchrun", "--nnodes", "2", "--nproc-per-node", "16"]],
                         ids=["one-node", "two-nodes"])
def test_more_processes_than_the_nodes_gpus_is_said(launch: list[str], job_dir: Path, capsys) -> None:
    """Megatron's initialize.py binds torch.cuda.set_device(args.local_rank): 16 processes on an 8-GPU node leave
    local ranks 8-15 without a GPU. The prediction places 8 ranks per node (graph/build.ranks_per_node) and says so,
    on one node as on several (one node said nothing before H166)."""
    argv = [*launch, *GPT3_VPP[GPT3_VPP.index("pretrain_gpt.py"):]]
    argv[argv.index("--global-batch-size") + 1] = "64"
    argv[argv.index("--pipeline-model-parallel-size") + 1] = "2"
    argv[argv.index("--num-layers-per-virtual-pipeline-stage") + 1] = "12"
    code, out, err = run_cli(["predict", "--format", "json", "--cluster", "dgx-h100", "--", *argv], capsys)
    assert code == 0, err
    said = [w for w in json.loads(out)["warnings"] if "processes per node" in w]
    assert len(said) == 1 and "dgx-h100 has 8 GPUs per node" in said[0] and "invalid device ordinal" in said[0], said


def test_a_full_node_says_nothing_about_placement(job_dir: Path, capsys) -> None:
    code, out, err = run_cli(["predict", "--format", "json", "--cluster", "dgx-h100", "--", *LLAMA70_CP], capsys)
    assert code == 0, err
    assert not [w for w in json.loads(out)["warnings"] if "processes per node" in w]
