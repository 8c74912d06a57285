"""TrainingConfig.cuda_device_max_connections: the job's CUDA_DEVICE_MAX_CONNECTIONS, read from its environment
(frameworks/assemble.device_connections), shown by explain and warned about, with the GPU known, as Megatron-LM
would (graph/launch_order.py)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from llmperf_hook.api import predict_command, resolve_command
from llmperf_hook.cli import cli
from llmperf_hook.frameworks.explain_data import explain_json

MEGATRON = ("torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 2 --hidden-size 1024 --num-attention-heads 16 "
            "--seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 8 "
            "--vocab-size 32000 --bf16 --tensor-model-parallel-size 8 --sequence-parallel").split()


def _resolve(prefix: list[str], argv: list[str] = MEGATRON, env: dict[str, str] | None = None):
    _, cfg, _, _ = resolve_command([*prefix, *argv], env or {}, cluster="dgx-a100")
    return cfg


def test_unstated_is_todays_ordered_launch() -> None:
    cfg = _resolve([])
    assert cfg.cuda_device_max_connections == 1 and cfg.tp_comm_ordered
    assert "cuda_device_max_connections" not in explain_json(cfg)  # other jobs' explain keeps its keys
    assert not any("CUDA_DEVICE_MAX_CONNECTIONS" in w for w in cfg.warnings)


def test_one_is_ordered_without_a_warning() -> None:
    cfg = _resolve(["CUDA_DEVICE_MAX_CONNECTIONS=1"])
    assert cfg.tp_comm_ordered and not any("CUDA_DEVICE_MAX_CONNECTIONS" in w for w in cfg.warnings)
    assert str(cfg.sources["cuda_device_max_connections"]) == "env var CUDA_DEVICE_MAX_CONNECTIONS"


def _warnings(prefix: list[str], argv: list[str] = MEGATRON, cluster: str = "dgx-a100") -> list[str]:
    pred = predict_command([*prefix, *argv], {}, cluster=cluster)
    return [w for w in (*pred.warnings, *pred.estimate.warnings) if "CUDA_DEVICE_MAX_CONNECTIONS" in w]


def test_eight_is_unordered_accepted_with_megatrons_rule_named() -> None:
    cfg = _resolve(["CUDA_DEVICE_MAX_CONNECTIONS=8"])
    assert cfg.cuda_device_max_connections == 8 and not cfg.tp_comm_ordered
    assert not any("CUDA_DEVICE_MAX_CONNECTIONS" in w for w in cfg.warnings)  # the GPU decides: warned with the graph
    (warning,) = _warnings(["CUDA_DEVICE_MAX_CONNECTIONS=8"])
    assert "CUDA_DEVICE_MAX_CONNECTIONS=8 (environment)" in warning and "serialized" in warning
    assert "before Blackwell" in warning and "2022-10-14" in warning and "compute capability 8" in warning
    data = explain_json(cfg)
    assert data["cuda_device_max_connections"] == 8
    assert "CUDA_DEVICE_MAX_CONNECTIONS" in data["sources"]["cuda_device_max_connections"]


def test_blackwell_needs_no_launch_order_and_is_not_warned() -> None:
    # Megatron-LM 50d847514d / 0db0e8328b: the assert holds only for get_device_arch_version() < 10.
    assert not _warnings(["CUDA_DEVICE_MAX_CONNECTIONS=32"], cluster="dgx-b200")
    assert _warnings(["CUDA_DEVICE_MAX_CONNECTIONS=32"], cluster="dgx-h100")


def test_env_prefix_and_unusable_values() -> None:
    assert _resolve(["env", "CUDA_DEVICE_MAX_CONNECTIONS=32"]).cuda_device_max_connections == 32
    # CUDA takes 1 to 32; anything else leaves its default of 8 queues (no launch order either).
    assert _resolve(["CUDA_DEVICE_MAX_CONNECTIONS=many"]).cuda_device_max_connections == 8
    assert _resolve(["CUDA_DEVICE_MAX_CONNECTIONS=0"]).cuda_device_max_connections == 8


def test_warning_only_with_tensor_or_context_parallelism() -> None:
    argv = [w if w != "8" or i != MEGATRON.index("--tensor-model-parallel-size") + 1 else "1"
            for i, w in enumerate(MEGATRON) if w != "--sequence-parallel"]
    cfg = _resolve(["CUDA_DEVICE_MAX_CONNECTIONS=8"], argv)
    assert cfg.parallel.tp == 1 and cfg.cuda_device_max_connections == 8
    assert not _warnings(["CUDA_DEVICE_MAX_CONNECTIONS=8"], argv)
    (warning,) = _warnings(["CUDA_DEVICE_MAX_CONNECTIONS=8"], [w for w in MEGATRON if w != "--sequence-parallel"])
    assert "async grad-input all-reduce is priced serialized" in warning and "before Blackwell" in warning


def test_explain_prints_it_exit_0() -> None:
    result = CliRunner().invoke(cli, ["explain", "--format", "json", "--", "CUDA_DEVICE_MAX_CONNECTIONS=8", *MEGATRON])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["cuda_device_max_connections"] == 8


def test_launching_environment_and_script_export_are_read() -> None:
    # The job inherits the shell's variable (launch/sizing.PRICED_ENV), as it inherits a launch script's export.
    assert _resolve([], env={"CUDA_DEVICE_MAX_CONNECTIONS": "8"}).cuda_device_max_connections == 8
    assert _resolve([], env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"}).tp_comm_ordered


FSDP2 = [*MEGATRON[:MEGATRON.index("--tensor-model-parallel-size")], "--use-torch-fsdp2",
         "--untie-embeddings-and-output-weights", "--ckpt-format", "torch_dist", "--no-gradient-accumulation-fusion"]


def test_fsdp_runs_with_cudas_default_and_warns_on_one() -> None:
    # arguments.py: FSDP2 / Megatron-FSDP assert CUDA_DEVICE_MAX_CONNECTIONS != "1" (unset is CUDA's default, 8).
    cfg = _resolve([], FSDP2)
    assert cfg.optimizer.fsdp == "torch_fsdp2" and cfg.cuda_device_max_connections == 8
    assert not any("CUDA_DEVICE_MAX_CONNECTIONS" in w for w in cfg.warnings)
    one = _resolve(["CUDA_DEVICE_MAX_CONNECTIONS=1"], FSDP2)
    (warning,) = [w for w in one.warnings if "CUDA_DEVICE_MAX_CONNECTIONS=1" in w]
    assert "FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset" in warning
    assert _resolve(["CUDA_DEVICE_MAX_CONNECTIONS=4"], FSDP2).cuda_device_max_connections == 4
