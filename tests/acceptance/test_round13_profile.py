"""Issue 4, round 13: `llmperf profile` played as a user. One tiny real CPU profile (module fixture) is first stopped
by SIGINT mid-sampling and then resumed by the same command; it must lose and duplicate no sample, keep its --budget,
and be what `predict --hardware` uses per op class, extrapolation said. Copies of its $LLMPERF_HOME are then
corrupted every way a user could (truncated JSON, an edited LightGBM dump, a schema hash or fingerprint of other
hardware with the digest recomputed, a missing model, a profile folder that is a file, a pickle dropped in): each
exits 2 with one message, never a number. Where the profile writes must not be a user's file or a full disk (exit 2,
the file kept). The shipped A100 / GH200 profiles load with pickle blocked and price a 1,024-GPU job in well under a
second."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.acceptance.cli import error_lines, run_cli
from tests.profiling.budget_lines import assert_the_budget_was_kept

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
NAME = "r13-cpu"
OPS = "gemm,layernorm"
BUDGET_MIN = 0.35
SMALL = ["torchrun", "--nproc-per-node", "1", "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "128",
         "--num-attention-heads", "4", "--seq-length", "128", "--max-position-embeddings", "128",
         "--micro-batch-size", "2", "--global-batch-size", "2", "--vocab-size", "1000"]
LARGE = ["torchrun", "--nproc-per-node", "1", "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "4096",
         "--num-attention-heads", "32", "--seq-length", "4096", "--max-position-embeddings", "4096",
         "--micro-batch-size", "2", "--global-batch-size", "2", "--vocab-size", "1000"]
"""The same job far beyond the tiny profile's shapes (gemm k to 16,384 where it sampled to about 1,600)."""


@dataclass(frozen=True)
class Resumed:
    home: Path
    stopped: subprocess.CompletedProcess
    stored_at_stop: frozenset
    resumed: subprocess.CompletedProcess
    resumed_wall_s: float
    stored_at_end: list


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "LLMPERF_HOME": str(home), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def _rows(home: Path) -> list[tuple]:
    with sqlite3.connect(home / "store.sqlite") as conn:
        return conn.execute("SELECT op_class, phase, dims_key FROM op_samples WHERE hardware = ?", (NAME,)).fetchall()


def _profile_argv() -> list[str]:
    return [sys.executable, "-m", "llmperf_hook", "profile", "--device", "cpu", "--budget", str(BUDGET_MIN),
            "--dtype", "fp32", "--ops", OPS, "--name", NAME]


def _default_sigint() -> None:
    """Ctrl-C's default action in the child, as in a terminal: a test run started in the background by a
    non-interactive shell (`.ci/run &`, nohup) inherits SIGINT ignored (bash ignores it for asynchronous commands
    without job control), and Python then installs no KeyboardInterrupt handler, so the profile would run on."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stop_mid_sampling(home: Path) -> subprocess.CompletedProcess:
    """The profile, sent SIGINT (Ctrl-C) once its progress bar shows a few shapes measured."""
    proc = subprocess.Popen(_profile_argv(), env=_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=_default_sigint)
    seen = b""
    while proc.poll() is None and not re.search(rb"\] ([4-9]|\d\d+)/\d+", seen):
        seen += os.read(proc.stderr.fileno(), 4096) or b""
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out.decode(), (seen + err).decode())


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory) -> Resumed:
    home = tmp_path_factory.mktemp("r13") / "home"
    stopped = _stop_mid_sampling(home)
    at_stop = frozenset(_rows(home))
    start = time.perf_counter()
    again = subprocess.run(_profile_argv(), env=_env(home), capture_output=True, text=True, timeout=300)
    return Resumed(home, stopped, at_stop, again, time.perf_counter() - start, _rows(home))


@pytest.fixture
def home_copy(resumed: Resumed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    assert resumed.resumed.returncode == 0, resumed.resumed.stderr[-2000:]
    home = Path(shutil.copytree(resumed.home, tmp_path / "home"))
    monkeypatch.setenv("LLMPERF_HOME", str(home))
    return home


def test_sigint_keeps_the_samples_and_the_same_command_resumes(resumed: Resumed) -> None:
    assert resumed.stopped.returncode == 130, resumed.stopped.stderr[-2000:]
    assert "Traceback" not in resumed.stopped.stderr and "run the same command again" in resumed.stopped.stderr
    assert len(resumed.stored_at_stop) >= 4  # each shape is committed as it is measured
    out = resumed.resumed.stdout
    measured = re.search(r"measured (\d+) shapes \((\d+) reused from the store\)", out)
    assert measured, out
    new, reused = int(measured[1]), int(measured[2])
    end = resumed.stored_at_end
    assert len(end) == len(set(end)), "a shape stored twice"
    assert resumed.stored_at_stop <= set(end), "a shape measured before the stop was lost"
    assert reused == len(resumed.stored_at_stop) and len(end) == reused + new


STOPPED_AT_START = """
import os, signal, sys, time
from llmperf_hook.commands import profile as command


