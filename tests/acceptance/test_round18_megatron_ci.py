"""Acceptance round 18 (H214): Megatron-LM's own functional-test configurations (core_v0.16.1's
tests/functional_tests/test_cases/**/model_config.yaml, excerpts in megatron_ci/ with their source cited) as CI
launches them, through `llmperf explain`. The converter is benchmarks/megatron_ci_configs.py, which also surveys
the whole set (docs in its docstring; the verdict of every case is in the session notes)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from tests.acceptance.cli import run_cli

HERE = Path(__file__).parent / "megatron_ci"


def _converter():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "megatron_ci_configs.py"
    spec = importlib.util.spec_from_file_location("megatron_ci_configs", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules.setdefault(spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


CI = _converter()


def _launch(fixture: str, *extra: str) -> list[str]:
    case = CI.parse_ci_config((HERE / fixture).read_text())
    return CI.torchrun_argv(case) + list(extra)


def _explain(launch: list[str], capsys) -> tuple[int, dict | None, str]:
    code, out, err = run_cli(["explain", "--format", "json", "--", *launch], capsys)
    return code, (json.loads(out) if code == 0 else None), err


def test_converter_follows_run_training_sh() -> None:
    """_run_training.sh (core_v0.16.1): `true` -> bare flag; `[a b c]` -> its words; a value with spaces -> one word;
    `(...)` -> one word; yq explode's merges; xargs then eval take two levels of backslashes; ${VAR} from the
    recipe's ARGUMENTS; MODEL_ENV_VARS.MODEL_ARGS.GPUS_PER_NODE sizes the launch."""
    case = CI.parse_ci_config((HERE / "shell_rules_excerpt.yaml").read_text())
    args = list(case.script_args)
    assert args[:4] == ["--num-layers", "12", "--seq-length", "1024"]  # merged entries first, own ones win later
    assert args[args.index("--seq-length", 3) + 1] == "2048"
    assert args[args.index("--rampup-batch-size") + 1:][:3] == ["384", "384", "97656250"]
    assert args[args.index("--pipeline-model-parallel-layout") + 1] == "Et*2|(tt|)*5t|tmL"
    assert args[args.index("--moe-layer-freq") + 1] == "([0]*1+[1]*15)"
    assert args[args.index("--hierarchical-context-parallel-sizes") + 1] == "2 2"  # one word: argparse refuses it
    assert args[args.index("--save") + 1] == "/tmp/ci-output/checkpoints"
    assert args[-1] == "--sequence-parallel"
    assert CI.torchrun_argv(case)[:5] == ["torchrun", "--nproc_per_node", "1", "--nnodes", "1"]
    assert dict(case.env) == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}


def test_gated_delta_net_and_output_gate_are_warned(capsys) -> None:
    """gpt3_mcore_te_tp2_pp1_gdn: --experimental-attention-variant gated_delta_net (2 of every 3 layers linear
    attention at --linear-attention-freq 3) and --attention-output-gate were priced as plain softmax attention in
    silence (DESIGN: an accepted setting that is not modelled gives one warning)."""
    code, got, err = _explain(_launch("gdn_excerpt.yaml"), capsys)
    assert code == 0, err
    warned = "\n".join(got["warnings"])
    assert "--experimental-attention-variant gated_delta_net: gated delta net" in warned
    assert "--attention-output-gate: the attention output gate not modelled" in warned
    assert all("under-estimated" in w for w in got["warnings"] if w.startswith("--attention-output-gate"))


def test_distillation_teacher_is_warned(capsys) -> None:
    """gpt3_mcore_te_tp2_pp1_modelopt_distill_resume: --export-kd-teacher-load loads a teacher that runs a forward
    every step (megatron/post_training/model_builder.py); only the student is priced, now with a warning."""
    code, got, err = _explain(_launch("distill_excerpt.yaml"), capsys)
    assert code == 0, err
    assert any(w.startswith("--export-kd-teacher-load: knowledge distillation not modelled") and "under-estimated" in w
               for w in got["warnings"])


@pytest.mark.parametrize("extra", [["--manual-gc"], ["--tp-comm-overlap"],
                                   ["--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage",
                                    "3"]])
def test_distillation_refuses_what_modelopt_asserts(extra: list[str], capsys) -> None:
    """modelopt_gpt_mamba_builder (core_v0.16.1 post_training/model_builder.py; model_provider.py since core_v0.13.0)
    asserts 'ModelOpt Distillation currently incompatible with' --manual-gc, --tp-comm-overlap and the interleaved
    schedule; llmperf accepted each."""
    code, _, err = _explain(_launch("distill_excerpt.yaml", *extra), capsys)
    assert code == 2, err
    assert "ModelOpt Distillation currently incompatible with" in err and "Traceback" not in err


