"""Word cells that named nothing the schema knows used to fall back in silence: `sequence_parallel` 'maybe' was off,
`zero_stage_or_dist_opt` 'fsdp' was no ZeRO, `normalization` 'rmsnorm' and `position_embedding` 'RoPE' (other letter
case) were LayerNorm and learned positions. Each is now read in any letter case or refused naming the allowed words.
Found by the H99 audit."""

from __future__ import annotations

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.validate.runs_csv import build_measured_run

from .validate_helpers import BASE_ROW


def _run(**cells: str):
    return build_measured_run({**BASE_ROW, **cells}, 1)


@pytest.mark.parametrize(("column", "cell"), [("sequence_parallel", "maybe"), ("swiglu", "sometimes"),
                                              ("zero_stage_or_dist_opt", "fsdp"), ("normalization", "BatchNorm"),
                                              ("position_embedding", "alibi")])
def test_an_unknown_word_is_refused_with_the_allowed_ones(column: str, cell: str) -> None:
    with pytest.raises(UsageError, match=rf"row 1: column `{column}` = '{cell}'.*(yes|zero|LayerNorm|rope)"):
        _run(**{column: cell})


@pytest.mark.parametrize(("cells", "field", "value"), [
    ({"normalization": "rmsnorm"}, "normalization", "RMSNorm"),
    ({"normalization": "layernorm"}, "normalization", "LayerNorm"),
    ({"position_embedding": "RoPE (theta 500000)"}, "position_embedding", "rope"),
    ({"position_embedding": "learned_absolute"}, "position_embedding", "learned_absolute"),
    ({"sequence_parallel": "No"}, "sequence_parallel", False),
    ({"sequence_parallel": "yes (recipe)"}, "sequence_parallel", True),
    ({"swiglu": "true"}, "swiglu", True),
    ({"zero_stage_or_dist_opt": "ZeRO-0 (DeepSpeed)"}, "zero_stage", 0),
    ({"zero_stage_or_dist_opt": "none"}, "zero_stage", 0),
])
def test_known_words_in_any_letter_case(cells: dict[str, str], field: str, value: object) -> None:
    assert getattr(_run(**cells), field) == value