def start_reading(where):  # the seconds of torch's import and the first reading: SIGTERM arrives there
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)


command._reference_reading = start_reading
from llmperf_hook.cli import main
main(sys.argv[1:])
"""


def test_sigterm_during_the_start_reading_says_how_to_resume(tmp_path: Path) -> None:
    """The start reading (torch imported for it) ran before the SIGTERM handler: the process died by the signal
    with no word, where a SIGTERM a moment later said how to resume and exited 143."""
    done = subprocess.run([sys.executable, "-c", STOPPED_AT_START, "profile", "--device", "cpu", "--budget", "0.5",
                           "--ops", "gemm", "--name", "early"], env=_env(tmp_path), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 143 and "Traceback" not in done.stderr, (done.returncode, done.stderr[-2000:])
    assert "profile stopped by SIGTERM" in done.stderr and "run the same command again" in done.stderr


def test_the_resumed_run_keeps_its_budget(resumed: Resumed) -> None:
    assert f"budget {BUDGET_MIN * 60:.0f} s" in resumed.resumed.stderr
    # its own clock and phases, not the wall, which load stretches (tests/profiling/budget_lines.py)
    said = assert_the_budget_was_kept(resumed.resumed.stdout, resumed.resumed_wall_s)
    assert said.budget_s == BUDGET_MIN * 60, said


def test_predict_names_the_profile_per_op_class_and_says_extrapolation(resumed: Resumed, home_copy: Path,
                                                                         capsys) -> None:
    code, out, err = run_cli(["predict", "--format", "json", "--hardware", NAME, "--", *SMALL], capsys)
    assert code == 0, err
    used = json.loads(out)["predictor"]
    # both directions of both classes: past its deadline (21 s, spent by start-up under load) each still gets its
    # first fit (sampler.warm_up); the profile's own lines say what it left out
    assert used["gemm"] == used["layernorm"] == f"lightgbm:{NAME}", (used, resumed.resumed.stdout[-3000:])
    assert used["gelu"] == "roofline" and used["attention"] == "roofline", used  # not sampled: said per class
    code, out, err = run_cli(["predict", "--format", "json", "--hardware", NAME, "--", *LARGE], capsys)
    assert code == 0, err
    warnings = json.loads(out)["warnings"]
    # 'CLASS: dim ...', or 'CLASS (fwd): ...' per phase where the phases were sampled over different ranges (which
    # depends on the shapes the tiny budget reached: profile/predictor._extrapolation_lines)
    assert any(re.match(r"gemm( \([a-z/]+\))?: ", w) and "beyond the profiled range" in w for w in warnings), warnings
    assert any(re.match(r"layernorm( \([a-z/]+\))?: hidden", w) and "extrapolated" in w for w in warnings), warnings


def _profile(home: Path) -> Path:
    return home / "profiles" / NAME


def _rewrite(path: Path, edit) -> None:
    """profile.json edited and its meta_sha256 recomputed, as a careful forger would: only the check aimed at the
    edited field can refuse it."""
    from llmperf_hook.profile.profile_io import meta_sha256

    doc = json.loads(path.read_text())
    edit(doc)
    doc["meta_sha256"] = meta_sha256(doc)
    path.write_text(json.dumps(doc))


def _truncate_json(home: Path) -> None:
    meta = _profile(home) / "profile.json"
    meta.write_bytes(meta.read_bytes()[:1500])


def _edit_lightgbm_dump(home: Path) -> None:
    model = _profile(home) / "gemm.fwd.fp32.txt.gz"
    text = gzip.decompress(model.read_bytes()).decode()
    model.write_bytes(gzip.compress(re.sub(r"leaf_value=\S+", "leaf_value=0.5", text, count=1).encode()))


def _schema_hash(home: Path) -> None:
    _rewrite(_profile(home) / "profile.json", lambda doc: doc["models"][0].update(schema_hash="0123456789abcdef"))


def _cpu_profile_as_the_a100(home: Path) -> None:
    """This CPU's profile moved into the shipped A100 preset's name (folder and name both)."""
    target = home / "profiles" / "a100-sxm4-80gb"
    _profile(home).rename(target)
    _rewrite(target / "profile.json", lambda doc: doc.update(name="a100-sxm4-80gb"))


def _other_machines_profile(home: Path) -> None:
    """Another machine's profile copied in over this name (its folder's profile.json names it)."""
    _rewrite(_profile(home) / "profile.json", lambda doc: doc.update(name="their-cpu"))


def _folder_is_a_file(home: Path) -> None:
    shutil.rmtree(_profile(home))
    _profile(home).write_text("my notes\n")


def _profiles_is_a_file(home: Path) -> None:
    shutil.rmtree(home / "profiles")
    (home / "profiles").write_text("my notes\n")


def _pickle_dropped_in(home: Path) -> None:
    import pickle

    (_profile(home) / "fast_model.bin").write_bytes(pickle.dumps({"gemm": [1.0, 2.0]}))


CORRUPTIONS = {
    "truncated-json": (_truncate_json, "not valid JSON", NAME),
    "edited-lightgbm-dump": (_edit_lightgbm_dump, "does not match its sha256", NAME),
    "schema-hash": (_schema_hash, "feature schema 0123456789abcdef", NAME),
    "cpu-fingerprint-as-a100": (_cpu_profile_as_the_a100, "measured on", "a100-sxm4-80gb"),
    "another-machines-profile": (_other_machines_profile, "fitted as 'their-cpu'", NAME),
    "missing-model": (lambda home: (_profile(home) / "layernorm.bwd.fp32.txt.gz").unlink(), "cannot be read", NAME),
    "folder-is-a-file": (_folder_is_a_file, "is a file, not a folder", NAME),
    "profiles-is-a-file": (_profiles_is_a_file, "is a file, not a folder", NAME),
    "pickle-dropped-in": (_pickle_dropped_in, "a Python pickle", NAME),
}


@pytest.mark.parametrize("damage", sorted(CORRUPTIONS))
def test_a_corrupted_profile_exits_2_and_predicts_nothing(damage: str, home_copy: Path, capsys) -> None:
    corrupt, says, hardware = CORRUPTIONS[damage]
    corrupt(home_copy)
    code, out, err = run_cli(["predict", "--format", "json", "--hardware", hardware, "--", *SMALL], capsys)
    assert code == 2 and out == "" and "Traceback" not in err, (code, out[:300], err)
    lines = error_lines(err)
    assert len(lines) == 1 and says in lines[0], err


@pytest.mark.parametrize("file", ["comm/perlmutter", "comm"])
def test_a_comm_model_folder_that_is_a_file_exits_2(file: str, tmp_path: Path, capsys, monkeypatch) -> None:
    """$LLMPERF_HOME/profiles/comm/CLUSTER (or comm/) a file: the cluster was priced by plain alpha-beta without a
    word, where the user's fitted comm model (it comes before the shipped one) was meant."""
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    (tmp_path / "profiles" / file).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "profiles" / file).write_text("my notes\n")
    job = [*SMALL[:2], "4", *SMALL[3:-3], "8", "--vocab-size", "1000"]  # 4 ranks: a data-parallel all-reduce
    code, out, err = run_cli(["predict", "--cluster", "perlmutter", "--", *job], capsys)
    assert code == 2 and out == "" and "Traceback" not in err, err
    lines = error_lines(err)
    assert len(lines) == 1 and "communication model" in lines[0] and "is a file, not a folder" in lines[0], err


