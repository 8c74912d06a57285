"""Robustness campaign 2: preset names are case-insensitive (`--cluster DGX-A100 --hardware H100-SXM5-80GB` were
'not found'; presets and `llmperf profile` names are stored lower-case); file paths are used as given."""

from __future__ import annotations

import pytest

from llmperf_hook import api
from llmperf_hook.errors import LlmperfError


def test_preset_names_in_any_case():
    spec, _ = api.resolve_cluster("DGX-A100", "H100-SXM5-80GB")
    assert (spec.name, spec.gpu.name) == ("dgx-a100", "h100-sxm5-80gb")


def test_a_file_path_is_not_lower_cased(tmp_path):
    path = tmp_path / "My.yaml"
    path.write_text("name: mine\ngpu: a100-sxm4-80gb\ngpus_per_node: 4\nintra_node_bandwidth_GBps: 300\n"
                    "inter_node_bandwidth_GBps: 25\n")
    assert api.resolve_cluster(str(path), None)[0].name == "mine"
    with pytest.raises(LlmperfError, match="NOSUCH"):
        api.resolve_cluster("NOSUCH.yaml", None)