def test_distillation_with_te_cross_entropy_is_warned(capsys) -> None:
    """core_v0.17.0 on (f5238ba5bb) the builder also asserts cross_entropy_fusion_impl != 'te'; core_v0.16.1 has no
    such assert, so a warning naming the releases (was silent)."""
    code, got, err = _explain(_launch("distill_excerpt.yaml", "--cross-entropy-fusion-impl", "te"), capsys)
    assert code == 0, err
    assert any(w.startswith("--export-kd-teacher-load with --cross-entropy-fusion-impl te: Megatron-LM core_v0.17.0")
               for w in got["warnings"]), got["warnings"]


def test_muon_as_ci_runs_it(capsys) -> None:
    """gpt3_moe_mcore_te_ep8_resume_torch_dist_muon runs; muon is priced as Adam with its warning."""
    code, got, err = _explain(_launch("muon_excerpt.yaml"), capsys)
    assert code == 0, err
    assert any("--optimizer muon" in w for w in got["warnings"])


@pytest.mark.parametrize(("extra", "code_wanted"), [
    (["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads_params", "--ckpt-format",
      "fsdp_dtensor", "--use-distributed-optimizer"], 2),
    (["--use-torch-fsdp2", "--untie-embeddings-and-output-weights", "--no-gradient-accumulation-fusion",
      "--expert-model-parallel-size", "1"], 2),
    (["--use-distributed-optimizer", "--overlap-grad-reduce"], 0),
    (["--optimizer", "soap", "--use-torch-fsdp2", "--untie-embeddings-and-output-weights",
      "--no-gradient-accumulation-fusion", "--expert-model-parallel-size", "1"], 2)])
def test_muon_validate_args(extra: list[str], code_wanted: int, capsys) -> None:
    """validate_args' Muon checks (core_v0.16.1 arguments.py 'Muon optimizer check'; core_v0.18.0 on 'emerging
    optimizer check', for every optimizer but sgd / adam): no Megatron FSDP / Torch-FSDP2 in every release that has
    the optimizer (exit 2, was accepted; soap came with core_v0.18.0's check); the distributed optimizer and
    overlapped reduce only core_v0.16 / 0.17 refuse (a warning)."""
    code, got, err = _explain(_launch("muon_excerpt.yaml", *extra), capsys)
    assert code == code_wanted, err
    if code == 2:
        assert "optimizer does not support" in err and "Traceback" not in err
    else:
        assert any("core_v0.16 / 0.17 stop at start-up" in w and "with the distributed optimizer" in w
                   for w in got["warnings"])


@pytest.mark.parametrize(("extra", "warned"), [
    (["--optimizer", "dist_muon", "--overlap-grad-reduce"], "core_v0.16 stops at start-up"),  # 0.17: muon only
    (["--optimizer", "muon", "--overlap-grad-reduce"], "core_v0.16 / 0.17 stop at start-up"),
    (["--optimizer", "adaptive_muon", "--use-distributed-optimizer"], None)])  # core_v0.18.0 on: no such assert
def test_muon_warning_names_the_releases_that_refuse(extra: list[str], warned: str | None, capsys) -> None:
    """core_v0.17.0 asserts no overlapped reduce / gather for `--optimizer muon` only ('Use dist_muon instead'),
    core_v0.16.x for both; adaptive_muon exists from core_v0.18.0, which runs it with the distributed optimizer. The
    warning named core_v0.16 / 0.17 for all three, and 'priced ... with the distributed optimizer' without one."""
    code, got, err = _explain(_launch("muon_excerpt.yaml", *extra), capsys)
    assert code == 0, err
    lines = [w for w in got["warnings"] if "stop at start-up" in w or "stops at start-up" in w]
    assert [warned in w for w in lines] == ([True] if warned else []), lines
    assert not any("with the distributed optimizer" in w for w in lines)


@pytest.mark.parametrize(("extra", "warned"), [
    (["--fine-grained-activation-offloading", "--offload-modules", "expert_fc1", "moe_act"],
     "--fine-grained-activation-offloading (--offload-modules expert_fc1 moe_act): the offloaded inputs are priced "
     "as kept in GPU memory (peak memory over-estimated)"),
    (["--expert-model-parallel-size", "2", "--pipeline-model-parallel-size", "2", "--use-tp-pp-dp-mapping"],
     "--use-tp-pp-dp-mapping: ranks in tp-cp-ep-pp-dp order")])
def test_placement_flags_of_ci_cases_are_warned(extra: list[str], warned: str, capsys) -> None:
    """gpt3_moe_mcore_te_tp2_pp2_ep4_etp1_fine_grained_offloading (--fine-grained-activation-offloading
    --offload-modules ...) and the *_dp_last cases (--use-tp-pp-dp-mapping: initialize.py order 'tp-cp-ep-pp-dp')
    were accepted in silence; llmperf prices neither."""
    code, got, err = _explain(_launch("muon_excerpt.yaml", *extra), capsys)
    assert code == 0, err
    assert any(w.startswith(warned) for w in got["warnings"]), got["warnings"]