def test_profile_never_replaces_a_users_file_where_it_writes(tmp_path: Path, capsys, monkeypatch) -> None:
    """profiles/NAME a file: the fit replaced it with the profile folder; profiles/ a file: 'internal error:
    NotADirectoryError' after the whole budget. Both exit 2 now, before sampling, the file kept."""
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "mine").write_text("my notes\n")
    code, _, err = run_cli(["profile", "--device", "cpu", "--budget", "0.2", "--ops", "gemm", "--name", "mine"],
                           capsys)
    assert code == 2 and "is a file, not a profile folder" in err and "Traceback" not in err, err
    assert (tmp_path / "profiles" / "mine").read_text() == "my notes\n"
    shutil.rmtree(tmp_path / "profiles")
    (tmp_path / "profiles").write_text("my notes\n")
    code, _, err = run_cli(["profile", "--device", "cpu", "--budget", "0.2", "--ops", "gemm", "--name", "x"], capsys)
    assert code == 2 and "is a file, not a folder" in err and "Traceback" not in err, err
    assert (tmp_path / "profiles").read_text() == "my notes\n" and not (tmp_path / "store.sqlite").exists()


@pytest.fixture
def small_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """$LLMPERF_HOME on a 200 KiB tmpfs (skipped where one cannot be mounted: it needs root)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(disk)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    monkeypatch.setenv("LLMPERF_HOME", str(disk))
    yield disk
    if subprocess.run(["umount", str(disk)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)  # never leave it mounted in /tmp
        pytest.fail(f"{disk} was still in use after the test: a file on it left open")


def test_a_disk_that_fills_while_sampling_exits_2_saying_so(small_disk: Path, capsys) -> None:
    """SQLite's 'database or disk is full' as a sample is committed was 'internal error: OperationalError'."""
    code, _, err = run_cli(["profile", "--device", "cpu", "--budget", "0.5", "--ops", "gemm", "--name", "full"],
                           capsys)
    assert code == 2 and "Traceback" not in err, err[-2000:]
    assert "no space left on the disk of" in err and "run the same command again" in err, err[-2000:]


