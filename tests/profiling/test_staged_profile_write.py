"""write_profile swaps the new profile in as a whole (profile/staged_folder.py): a refit stopped while it writes its
models (Ctrl-C, SIGTERM) leaves the old profile usable, and the files other stages add to the folder are kept."""

import errno
import functools
from pathlib import Path

import numpy as np
import pytest

from llmperf_hook.graph.op import Op
from llmperf_hook.profile import profile_io, staged_folder
from llmperf_hook.profile.build_profile import Samples, fit_samples
from llmperf_hook.profile.features import RooflineConstants
from llmperf_hook.profile.predictor import FittedProfile
from llmperf_hook.profile.profile_io import ProfileMeta, write_profile

RC = RooflineConstants(1e11, 1e10, 1, 4)
OP = Op("g", "gemm", "fwd", {"m": 256, "n": 256, "k": 256}, dtype="fp32")


def _fit(flop_per_s: float) -> tuple[ProfileMeta, dict[str, str]]:
    """gemm fwd and bwd fitted to a machine of `flop_per_s` (two models, so a stop can fall between them)."""
    meta, texts = _fitted(flop_per_s)
    return meta, dict(texts)


@functools.lru_cache(maxsize=None)
def _fitted(flop_per_s: float) -> tuple[ProfileMeta, dict[str, str]]:
    """_fit's LightGBM fits, once per machine speed in this process: the same seeded samples fit the same models,
    and these tests are about writing them (two speeds for 21 calls; one fit took 3.7 s at load 7)."""
    rng = np.random.default_rng(0)
    m, n, k = (rng.integers(16, 512, 80).astype(float) for _ in range(3))
    fitted = [fit_samples(Samples("gemm", phase, {"m": m, "n": n, "k": k}, 2 * m * n * k * f / flop_per_s + 2e-6),
                          RC, "fp32", with_holdout=False) for phase, f in (("fwd", 1), ("bwd", 2))]
    meta = ProfileMeta("cpu-x", {"fp32": RC}, {}, {"device": "test"}, {}, {"samples": "synthetic"},
                       tuple(e for e, _ in fitted))
    return meta, {e.file: text for e, text in fitted}


def _predict_s(directory: Path) -> float:
    return float(FittedProfile(directory).predict_s([OP], None)[0])


def test_a_refit_stopped_while_writing_leaves_the_old_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Written in place, the new gemm fwd files sat beside the old profile.json: every later predict refused the
    profile ('does not match its sha256') until it was fitted again."""
    directory = write_profile(tmp_path / "profiles" / "cpu-x", *_fit(5e10))
    before = _predict_s(directory)
    real_pack, calls = profile_io.pack_trees, []

    def pack_then_stop(*args):
        calls.append(1)
        if len(calls) == 2:  # the first model's files are written, the second's are not
            raise KeyboardInterrupt
        return real_pack(*args)

    monkeypatch.setattr(profile_io, "pack_trees", pack_then_stop)
    with pytest.raises(KeyboardInterrupt):
        write_profile(directory, *_fit(1e10))
    monkeypatch.setattr(profile_io, "pack_trees", real_pack)
    assert _predict_s(directory) == before
    assert sorted(p.name for p in (tmp_path / "profiles").iterdir()) == ["cpu-x"]  # the stage removed, .staging too
    write_profile(directory, *_fit(1e10))
    assert _predict_s(directory) == pytest.approx(5 * before, rel=0.3)  # the refit took, 5x slower machine


def test_other_files_are_kept_and_stale_models_are_not(tmp_path: Path) -> None:
    directory = write_profile(tmp_path / "cpu-x", *_fit(5e10))
    (directory / "reference_speed.json").write_text("{}\n")
    (directory / "gelu.fwd.fp32.txt.gz").write_bytes(b"a model of an earlier fit")
    write_profile(directory, *_fit(1e10))
    names = sorted(p.name for p in directory.iterdir())
    assert "reference_speed.json" in names and "gelu.fwd.fp32.txt.gz" not in names
    assert names == sorted(["profile.json", "reference_speed.json", "gemm.fwd.fp32.txt.gz", "gemm.fwd.fp32.trees.gz",
                            "gemm.bwd.fp32.txt.gz", "gemm.bwd.fp32.trees.gz"])
    assert not (tmp_path / ".staging").exists()  # removed once empty


def test_a_swap_that_fails_puts_the_old_profile_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The old profile is moved aside before the new one is renamed in; a rename that fails for want of disk space
    (not another writer) used to delete the one moved aside, and the profile was gone."""
    directory = write_profile(tmp_path / "profiles" / "cpu-x", *_fit(5e10))
    before = _predict_s(directory)
    real_rename = staged_folder.os.rename

    def rename(src, dst):
        if Path(dst) == directory and not str(src).endswith(".old"):  # the new profile's rename, not the put-back
            raise OSError(errno.ENOSPC, "No space left on device")
        real_rename(src, dst)

    monkeypatch.setattr(staged_folder.os, "rename", rename)
    with pytest.raises(OSError, match="No space left"):
        write_profile(directory, *_fit(1e10))
    assert _predict_s(directory) == before

    def rename_denied(src, dst):  # the old profile cannot be moved aside: said at once, not after 20 retries
        if Path(src) == directory:
            raise PermissionError(errno.EACCES, "Permission denied")
        real_rename(src, dst)

    monkeypatch.setattr(staged_folder.os, "rename", rename_denied)
    with pytest.raises(PermissionError):
        write_profile(directory, *_fit(1e10))
    monkeypatch.setattr(staged_folder.os, "rename", real_rename)
    assert _predict_s(directory) == before
    assert sorted(p.name for p in (tmp_path / "profiles").iterdir()) == ["cpu-x"]


def test_a_writer_whose_staging_folder_another_removes_retries(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Another writer removes .staging/ once empty; between this writer's mkdir of .staging/ and of its stage in it,
    that failed the write (FileNotFoundError: seen with three concurrent writers of one profile)."""
    staging, real_mkdir, removed = tmp_path / staged_folder.STAGING, staged_folder.os.mkdir, []

    def mkdir(path, *args, **kwargs):
        if Path(path).parent == staging and staging.is_dir() and not removed:
            staging.rmdir()  # the other writer's _remove_if_empty, just then
            removed.append(1)
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(staged_folder.os, "mkdir", mkdir)
    directory = write_profile(tmp_path / "cpu-x", *_fit(5e10))
    assert removed and (directory / "profile.json").is_file()


def _rewrite(directory: str, tag: str, times: int) -> None:
    for i in range(times):
        def write(stage: Path, value: str = f"{tag}-{i}") -> None:
            (stage / "a").write_text(value)
            (stage / "b").write_text(value)
        staged_folder.replace_folder(Path(directory), write, keep=lambda name: False)


def test_concurrent_writers_of_one_folder_all_finish_and_leave_it_whole(tmp_path: Path) -> None:
    """Three processes swapping the same folder in: each meets the others' renames (a folder moved aside, another
    one put in its place, .staging/ removed) and retries; none fails, the folder is one writer's whole."""
    import multiprocessing

    procs = [multiprocessing.get_context("spawn").Process(target=_rewrite, args=(str(tmp_path / "p"), tag, 150))
             for tag in "xyz"]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
    assert [proc.exitcode for proc in procs] == [0, 0, 0]
    assert (tmp_path / "p" / "a").read_text() == (tmp_path / "p" / "b").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]