def test_tp_pp_dp_mapping_is_silent_where_the_orders_agree(capsys) -> None:
    """tp-cp-ep-dp-pp and tp-cp-ep-pp-dp place ranks alike unless both PP and DP exceed 1 (here PP 1)."""
    code, got, err = _explain(_launch("muon_excerpt.yaml", "--use-tp-pp-dp-mapping"), capsys)
    assert code == 0, err
    assert not any("--use-tp-pp-dp-mapping" in w for w in got["warnings"]), got["warnings"]


@pytest.mark.parametrize(("extra", "code_wanted"), [
    (["--save", "/tmp/ckpt", "--save-interval", "5000", "--save-retain-interval", "2500"], 2),
    (["--save", "/tmp/ckpt", "--save-interval", "5000", "--save-retain-interval", "0"], 2),
    (["--save", "/tmp/ckpt", "--save-interval", "5000", "--save-retain-interval", "10000"], 0),
    (["--save-interval", "5000", "--save-retain-interval", "2500"], 0),  # the asserts sit under `if args.save`
    (["--save", "/tmp/ckpt", "--save-interval", "0", "--save-retain-interval", "2500"], 2)])
def test_save_retain_interval(extra: list[str], code_wanted: int, capsys) -> None:
    """mixtral/deepseekv3_proxy_flex_tp1pp4emp16etp1cp1_release_sm has --save-interval 5000 --save-retain-interval
    2500, which core_v0.16.1's validate_args refuses (:837-842: under `if args.save is not None`, save_interval > 0,
    then the retain asserts; all with the flag since 78af90cb77) and the oracle too; llmperf accepted it. Its sibling
    without _sm (10000) runs. A --save-interval 0 is only a warning for releases before 78af90cb77, which have no
    --save-retain-interval: beside it, it is refused."""
    code, _, err = _explain(_launch("muon_excerpt.yaml", *extra), capsys)
    assert code == code_wanted, err
    if code == 2:
        assert "--save-retain-interval" in err and "Traceback" not in err


def test_tune_keeps_muon_off_the_distributed_optimizer(capsys) -> None:
    """tune rewrote gpt3_moe_mcore_te_ep8_resume_torch_dist_muon with --use-distributed-optimizer, which core_v0.16.1's
    validate_args refuses beside --optimizer muon (the oracle said so): tune/command_rules MUON_DISTOPT_RULE."""
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--apply", "--dry-run", "--",
                              *_launch("muon_excerpt.yaml")], capsys)
    rewrite = [line for line in (out + err).splitlines() if "would run:" in line]
    assert code == 0 and rewrite, err
    assert "--use-distributed-optimizer" not in rewrite[0]


def test_tune_keeps_distillation_uninterleaved() -> None:
    """ModelOpt distillation asserts no interleaved schedule (check_distillation): tune's DISTILL_VPP_RULE prunes
    pp > 1 with vpp > 1 for such a command, and only then."""
    import numpy as np

    from llmperf_hook.frameworks.resolve import resolve_job
    from llmperf_hook.tune.command_rules import DISTILL_VPP_RULE, command_rule_masks

    launch = _launch("distill_excerpt.yaml")
    _, cfg = resolve_job(launch, {})
    cols = {name: np.array(values) for name, values in {"tp": [1, 1, 1], "pp": [2, 2, 1], "vpp": [2, 1, 1], "cp": [1] * 3,
                                                        "mbs": [1] * 3, "distopt": [1] * 3}.items()}
    masks = command_rule_masks(cfg, launch[5:])(cols)
    assert masks[DISTILL_VPP_RULE].tolist() == [True, False, False]


@pytest.mark.parametrize(("extra", "pruned"), [
    ([], True), (["--optimizer", "dist_muon"], True),
    (["--use-distributed-optimizer"], False),  # the user's release runs it: core_v0.18.0 or later
    (["--optimizer", "adaptive_muon"], False)])  # core_v0.18.0 on only, where no release asserts it
def test_tune_muon_rule_follows_the_command(extra: list[str], pruned: bool) -> None:
    """MUON_DISTOPT_RULE keeps muon / dist_muon candidates off the distributed optimizer, which only core_v0.16 / 0.17
    refuse; a command that already runs muon with it shows a later release, and adaptive_muon has none of the older
    asserts: no rule for either (it had dropped --use-distributed-optimizer from every candidate)."""
    import numpy as np

    from llmperf_hook.frameworks.resolve import resolve_job
    from llmperf_hook.tune.command_rules import MUON_DISTOPT_RULE, command_rule_masks

    launch = _launch("muon_excerpt.yaml", *extra)
    _, cfg = resolve_job(launch, {})
    cols = {name: np.array(values) for name, values in {"tp": [1, 1], "pp": [1, 1], "vpp": [1, 1], "cp": [1, 1],
                                                        "mbs": [4, 4], "distopt": [0, 1]}.items()}
    masks = command_rule_masks(cfg, launch[5:])(cols)
    assert (masks[MUON_DISTOPT_RULE].tolist() if MUON_DISTOPT_RULE in masks else None) == (
        [False, True] if pruned else None)