def test_a_store_on_a_full_disk_is_not_called_damaged(small_disk: Path, capsys) -> None:
    """Opening the store on a full disk fails 'disk I/O error', which said to move the store away (its samples
    lost) as if it were damaged."""
    from llmperf_hook.store import open_store

    with open_store() as store:
        store.check_integrity()
    free = shutil.disk_usage(small_disk).free
    (small_disk / "filler").write_bytes(b"\0" * free)
    before = (small_disk / "store.sqlite").read_bytes()
    code, _, err = run_cli(["profile", "--device", "cpu", "--budget", "0.5", "--ops", "gemm", "--name", "full"],
                           capsys)
    assert code == 2 and "Traceback" not in err, err[-2000:]
    assert "the disk holding it is full" in err and "move the file away" not in err, err
    assert (small_disk / "store.sqlite").read_bytes() == before


def test_deepspeed_for_plan_states_its_job_shapes_and_cost(tmp_path: Path, capsys, monkeypatch) -> None:
    """`--for -- deepspeed ...`: the plan line samples the job's precision (bf16, from its ds_config), counts the
    job's shapes and states their cost in device-minutes. Stopped as Ctrl-C would once the plan is printed."""
    from llmperf_hook.profile import sampler

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sampler, "_measure_all", ctrl_c)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps":
                                                  1, "bf16": {"enabled": True}, "zero_optimization": {"stage": 1}}))
    code, _, err = run_cli(["profile", "--device", "cpu", "--budget", "0.3", "--name", "ds-cpu", "--for", "--",
                            "deepspeed", "--num_gpus", "2", "pretrain_gpt.py", "--num-layers", "2", "--hidden-size",
                            "256", "--num-attention-heads", "4", "--seq-length", "256", "--max-position-embeddings",
                            "256", "--micro-batch-size", "2", "--global-batch-size", "4", "--vocab-size", "1000",
                            "--deepspeed", "--deepspeed_config", "ds.json"], capsys)
    assert code == 130 and "sampling in bf16, the job's precision" in err, err[-2000:]
    plan = re.search(r"plan: (\d+) shapes \((\d+) from the job and its neighbours\).*?about ([\d.]+) device-minutes",
                     err)
    assert plan and int(plan[2]) > 0 and float(plan[3]) > 0, err[-2000:]


