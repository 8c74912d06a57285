"""Megatron-LM's own start-up checks run on this CPU, the oracle of the differential tests: core_v0.16.1's
megatron/training, unpacked from the Megatron-LM mirror as benchmarks/extract_megatron_arguments.py unpacks it,
beside the installed megatron-core 0.16.1 of the same release. For one command's training arguments it runs what
pretrain() runs before the first step touches a GPU: parse_args' parser (allow_abbrev=False, the RANK /
WORLD_SIZE environment it reads), validate_args, the micro-batch calculator initialize builds
(megatron/training/global_vars.py -> megatron.core.num_microbatches_calculator) and
core_transformer_config_from_args (TransformerConfig.__post_init__), then the optimizer and DDP configs pretrain()
builds (OptimizerConfig / DistributedDataParallelConfig.__post_init__). Checks made once process groups exist
(DistributedDataParallel.__init__, the model's layers) are not run. The GPU it asks about is faked as an H100
(compute capability 9.0) with a Transformer Engine new enough for every version gate (2.10): the checks that
depend on the installed stack pass, as on a current NGC container.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterator

MIRROR = "/work/.mirror/NVIDIA+Megatron-LM/repo"
REF = "core_v0.16.1"

Oracle = Callable[[list[str], int], "str | None"]
"""(training arguments, world size) -> None when Megatron starts, else its refusal."""


def _extractor():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "extract_megatron_arguments.py"
    spec = importlib.util.spec_from_file_location("extract_megatron_arguments", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _fake_device(arguments, mp) -> None:
    """H100 and TE 2.10 in place of the probes the checks make (torch.cuda.get_device_capability for
    --moe-grouped-gemm, get_device_arch_version, is_te_min_version, TE's fused RoPE for --apply-rope-fusion, on by
    default); `mp` (a pytest MonkeyPatch) undoes them."""
    import torch
    from megatron.core.models.common.embeddings import rope_utils
    from megatron.core.optimizer import optimizer_config
    from megatron.core.transformer import transformer_config

    mp.setattr(torch.cuda, "get_device_capability", lambda *a, **k: (9, 0))
    mp.setattr(arguments, "get_device_arch_version", lambda: 9)
    for module in (arguments, optimizer_config, transformer_config):
        mp.setattr(module, "is_te_min_version", lambda *a, **k: True)
    if rope_utils.fused_apply_rotary_pos_emb is None:
        mp.setattr(rope_utils, "fused_apply_rotary_pos_emb", lambda *a, **k: None)


def _from_args(config_class, args, **extra):
    """A config dataclass as megatron/training/training.py builds it: every field args has, then the renamed ones
    (get_megatron_optimizer_config :1410-1435, get_model's DistributedDataParallelConfig :1291-1309)."""
    import dataclasses

    kwargs = {f.name: getattr(args, f.name) for f in dataclasses.fields(config_class) if hasattr(args, f.name)}
    return config_class(**{**kwargs, **extra})


def _build_configs(args) -> None:
    """The optimizer and DDP configs pretrain() builds before the first step (their __post_init__ asserts)."""
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.optimizer.optimizer_config import AdamOptimizerConfig, SGDOptimizerConfig

    _from_args(SGDOptimizerConfig if args.optimizer == "sgd" else AdamOptimizerConfig, args)
    if not (args.use_torch_fsdp2 or args.use_megatron_fsdp):
        _from_args(DistributedDataParallelConfig, args, grad_reduce_in_fp32=args.accumulate_allreduce_grads_in_fp32,
                   check_for_nan_in_grad=args.check_for_nan_in_loss_and_grad, bucket_size=args.ddp_bucket_size)


def _parser(arguments):
    """parse_args' parser, raising instead of exiting on a bad argument."""
    import argparse

    parser = arguments.add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False))
    parser.error = lambda message: (_ for _ in ()).throw(ValueError(f"argparse: {message}"))  # type: ignore[method-assign]
    return parser


def _run(arguments, parser, calculator, argv: list[str], world: int) -> str | None:
    import argparse

    try:
        args = parser.parse_args(argv)
        args.rank, args.world_size = 0, world
        # the launch environment Megatron-LM's example scripts give: CUDA_DEVICE_MAX_CONNECTIONS=1 (validate_args
        # asserts it under TP / CP before Blackwell), left unset for FSDP (which asserts it is not 1)
        os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
        if not (args.use_torch_fsdp2 or args.use_megatron_fsdp):
            os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
        arguments.validate_args(args, {})
        calculator._build_num_microbatches_calculator(0, args.rampup_batch_size, args.global_batch_size,
                                                      args.micro_batch_size, args.data_parallel_size,
                                                      args.decrease_batch_size_if_needed)
        arguments.core_transformer_config_from_args(args)
        _build_configs(args)
    except (argparse.ArgumentError, SystemExit) as err:
        return f"argparse: {err}"
    except Exception as err:  # noqa: BLE001 - any refusal at start-up is the oracle's answer
        return f"{type(err).__name__}: {err}"
    return None


def _forget(folder: str, before: set[str]) -> None:
    """Drops from sys.modules what the oracle put there: the unpacked megatron.training modules (their files go with
    `folder`) and the tokenizer stand-ins (a fake `six` would break a later `import six` or find_spec("six"))."""
    for name in set(sys.modules) - before:
        module = sys.modules[name]
        if name in ("six", "regex") or str(getattr(module, "__file__", None) or "").startswith(folder):
            del sys.modules[name]


def megatron_oracle() -> Iterator[Oracle]:
    """A generator for a module-scoped pytest fixture: yields the oracle, then restores sys.path, sys.modules, the
    environment and the faked probes, and removes the unpacked sources."""
    import pytest

    if not Path(MIRROR).is_dir() or importlib.util.find_spec("megatron.core") is None:
        pytest.skip("the Megatron-LM mirror or megatron-core is not here")
    extract = _extractor()
    mp, before, environ = pytest.MonkeyPatch(), set(sys.modules), dict(os.environ)
    with tempfile.TemporaryDirectory() as folder:
        try:
            mp.setattr(sys, "path", [folder, *sys.path])
            extract._checkout(MIRROR, REF, Path(folder))
            init = Path(folder) / "megatron" / "training" / "__init__.py"
            init.write_text("".join(line for line in init.read_text().splitlines(keepends=True)
                                    if not line.startswith(("from .initialize ", "from .training "))))
            extract._stand_in_tokenizer_modules()
            from megatron.core import num_microbatches_calculator as calculator
            from megatron.training import arguments

            _fake_device(arguments, mp)
            parser = _parser(arguments)
            yield lambda argv, world: _run(arguments, parser, calculator, argv, world)
        finally:  # the environment as it was: _run sets CUDA_DEVICE_MAX_CONNECTIONS, the imports TORCHINDUCTOR_CACHE_DIR
            mp.undo()
            os.environ.clear()
            os.environ.update(environ)
            _forget(folder, before)
