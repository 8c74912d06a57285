"""Where every resolved value came from, so `llmperf explain` can print it.

Precedence (highest first), stated once here and applied by every resolver:
  1. llmperf's own overrides (`--nnodes`, `--nproc-per-node`, `--model`, `--cluster`, ...)
  2. the framework's argv (last repeated flag wins, as argparse does)
  3. the framework's config file (ds_config JSON keys, Hugging Face config.json)
  4. the launcher (torchrun / deepspeed flags, hostfile)
  5. environment variables (PET_*, SLURM_*, WORLD_SIZE)
  6. presets (configs/models)
  7. the framework's own defaults, then values derived from the above by the framework's rules
Note: where a framework itself gives env precedence (torchrun reads PET_* only when a flag is absent) the
launcher parser follows the framework, which this ordering already expresses.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class SourceKind(str, Enum):
    OVERRIDE = "llmperf option"
    ARGV = "argv"
    CONFIG_FILE = "config file"
    LAUNCHER = "launcher"
    HOSTFILE = "hostfile"
    ENV = "env var"
    PRESET = "preset"
    DEFAULT = "framework default"
    DERIVED = "derived"


@dataclass(frozen=True)
class Source:
    """One value's origin, e.g. Source(ARGV, "--tensor-model-parallel-size") or Source(ENV, "SLURM_NNODES")."""

    kind: SourceKind
    detail: str = ""
    """The flag, env var, file key or rule the value came from."""

    def __str__(self) -> str:
        return f"{self.kind.value} {self.detail}".strip()
