"""Hand-built TrainingConfig / ClusterSpec objects and a stand-in predictor for tune's unit tests.

The stand-in is NOT the product's predictor: it lets the search logic be tested without depending on
`api.predict_config`; end-to-end tests (test_tune_command.py) use the real one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from llmperf_hook.frameworks.training_config import (
    BatchConfig, ModelShape, OptimizerConfig, ParallelLayout, RecomputeConfig, TrainingConfig,
)
from llmperf_hook.hardware.spec import ClusterSpec, HardwareSpec, NetworkTier
from llmperf_hook.tune import surrogate
from llmperf_hook.tune.candidates import candidates_from_list, rule_masks
from llmperf_hook.tune.candidate import candidate_of

GiB = 1 << 30


def gpt_config(*, layers: int = 96, hidden: int = 12288, heads: int = 96, seq: int = 2048, world: int = 1024,
               tp: int = 8, pp: int = 16, mbs: int = 1, gbs: int = 1536, framework: str = "megatron",
               recompute: str = "full", zero: int = 0, distopt: bool = False) -> TrainingConfig:
    vocab = 51200
    shape = ModelShape(num_layers=layers, hidden_size=hidden, ffn_hidden_size=4 * hidden, num_attention_heads=heads,
                       num_query_groups=heads, kv_channels=hidden // heads, seq_length=seq, vocab_size=50257,
                       padded_vocab_size=vocab)
    dp = world // (tp * pp)
    rc = RecomputeConfig(granularity="full", method="uniform", num_layers=1) if recompute == "full" \
        else RecomputeConfig(granularity=recompute)
    return TrainingConfig(
        framework=framework, launcher="torchrun", world_size=world, nnodes=max(world // 8, 1),
        nproc_per_node=min(world, 8), model=shape, parallel=ParallelLayout(tp=tp, pp=pp, dp=dp),
        batch=BatchConfig(micro_batch_size=mbs, global_batch_size=gbs, num_microbatches=gbs // (mbs * dp)),
        precision="bf16", recompute=rc, optimizer=OptimizerConfig(zero_stage=zero, distributed_optimizer=distopt),
    )


def a100_cluster(capacity_gib: float = 80.0) -> ClusterSpec:
    gpu = HardwareSpec(name="a100-test", peak_flop_per_s={"bf16": 312e12, "fp16": 312e12, "fp32": 19.5e12},
                       memory_bandwidth_bytes_per_s=2.0e12, memory_capacity_bytes=int(capacity_gib * GiB))
    return ClusterSpec(name="test", gpu=gpu, gpus_per_node=8, intra_node=NetworkTier(300e9, 5e-6),
                       inter_node=NetworkTier(25e9, 10e-6))


@dataclass(frozen=True)
class FakeMemory:
    peak_bytes_per_gpu: float
    capacity_bytes: float
    fits: bool
    must_fit_bytes: float


@dataclass(frozen=True)
class FakeEstimate:
    step_time_s: float
    tokens_per_s: float
    mfu: float
    memory: FakeMemory


_FAKE_ESTIMATES: dict[str, FakeEstimate] = {}
"""FakePredictor's answers by repr((config, cluster)): it is a pure function of the two (a dataclass repr names every
field; TrainingConfig holds dicts, so it has no hash), and test_top1_equals_exhaustive_best's exhaustive search
re-predicted every layout its bounded search had (~11 ms each, 800 of its 5,200 calls)."""


class FakePredictor:
    """Surrogate numbers perturbed deterministically per layout, so its order differs from the surrogate's."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, cfg: TrainingConfig, cluster: ClusterSpec) -> FakeEstimate:
        self.calls += 1
        key = repr((cfg, cluster))
        if key not in _FAKE_ESTIMATES:
            _FAKE_ESTIMATES[key] = self._estimate(cfg, cluster)
        return _FAKE_ESTIMATES[key]

    @staticmethod
    def _estimate(cfg: TrainingConfig, cluster: ClusterSpec) -> FakeEstimate:
        cols = candidates_from_list((candidate_of(cfg),)).columns
        est = surrogate.estimate(cfg, cluster, cols)
        wobble = 1.0 + 0.07 * np.sin(3.1 * cfg.parallel.tp + 1.7 * cfg.parallel.pp + cfg.batch.micro_batch_size)
        t = float(est.step_time_s[0]) * wobble
        peak, need = float(est.peak_bytes[0]) * 1.05, float(est.must_fit_bytes[0]) * 1.05
        cap = float(cluster.gpu.memory_capacity_bytes)
        tokens = cfg.batch.global_batch_size * cfg.model.seq_length
        return FakeEstimate(t, tokens / t, 0.4, FakeMemory(peak, cap, need <= cap, need))


