"""A profile whose model files another LightGBM wrote (another text format, another objective): a clear error, never
trees walked as if they were the format this evaluator reads."""

import gzip
import hashlib
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from llmperf_hook.errors import ProfileError
from llmperf_hook.profile.fit import fit_regressor
from llmperf_hook.profile.profile_io import meta_sha256
from llmperf_hook.profile.tree_eval import parse_lightgbm_text
from llmperf_hook.resources import configs_dir

pytest.importorskip("lightgbm")

JOB = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "4", "--hidden-size", "1024",
       "--num-attention-heads", "16", "--seq-length", "1024", "--max-position-embeddings", "1024",
       "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16", "--vocab-size", "32000"]


def _text() -> str:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3))
    return fit_regressor(x, x[:, 0] + 0.1 * rng.normal(size=200)).text


@pytest.mark.parametrize(("edit", "says"), [
    (lambda t: t.replace("version=v4", "version=v5", 1), "version=v5"),
    (lambda t: re.sub(r"(?m)^version=.*\n", "", t, count=1), "version=None"),
    (lambda t: re.sub(r"(?m)^objective=.*$", "objective=poisson", t, count=1), "objective 'poisson'"),
    (lambda t: re.sub(r"(?m)^objective=.*$", "objective=regression sqrt", t, count=1), "'regression sqrt'"),
])
def test_unknown_format_or_link_is_refused(edit, says: str) -> None:
    text = _text()
    parse_lightgbm_text(text)  # the text LightGBM 4 writes reads
    with pytest.raises(ProfileError, match=re.escape(says)):
        parse_lightgbm_text(edit(text))


def test_predict_with_a_model_of_a_newer_lightgbm_exits_2(tmp_path: Path, monkeypatch, capsys) -> None:
    """A copy of the shipped A100 profile whose GEMM model says version=v5, with every digest made to match (as a
    newer llmperf with a newer LightGBM would write it): exit 2 naming the file, no number."""
    from llmperf_hook.cli import main

    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    copy = tmp_path / "profiles" / "a100-sxm4-80gb"
    shutil.copytree(configs_dir() / "profiles" / "a100-sxm4-80gb", copy)
    model = copy / "gemm.fwd.fp16.txt.gz"
    data = gzip.compress(gzip.decompress(model.read_bytes()).replace(b"version=v4", b"version=v5", 1))
    model.write_bytes(data)
    doc = json.loads((copy / "profile.json").read_text())
    next(m for m in doc["models"] if m["file"] == model.name)["sha256"] = hashlib.sha256(data).hexdigest()
    doc["library_versions"]["lightgbm"] = "5.0.0"
    doc["meta_sha256"] = meta_sha256(doc)
    (copy / "profile.json").write_text(json.dumps(doc))
    with pytest.raises(SystemExit) as exc:
        main(["predict", "--cluster", "dgx-a100", "--format", "json", "--", *JOB])
    out, err = capsys.readouterr()
    assert exc.value.code == 2 and out == "" and "Traceback" not in err
    assert str(copy) in err and model.name in err and "version=v5" in err and "Re-create" in err, err
