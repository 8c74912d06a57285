"""Which GELU a job runs (frameworks/script_gelu.py), the graph's tag for it, the profile class that samples each
variant (op_sampler gelu = tanh, gelu_exact = erf) and how predict picks between them (dispatch.gelu_variant)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from llmperf_hook.api import resolve_job
from llmperf_hook.frameworks.script_gelu import script_gelu
from llmperf_hook.graph.layer_ops import GELU_TAG
from llmperf_hook.graph.op import Op
from llmperf_hook.predict.dispatch import gelu_variant

REPO = Path(__file__).resolve().parents[2]
TESTBED = REPO / "examples" / "cpu-testbed" / "train_gpt.py"
SHAPE = ["--num-layers", "2", "--hidden-size", "128", "--num-attention-heads", "4", "--seq-length", "128",
         "--max-position-embeddings", "128", "--micro-batch-size", "2", "--vocab-size", "1024"]


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "train.py"
    path.write_text("import torch\nimport torch.nn.functional as F\nfrom torch import nn\n" + body)
    return str(path)


@pytest.mark.parametrize("body, variant", [
    ("y = F.gelu(x)\n", "none"),
    ("y = F.gelu(x, approximate='tanh')\n", "tanh"),
    ("y = torch.nn.functional.gelu(x, 'tanh')\n", "tanh"),
    ("act = nn.GELU(approximate='none')\n", "none"),
    ("act = nn.GELU('tanh')\nz = F.gelu(x, approximate='tanh')\n", "tanh"),
])
def test_a_scripts_own_gelu_is_read_from_its_code(tmp_path: Path, body: str, variant: str) -> None:
    found = script_gelu(_script(tmp_path, body))
    assert isinstance(found, tuple) and found[0] == variant


@pytest.mark.parametrize("body, why", [
    ("y = F.gelu(x)\nz = F.gelu(x, approximate='tanh')\n", "both variants"),
    ("mode = 'tanh'\ny = F.gelu(x, approximate=mode)\n", "not a literal"),
    ("y = F.relu(x)\n", "no F.gelu"),
])
def test_an_undecided_script_says_why(tmp_path: Path, body: str, why: str) -> None:
    found = script_gelu(_script(tmp_path, body))
    assert isinstance(found, str) and why in found


def test_the_cpu_testbed_runs_exact_gelu_and_its_graph_says_so() -> None:
    from llmperf_hook.api import build_graph
    from llmperf_hook.hardware.load import load_cluster

    _, cfg = resolve_job(["python", str(TESTBED), *SHAPE], {})
    assert cfg.gelu_approximate == "none"
    assert "train_gpt.py: GELU at line" in cfg.sources["gelu_approximate"].detail
    gelus = [op for op in build_graph(cfg, load_cluster("dgx-h100")).all_ops() if op.op_class == "gelu"]
    assert gelus and all(op.tags[GELU_TAG] == "none" for op in gelus)


@pytest.mark.parametrize("flags, variant", [
    ([], "tanh"),  # bias_gelu_impl: megatron/core/fusions/fused_bias_gelu.py
    (["--disable-bias-linear"], "none"),  # validate_args: no bias, no fusion -> F.gelu
    (["--no-bias-gelu-fusion"], "none"),  # mlp.py: self.activation_func = F.gelu
    (["--openai-gelu"], "tanh"), (["--onnx-safe", "True"], "tanh"),  # megatron-core reads neither (legacy only)
    # TE's GELU (TEActivationOp; transformer_engine common/util/math.h gelu is the tanh formula); the config asserts
    # it and bias_activation_fusion are not both on (transformer_config.py __post_init__)
    (["--use-te-activation-func", "--no-bias-gelu-fusion"], "tanh"),
])
def test_megatrons_gelu_follows_its_fusion(flags: list[str], variant: str) -> None:
    _, cfg = resolve_job(["python", "pretrain_gpt.py", *SHAPE, *flags], {})
    assert cfg.gelu_approximate == variant


@pytest.mark.parametrize("flags, variant", [
    ([], "tanh"),
    (["--openai-gelu"], "tanh"),  # ParallelMLP: openai_gelu (megatron/model/utils.py gelu_impl: the tanh formula)
    (["--onnx-safe", "True"], "none"),  # ParallelMLP: erf_gelu
    (["--onnx-safe", "False"], "none"),  # argparse type=bool: bool("False") is True
    (["--openai-gelu", "--onnx-safe", "1"], "tanh"),  # openai_gelu is tested first
    (["--no-bias-gelu-fusion"], "none"),
])
def test_megatron_deepspeeds_legacy_mlp_reads_its_gelu_flags(tmp_path: Path, flags: list[str], variant: str) -> None:
    ds = tmp_path / "ds.json"
    ds.write_text('{"train_micro_batch_size_per_gpu": 2}')
    _, cfg = resolve_job(["deepspeed", "--num_gpus", "1", "pretrain_gpt.py", "--deepspeed", "--deepspeed_config",
                          str(ds), *SHAPE, "--global-batch-size", "2", *flags], {})
    assert cfg.framework == "megatron-deepspeed" and cfg.gelu_approximate == variant


def _profile(*classes: str):
    return SimpleNamespace(supports=lambda op_class, phase, dtype: op_class in classes)


def _gelu(variant: str) -> Op:
    return Op("mlp.gelu", "gelu", "fwd", {"elements": 4096}, dtype="fp32", tags={GELU_TAG: variant})


def test_each_variant_is_priced_by_its_own_samples() -> None:
    both = _profile("gelu", "gelu_exact")
    assert gelu_variant(_gelu("none"), both) == (gelu_variant(_gelu("none"), both)[0], "")
    assert gelu_variant(_gelu("none"), both)[0].op_class == "gelu_exact"
    assert gelu_variant(_gelu("tanh"), both)[0].op_class == "gelu"


@pytest.mark.parametrize("variant, has, priced_as, says", [
    ("none", "gelu", "gelu", "exact GELU priced by the profile's gelu samples"),  # a profile from before gelu_exact
    ("tanh", "gelu_exact", "gelu_exact", "tanh GELU priced by the profile's gelu_exact samples"),
])
def test_a_profile_without_the_jobs_variant_uses_the_other_and_says_so(variant: str, has: str, priced_as: str,
                                                                        says: str) -> None:
    op, note = gelu_variant(_gelu(variant), _profile(has))
    assert op.op_class == priced_as and says in note and "--ops" in note


def test_the_profile_label_names_the_fallback_per_class() -> None:
    from llmperf_hook.hardware.load import load_cluster
    from llmperf_hook.predict.dispatch import predict_ops

    profile = SimpleNamespace(name="lightgbm:cpu", supports=lambda c, p, d: c == "gelu",
                              predict_s=lambda ops, cluster: [1e-3] * len(ops))
    seconds, used = predict_ops([_gelu("none")], load_cluster("dgx-h100"), profile, None)
    assert list(seconds.values()) == [1e-3]
    assert used["gelu"].startswith("lightgbm:cpu (exact GELU priced by the profile's gelu samples: "
                                   "it has no gelu_exact")


def test_job_specs_sample_the_exact_gelu_the_job_runs() -> None:
    from llmperf_hook.hardware.load import load_cluster
    from llmperf_hook.profile.plan import job_specs

    specs = job_specs(["python", str(TESTBED), *SHAPE], {}, load_cluster("dgx-h100"))
    classes = {s.op_class for s in specs}
    assert "gelu_exact" in classes and "gelu" not in classes


def test_the_reference_model_of_the_cpu_framework_cost_runs_exact_gelu() -> None:
    from llmperf_hook.profile.cpu_framework import _reference_config

    assert _reference_config((1, 64, 128, 1), "fp32").gelu_approximate == "none"  # _gpt's F.gelu


def test_the_sampler_times_each_variant() -> None:
    torch = pytest.importorskip("torch")
    from llmperf_hook.profile.op_sampler import make_runner

    outputs = {}
    for op_class in ("gelu", "gelu_exact"):
        torch.manual_seed(0)
        outputs[op_class] = make_runner(op_class, {"elements": 4096}, False, "fp32", "cpu")()
    torch.manual_seed(0)
    x = torch.randn(4096)
    assert torch.equal(outputs["gelu_exact"], torch.nn.functional.gelu(x))
    assert torch.equal(outputs["gelu"], torch.nn.functional.gelu(x, approximate="tanh"))
    assert make_runner("gelu_exact", {"elements": 4096}, True, "fp32", "cpu")()[0].shape == (4096,)


@pytest.mark.parametrize("flags, listed", [([], None), (["--disable-bias-linear"], "none"), (["--swiglu"], None)])
def test_the_launch_config_says_when_megatrons_gelu_is_exact(flags: list[str], listed: str | None) -> None:
    """refine files a run's aten::gelu samples by the prediction's gelu_approximate (absent: tanh), so an exact GELU
    is listed for Megatron's own MLP too, not only for a user's script."""
    from llmperf_hook.frameworks.explain_data import explain_json

    _, cfg = resolve_job(["python", "pretrain_gpt.py", *SHAPE, *flags], {})
    assert explain_json(cfg).get("gelu_approximate") == listed


def test_the_framework_cost_times_an_exact_gelu_op_as_the_exact_gelu(monkeypatch: pytest.MonkeyPatch) -> None:
    """cpu_framework._isolated_s times the reference model's ops alone; its exact GELU must be timed as gelu_exact,
    or the framework cost's compute_scale is fitted against the tanh GELU's time while jobs are priced exact."""
    from llmperf_hook.profile import cpu_framework, op_sampler

    timed: list[str] = []
    monkeypatch.setattr(op_sampler, "sample_op", lambda op_class, *a, **k: timed.append(op_class)
                        or SimpleNamespace(time_s=1e-3))
    for variant in ("none", "tanh"):
        cpu_framework._isolated_s(_gelu(variant), "fp32")
    assert timed == ["gelu_exact", "gelu"]


@pytest.mark.parametrize("flags, fused", [
    ([], True), (["--openai-gelu"], False), (["--onnx-safe", "1"], False), (["--squared-relu"], False),
])
def test_megatron_deepspeed_fuses_bias_and_gelu_only_for_its_default_gelu(tmp_path: Path, flags: list[str],
                                                                          fused: bool) -> None:
    """ParallelMLP (Megatron-DeepSpeed megatron/model/transformer.py) sets bias_gelu_fusion = args.bias_gelu_fusion
    only in its F.gelu branch; --openai-gelu, --onnx-safe, --swiglu and --squared-relu leave it False, so the bias is
    added before the activation (`intermediate_parallel + bias_parallel`)."""
    ds = tmp_path / "ds.json"
    ds.write_text('{"train_micro_batch_size_per_gpu": 2}')
    _, cfg = resolve_job(["deepspeed", "--num_gpus", "1", "pretrain_gpt.py", "--deepspeed", "--deepspeed_config",
                          str(ds), *SHAPE, "--global-batch-size", "2", *flags], {})
    assert cfg.bias_activation_fusion is fused
