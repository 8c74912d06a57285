"""launch/shell_parameters.py: each transforming expansion compared with what bash itself prints for it."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from llmperf_hook.launch.argv_words import expand_env_refs

ENV = {"V": "model.tar.json", "N": "a-b-c", "H": "node1,node2,node3", "P": "/ckpt/run/", "S": "abcdef", "L": "hello World",
       "E": ""}
EXPRESSIONS = ["${#V}", "${#E}", "${V%.*}", "${V%%.*}", "${V#*.}", "${V##*.}", "${H%%,*}", "${H#*,}", "${P%/}", "${V%x}",
               "${N/-/_}", "${N//-/_}", "${N//[ab]/X}", "${N/-}", "${L^^}", "${L,,}", "${L^}", "${S:2}", "${S:1:3}",
               "${S: -2}", "${S:1:-1}", "${S:10}", "x${S:0:1}y${#N}", "${V:-d}", "${E:-d}", "${U:-8}"]


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_as_bash_expands_it(expression: str) -> None:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is not installed")
    real = subprocess.run([bash, "-c", f'printf "%s" "{expression}"'], env=ENV, capture_output=True, text=True,
                          check=True).stdout
    assert expand_env_refs(expression, ENV, {}) == real


def test_an_unset_variable_stays_as_written() -> None:
    used: dict[str, str] = {}
    assert expand_env_refs("${UNSET%.*}", ENV, used) == "${UNSET%.*}" and used == {}
    expand_env_refs("${V%.*}", ENV, used)
    assert used == {"V": "model.tar.json"}
