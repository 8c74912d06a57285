"""check_megatron_options works out the job's fork (megatron_entry_points.fork_parser_options, a scan of every
script argument for BLOOM's fork's marks) once, and passes it on; it worked it out three times (R42's note on H144).
Its verdicts are unchanged: the BLOOM fork's refusal, Megatron-LM's, and a custom script's warning."""

from __future__ import annotations

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks import megatron_unknown_args as mua


@pytest.mark.parametrize("script, args, refusal", [
    ("pretrain_gpt.py", ["--pp-partition-method", "type:transformer", "--sequence-parallel"], "BLOOM's fork"),
    ("pretrain_gpt.py", ["--tensor-model-paralel-size", "2"], "did you mean --tensor-model-parallel-size"),
    ("my_train.py", ["--my-option", "1"], None),
])
def test_the_fork_is_worked_out_once(script: str, args: list[str], refusal: str | None,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, tuple[str, ...]]] = []
    original = mua.fork_parser_options

    def counted(script: str, script_args):  # type: ignore[no-untyped-def]
        calls.append((script, tuple(script_args)))
        return original(script, script_args)

    monkeypatch.setattr(mua, "fork_parser_options", counted)
    if refusal is None:
        assert any("--my-option" in w for w in mua.check_megatron_options(script, args))
    else:
        with pytest.raises(ConfigError, match=refusal):
            mua.check_megatron_options(script, args)
    assert len(calls) == 1, calls
