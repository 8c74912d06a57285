"""What prices a collective when a cluster has a fitted comm model: the fit, or the cluster's alpha-beta where the
fit measured another transport (comm_model rule 3), as predict's "cost models" line says; and below a fit's
smallest sample a fixed cost is held within MAX_BELOW_SAMPLE_SCALE of the cluster's alpha-beta."""

import numpy as np
import pytest

from llmperf_hook.api import predict_command
from llmperf_hook.graph.op import Collective, Op
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.predict.alpha_beta import collective_time_s
from llmperf_hook.profile.comm_fit import CommSamples, fit_layout
from llmperf_hook.profile.comm_model import (MAX_BELOW_SAMPLE_SCALE, MIN_RATE_FRACTION, CommModel, CommPredictor)

GPT_13B = ["torchrun", "--nproc-per-node", "4", "pretrain_gpt.py", "--num-layers", "40", "--hidden-size", "5120",
           "--num-attention-heads", "40", "--seq-length", "2048", "--max-position-embeddings", "2048",
           "--micro-batch-size", "1", "--global-batch-size", "32", "--tensor-model-parallel-size", "2", "--bf16"]


def _op(kind: str, nbytes: float, nodes: int, gpn: int) -> Op:
    return Op("c", kind, "step", {"bytes": nbytes}, collective=Collective("dp", nodes * gpn, gpn))


def test_cost_models_line_names_the_clusters_alpha_beta_where_it_replaced_the_fit() -> None:
    """13B, TP 2 x DP 4 on two Perlmutter nodes: the TP all-reduce (1x2, NVLink) keeps the fit; the DP all-reduce
    (2x2) crosses nodes, where the samples ran at 0.6-4.4 GB/s (another transport) and alpha-beta prices it."""
    two_nodes = predict_command(["torchrun", "--nnodes", "2", *GPT_13B[1:]], {}, cluster="perlmutter")
    assert two_nodes.estimate.predictor["allreduce"] == "alpha-beta | alpha-beta+residual:perlmutter"
    one_node = predict_command(GPT_13B, {}, cluster="perlmutter")  # TP 2 x DP 2 inside one node: the fit alone
    assert one_node.estimate.predictor["allreduce"] == "alpha-beta+residual:perlmutter"


def test_priced_by_a_slow_fit_alone_is_alpha_beta() -> None:
    x = np.geomspace(4e7, 2e9, 300)
    slow = CommPredictor(CommModel("perlmutter", (fit_layout(CommSamples("allreduce", 2, 4, x, 2 * 7 / 8 * x / 2e9)),),
                                   {}))
    assert slow.priced_by([_op("allreduce", 1e9, 2, 4)], load_cluster("perlmutter")) == {"allreduce": "alpha-beta"}


def test_a_big_fixed_cost_is_held_within_ten_times_the_clusters_alpha_beta_below_the_samples() -> None:
    """In-node all-gather samples from 64 MB that carry a 30 ms fixed cost (e.g. a first-call setup timed with the
    collective) over NVLink-class bandwidth: healthy at its largest sample, so the fit prices its sizes; below
    them the cluster's alpha-beta x 10 at most, not x (30 ms / microseconds)."""
    cluster = load_cluster("perlmutter")
    x = np.geomspace(6.4e7, 4e9, 300)
    fit = fit_layout(CommSamples("allgather", 1, 4, x, 30e-3 + 3 / 4 * x / 80e9))
    pred = CommPredictor(CommModel("perlmutter", (fit,), {}))
    edge = fit.bytes_range[0]
    assert pred.rate_fraction("allgather", _op("allgather", edge, 1, 4), cluster) >= MIN_RATE_FRACTION
    assert pred._edge_scale(fit, "allgather", _op("allgather", edge, 1, 4), cluster) > MAX_BELOW_SAMPLE_SCALE
    small = _op("allgather", 1024, 1, 4)
    assert pred.predict_s([small], cluster)[0] == pytest.approx(MAX_BELOW_SAMPLE_SCALE * collective_time_s(small,
                                                                                                         cluster))
    sizes = np.geomspace(1024, 2 * edge, 40)
    assert np.all(np.diff(pred.predict_s([_op("allgather", b, 1, 4) for b in sizes], cluster)) >= 0)
    (warning,) = pred.extrapolation_warnings([small], cluster)
    assert "alpha-beta x 10" in warning and "fixed cost" in warning


def test_rate_fraction_is_computed_once_per_class_layout_and_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pricing, the warnings and the names all ask it for every group of every predict (tune: every candidate)."""
    cluster = load_cluster("perlmutter")
    x = np.geomspace(4e7, 2e9, 300)
    pred = CommPredictor(CommModel("perlmutter", (fit_layout(CommSamples("allreduce", 2, 4, x, 2 * 7 / 8 * x / 2e9)),),
                                   {}))
    calls = []
    fraction = pred._fraction
    monkeypatch.setattr(pred, "_fraction", lambda *a: calls.append(1) or fraction(*a))
    ops = [_op("allreduce", 1e9, 2, 4), _op("allreduce", 2e9, 2, 4)]
    for _ in range(3):
        pred.predict_s(ops, cluster), pred.extrapolation_warnings(ops, cluster), pred.priced_by(ops, cluster)
    assert len(calls) == 2  # the fit's own layout and the op's, once
    pred.predict_s(ops, load_cluster("perlmutter"))  # another cluster object: computed again
    assert len(calls) == 4
