"""`predict` of a job whose dtype the hardware's fitted profile was not sampled in: the warning names the dtypes the
profile serves and how to add this one; it said there was no fitted profile at all."""

import json

from llmperf_hook.cli import main

FP32_JOB = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "4", "--hidden-size", "1024",
            "--num-attention-heads", "16", "--seq-length", "1024", "--max-position-embeddings", "1024",
            "--micro-batch-size", "1", "--global-batch-size", "64", "--vocab-size", "32000"]


def test_profile_of_other_dtypes_is_named_in_the_roofline_warning(capsys) -> None:
    try:
        main(["predict", "--cluster", "dgx-a100", "--format", "json", "--", *FP32_JOB])
    except SystemExit as exc:
        assert not exc.code
    doc = json.loads(capsys.readouterr().out)
    assert doc["predictor"]["gemm"] == "roofline"  # the shipped A100 profile is fp16 (and serves bf16)
    said = [w for w in doc["warnings"] if "operator profile" in w]
    assert len(said) == 1 and "serves bf16, fp16, not fp32" in said[0], said
    assert "llmperf profile --dtype fp32 --name a100-sxm4-80gb" in said[0] and "no fitted" not in said[0]


def test_a_user_profile_of_other_dtypes_does_not_hide_the_shipped_one(tmp_path, monkeypatch) -> None:
    """The warning above suggests `llmperf profile --dtype fp32 --name a100-sxm4-80gb`; the profile it writes (user
    folder, read first) serves fp32 only, and bf16 / fp16 jobs must keep the shipped models, not fall to the roofline."""
    from dataclasses import replace

    from llmperf_hook.predict import fitted
    from llmperf_hook.profile.profile_io import read_model_text, read_profile_meta, write_profile

    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    user, shipped = fitted.profile_dirs("a100-sxm4-80gb")
    meta = read_profile_meta(shipped)
    gemm = [m for m in meta.models if m.op_class == "gemm" and m.dtype == "fp16"]
    as_fp32 = [replace(m, dtype="fp32", file=m.file.replace(".fp16.", ".fp32.")) for m in gemm]  # names follow dtypes
    write_profile(user, replace(meta, models=tuple(as_fp32), dtype_aliases={}, roofline={"fp32": meta.roofline["fp16"]}),
                  {m32.file: read_model_text(shipped, m) for m, m32 in zip(gemm, as_fp32)})

    assert fitted.find_profile("a100-sxm4-80gb", "fp32").meta.serves_dtypes == ("fp32",)
    for dtype in ("bf16", "fp16"):
        assert fitted.find_profile("a100-sxm4-80gb", dtype).meta.serves_dtypes == ("bf16", "fp16")
    assert fitted.served_dtypes("a100-sxm4-80gb") == ("fp32", "bf16", "fp16")