def test_ops_the_for_job_never_runs_are_said(tmp_path: Path, capsys, monkeypatch) -> None:
    """`--ops gelu --for` a SwiGLU job: every job shape was dropped by the --ops filter, and the plan said only
    '0 from the job and its neighbours'."""
    from llmperf_hook.profile import sampler

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sampler, "_measure_all", ctrl_c)
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    job = [*SMALL, "--swiglu", "--normalization", "RMSNorm", "--position-embedding-type", "rope"]
    code, _, err = run_cli(["profile", "--device", "cpu", "--budget", "0.3", "--name", "swiglu-cpu", "--ops", "gelu",
                            "--for", "--", *job], capsys)
    assert code == 130, err[-2000:]
    assert "the --for job runs none of --ops gelu" in err and "swiglu" in err, err[-2000:]


PROBE = """
import json, sys, time
import pickle, _pickle  # numpy imports pickle; what must never run is a load


def refuse(*args, **kwargs):
    raise RuntimeError("a pickle was loaded")


for module in (pickle, _pickle):
    module.load = module.loads = module.Unpickler = refuse
from llmperf_hook.api import load_cluster, predict_config
from llmperf_hook.graph.sample_configs import gpt3_175b
from llmperf_hook.predict.fitted import find_profile
out = {}
for hardware, cluster in (("a100-sxm4-80gb", "dgx-a100"), ("gh200-96gb", "vista")):
    t0 = time.process_time()
    profile = find_profile(hardware, "fp16")
    loaded = time.process_time() - t0
    cfg = gpt3_175b(tp=8, pp=16, dp=8, global_batch_size=1536, sequence_parallel=True, recompute="selective",
                    optimizer_kw=dict(distributed_optimizer=True))  # benchmarks/bench_predict_speed.py's job
    clus = load_cluster(cluster)
    t0 = time.process_time()
    step = predict_config(cfg, clus)
    out[hardware] = {"loaded": profile is not None, "load_s": loaded, "predict_s": time.process_time() - t0,
                     "gpus": cfg.world_size, "step_s": step.step_time_s, "gemm": step.predictor.get("gemm")}
out["heavy"] = sorted(m for m in ("torch", "deepspeed") if m in sys.modules)
print(json.dumps(out))
"""


def test_shipped_profiles_load_without_pickle_and_price_1024_gpus_fast(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], env=_env(tmp_path), capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result.pop("heavy") == []
    for hardware, r in result.items():
        assert r["loaded"] and r["gpus"] == 1024 and r["step_s"] > 0, (hardware, r)
        assert r["gemm"] == f"lightgbm:{hardware}", (hardware, r)
        assert r["load_s"] + r["predict_s"] < 0.5, (hardware, r)  # CPU seconds: load stretches wall time only