def no_validation(cfg: TrainingConfig) -> None:
    return None


def with_model(cfg: TrainingConfig, **kw: int) -> TrainingConfig:
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, **kw))


def rule_rejected(cfg: TrainingConfig, table) -> np.ndarray:
    """Rows of a candidate table that any of tune's vectorised validity rules (candidates.rule_masks) rejects."""
    bad = np.zeros(len(table), dtype=bool)
    for mask in rule_masks(cfg, table.columns).values():
        bad |= mask
    return bad


def mask_disagreements(cfg: TrainingConfig, table) -> list[tuple[str, bool]]:
    """(candidate, accepted by validate_config) for every row where tune's rule masks and explain's rules disagree;
    a row whose TP x PP x CP does not divide the world cannot become a TrainingConfig and must be masked."""
    from llmperf_hook.errors import ConfigError
    from llmperf_hook.frameworks.validation import validate_config
    from llmperf_hook.tune.candidate import apply_candidate

    bad, out = rule_rejected(cfg, table), []
    for i in range(len(table)):
        cand = table.candidate(i)
        if cfg.world_size % (cand.tp * cand.pp * cand.cp):
            ok = False
        else:
            try:
                validate_config(apply_candidate(cfg, cand))
                ok = True
            except ConfigError:
                ok = False
        if ok == bool(bad[i]):
            out.append((cand.describe(), ok))
    return out


def explain_valid(cfg: TrainingConfig, table, rows, limit: int | None = None, spec=None) -> list:
    """Candidates of `rows` (in that order) that explain's rules (validate_config) accept, at most `limit`; given the
    cluster `spec`, also only those whose graph builds (rules only the graph checks, e.g. uneven stages)."""
    from llmperf_hook.errors import ConfigError
    from llmperf_hook.frameworks.validation import validate_config
    from llmperf_hook.graph.build import build_graph
    from llmperf_hook.tune.candidate import apply_candidate

    out = []
    for i in rows:
        cand = table.candidate(int(i))
        try:
            applied = apply_candidate(cfg, cand)
            validate_config(applied)
            if spec is not None:
                build_graph(applied, spec)
        except ConfigError:
            continue
        out.append(cand)
        if len(out) == limit:
            break
    return out


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    """`llmperf ARGS` in this process: (exit code, stdout, stderr)."""
    import pytest

    from llmperf_hook.cli import main

    with pytest.raises(SystemExit) as ex:
        main(args)
    out, err = capsys.readouterr()
    return int(ex.value.code or 0), out, err


def tune_apply_json(tmp_path, capsys, space: dict, argv: list[str]) -> tuple[int, str, str]:
    """`llmperf tune --cluster dgx-h100 --top 10 --search SPACE --format json --apply --dry-run -- ARGV` with the
    search space written to tmp_path/space.yaml: (exit code, stdout, stderr)."""
    import json

    (tmp_path / "space.yaml").write_text(json.dumps(space))
    return run_cli(["tune", "--cluster", "dgx-h100", "--top", "10", "--search", str(tmp_path / "space.yaml"),
                    "--format", "json", "--apply", "--dry-run", "--", *argv], capsys)
