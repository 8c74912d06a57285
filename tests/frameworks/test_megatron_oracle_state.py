"""The differential oracle (megatron_oracle.py) runs Megatron's own start-up checks in the test process: once it is
done, nothing it changed may reach the tests that run after it in the same process."""

from __future__ import annotations

import os
import sys

from tests.frameworks.helpers import BASE
from tests.frameworks.megatron_oracle import megatron_oracle


def test_the_oracle_leaves_no_module_path_or_environment_behind() -> None:
    import torch

    modules, path, env = set(sys.modules), list(sys.path), dict(os.environ)
    probe = torch.cuda.get_device_capability
    run = megatron_oracle()
    oracle = next(run)
    assert oracle([*BASE], 8) is None
    assert oracle([*BASE, "--lr", "1e-5", "--min-lr", "1e-4"], 8) is not None
    assert next(run, "done") == "done"
    left = {name for name in set(sys.modules) - modules
            if name in ("six", "regex") or name.startswith("megatron.training")}
    assert not left, left
    assert (sys.path, dict(os.environ), torch.cuda.get_device_capability) == (path, env, probe)
