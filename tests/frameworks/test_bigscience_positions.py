"""The bigscience Megatron-DeepSpeed fork's --position-embedding-type values (PositionEmbeddingType: rotary,
absolute, alibi; BLOOM trains with alibi) are accepted and read as rope / learned / no position table."""

from __future__ import annotations

import pytest

from tests.frameworks.helpers import megatron


@pytest.mark.parametrize("value, expected", [("alibi", "none"), ("rotary", "rope"), ("absolute", "learned_absolute"),
                                             ("rope", "rope"), ("learned_absolute", "learned_absolute")])
def test_fork_position_types(value: str, expected: str) -> None:
    cfg = megatron("--position-embedding-type", value)
    assert cfg.model.position_embedding == expected


@pytest.mark.parametrize("value", ["alibi", "rotary", "absolute"])
def test_fork_position_types_do_not_warn(value: str) -> None:
    assert not any("position" in w for w in megatron("--position-embedding-type", value).warnings)
