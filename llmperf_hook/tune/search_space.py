"""The space `llmperf tune` searches: which values of each knob to try, read from `configs/search/*.yaml`.

A search file maps knob names to a list of values or to `auto` (the rule for `auto` is documented per knob
in `configs/search/megatron.yaml`). Knobs a framework cannot change are ignored for that framework (plain
DeepSpeed cannot change TP/PP/CP: those come from the model code, not the launch command).
Read the file at the edge (`read_search_file`), parse separately (`parse_search_space`).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

from llmperf_hook.errors import UsageError
from llmperf_hook.resources import configs_dir

AUTO = "auto"
RECOMPUTE_MODES = ("none", "selective", "full", "block")

# knob -> (type of one value, human description) for parsing and error messages
_KNOBS: dict[str, tuple[type, str]] = {
    "micro_batch_size": (int, "micro-batch sizes"),
    "tensor_parallel": (int, "tensor-parallel degrees"),
    "pipeline_parallel": (int, "pipeline degrees"),
    "virtual_pipeline": (int, "virtual pipeline stages per pipeline rank"),
    "context_parallel": (int, "context-parallel degrees"),
    "sequence_parallel": (bool, "sequence parallel on/off"),
    "expert_parallel": (int, "expert-parallel degrees (MoE models)"),
    "expert_tensor_parallel": (int, "expert tensor-parallel degrees (MoE models)"),
    "recompute": (str, "recompute modes (none, selective, full, block)"),
    "recompute_block_layers": (int, "layers per stage recomputed in block mode"),
    "distributed_optimizer": (bool, "Megatron distributed optimizer on/off"),
    "zero_stage": (int, "DeepSpeed ZeRO stages"),
}
_SCALARS: dict[str, tuple[type, str]] = {
    "memory_margin": (float, "fraction of GPU memory kept free"),
    "max_micro_batch_size": (int, "largest micro-batch size `auto` tries"),
    "max_tensor_parallel": (int, "largest TP `auto` tries (default: GPUs per node)"),
    "max_virtual_pipeline": (int, "most virtual stages `auto` tries"),
}


@dataclass(frozen=True)
class SearchSpace:
    """Values to try per knob; `None` means `auto` (rule applied against the job), `()` never happens."""

    micro_batch_size: tuple[int, ...] | None = None
    """None = powers of two up to max_micro_batch_size, plus the user's own value."""
    tensor_parallel: tuple[int, ...] | None = None
    """None = powers of two up to max_tensor_parallel (GPUs per node when unset)."""
    pipeline_parallel: tuple[int, ...] | None = None
    """None = every divisor of world / (tp * cp)."""
    virtual_pipeline: tuple[int, ...] | None = None
    """None = 1..max_virtual_pipeline (layers must split evenly; the validity rules decide)."""
    context_parallel: tuple[int, ...] | None = (1,)
    sequence_parallel: tuple[bool, ...] | None = None
    """None = on and off where TP > 1 (off only at TP = 1)."""
    expert_parallel: tuple[int, ...] | None = None
    """None = every divisor of num_experts (MoE models under Megatron-LM; dense models and other frameworks
    keep the command's EP)."""
    expert_tensor_parallel: tuple[int, ...] | None = None
    """None = the command's own (by default expert TP follows TP); a list adds pinned values (MoE models under
    Megatron-LM only; others keep the command's)."""
    recompute: tuple[str, ...] = ("none", "selective", "full")
    recompute_block_layers: tuple[int, ...] | None = None
    """Only with `block` in recompute; None = 1/4, 1/2, 3/4 of the layers per pipeline stage."""
    distributed_optimizer: tuple[bool, ...] = (False, True)
    zero_stage: tuple[int, ...] = (0, 1, 2, 3)
    memory_margin: float = 0.05
    """A candidate fits when its must-fit bytes <= (1 - memory_margin) * GPU capacity (schedule/memory_rule.py)."""
    max_micro_batch_size: int = 16
    max_tensor_parallel: int | None = None
    max_virtual_pipeline: int = 8
    source: str = "built-in defaults"
    """The file this space was read from, for messages."""


def default_search_file(framework: str) -> Path:
    """The shipped space for a framework: plain DeepSpeed gets `deepspeed.yaml`, everything else `megatron.yaml`."""
    name = "deepspeed.yaml" if framework in ("deepspeed", "hf-deepspeed", "torch") else "megatron.yaml"
    return configs_dir() / "search" / name


def read_search_file(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not (p.is_file() or p.is_fifo()):  # a pipe is read like a file: `--search <(printf 'micro_batch_size: [2]')`
        what = "a folder, not a file" if p.is_dir() else "no such file" if not p.exists() else \
            "a device, not a file or a pipe"  # /dev/zero never ends
        raise UsageError(f"--search {path}: {what}. Give a YAML search space (see configs/search/megatron.yaml).")
    try:
        raw = yaml.load(p.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)  # safe_load's loader, keys unique
    except OSError as err:  # unreadable (permissions, a vanished file): the reason, not a traceback
        raise UsageError(f"--search {path}: cannot read it ({err.strerror or err}). Make it readable, or drop --search.") \
            from None
    except yaml.YAMLError as err:
        raise UsageError(f"--search {path}: not valid YAML ({_yaml_problem(err)}). Fix the file or drop --search.") \
            from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise UsageError(f"--search {path}: expected a mapping of knob: [values] | auto, got {type(raw).__name__}.")
    return raw


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load's loader that refuses a key given twice in one mapping (YAML 1.2 requires unique keys; PyYAML
    keeps the last silently, so `micro_batch_size` written twice searched only the second list)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: flatten_mapping merges it (keys given win)
                continue
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):  # a list as a key: PyYAML's own 'found unhashable key' below
                continue
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} given twice (each knob once)",
                                                        key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _yaml_problem(err: yaml.YAMLError) -> str:
    """PyYAML's message on one line: 'line L, column C: problem' (its own text spans several lines, with the
    offending line quoted and a caret under it, which breaks the one-paragraph error)."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or " ".join(str(err).split())
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}{problem}"


def load_search_space(path: str | Path | None, framework: str, raw: Mapping[str, Any] | None = None) -> SearchSpace:
    """The user's `--search FILE` layered over the shipped default for this framework; `raw` is the file already
    read (read_search_file), so a pipe (`--search <(...)`) is read once."""
    default_path = default_search_file(framework)
    merged = dict(read_search_file(default_path))
    origin = str(default_path)
    if path is not None:
        asked = read_search_file(path) if raw is None else raw
        merged.update(asked)
        origin = str(path) if sets_a_knob(asked) else f"{default_path} ({path} sets no knob)"
    return parse_search_space(merged, origin)


def sets_a_knob(raw: Mapping[str, Any]) -> bool:
    """Whether a `--search` file's mapping (read_search_file) gives any key besides `name` / `description`: an empty
    file, one of comments only (`# micro_batch_size: [2]`) or a bare `name:` changes nothing, so the shipped space is
    searched, and tune says so (an empty `--search <(cmd)` of a failed command was taken without a word)."""
    return any(key not in _LABELS for key in raw)


_LABELS = ("name", "description")
"""Keys of a search file that label it and set no knob."""


def no_knob_note(path: str | Path, framework: str) -> str:
    """The warning for a `--search` file that sets no knob (sets_a_knob)."""
    return (f"--search {path} sets no knob (it is empty, or only comments / name / description), so the shipped space "
            f"{default_search_file(framework)} is searched as is; give keys such as 'micro_batch_size: [1, 2, 4]' "
            "to narrow or widen it, or drop --search.")


def parse_search_space(raw: Mapping[str, Any], origin: str = "search space") -> SearchSpace:
    not_names = [k for k in raw if not isinstance(k, str)]
    if not_names:  # `1: [2]` or `true: auto` reads as a number / boolean key, which no knob is
        raise UsageError(f"{origin}: key(s) {', '.join(repr(k) for k in not_names)} are not knob names (YAML read them as "
                         f"{', '.join(sorted({type(k).__name__ for k in not_names}))}). Write each key as a knob name, "
                         "e.g. 'micro_batch_size: [1, 2, 4]' (each documented in configs/search/megatron.yaml).")
    unknown = sorted(set(raw) - set(_KNOBS) - set(_SCALARS) - set(_LABELS))
    if unknown:
        known = sorted([*_KNOBS, *_SCALARS])
        raise UsageError(f"{origin}: unknown key(s) {', '.join(_with_nearest(k, known) for k in unknown)}. Known keys: "
                         f"{', '.join(known)} (each documented in configs/search/megatron.yaml). Fix or remove the key.")
    values: dict[str, Any] = {"source": origin}
    for key, (kind, what) in _KNOBS.items():
        if key in raw:
            values[key] = _parse_knob(raw[key], kind, f"{origin}: {key} ({what})")
            if values[key] is None and key in _AUTO_ALL:  # `auto` for a knob without a rule: every value
                values[key] = _AUTO_ALL[key]
    for key, (kind, what) in _SCALARS.items():
        if key in raw and raw[key] is not None:
            values[key] = _parse_scalar(raw[key], kind, f"{origin}: {key} ({what})", scalar=True)
    space = SearchSpace(**values)
    _check_space(space, origin)
    return space


def _with_nearest(key: str, known: list[str]) -> str:
    """'pipline_parallel (did you mean pipeline_parallel?)' for a misspelt key; the key alone when nothing is close."""
    import difflib

    close = difflib.get_close_matches(key, known, n=1)
    return f"{key} (did you mean {close[0]}?)" if close else key


_AUTO_ALL: dict[str, tuple] = {
    "recompute": RECOMPUTE_MODES,
    "distributed_optimizer": (False, True),
    "zero_stage": (0, 1, 2, 3),
}
"""Knobs whose `auto` means "try every value" (their SearchSpace fields have no None rule; `auto` was an
internal error)."""


def _parse_knob(value: Any, kind: type, where: str) -> tuple | None:
    if value == AUTO:
        return None
    items = value if isinstance(value, list) else [value]
    if not items:
        raise UsageError(f"{where}: empty list. Give at least one value, or `auto`.")
    return tuple(_parse_scalar(v, kind, where) for v in items)


def _parse_scalar(value: Any, kind: type, where: str, scalar: bool = False) -> Any:
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        ok, value = True, float(value)
    if not ok:
        what = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}[kind]
        use = f"Use {what}." if scalar else f"Use {what}, a list of them, or `auto`."
        raise UsageError(f"{where}: {value!r} is not {what}. {use}")
    return value


def _check_space(space: SearchSpace, origin: str) -> None:
    for key in ("micro_batch_size", "tensor_parallel", "pipeline_parallel", "virtual_pipeline",
                "context_parallel", "recompute_block_layers", "expert_parallel", "expert_tensor_parallel"):
        vals = getattr(space, key)
        if vals is not None and any(v < 1 for v in vals):
            raise UsageError(f"{origin}: {key} values must be >= 1, got {list(vals)}. Use positive integers "
                             f"(e.g. [1, 2, 4]) or `auto`.")
    for key in ("max_micro_batch_size", "max_tensor_parallel", "max_virtual_pipeline"):
        value = getattr(space, key)
        if value is not None and value < 1:
            raise UsageError(f"{origin}: {key} {value} must be >= 1 (the largest value `auto` tries). Give a positive "
                             "integer, or leave the key out for the default.")
    bad = [m for m in space.recompute if m not in RECOMPUTE_MODES]
    if bad:
        raise UsageError(f"{origin}: recompute mode(s) {bad} unknown; use {', '.join(RECOMPUTE_MODES)}.")
    if any(z not in (0, 1, 2, 3) for z in space.zero_stage):
        raise UsageError(f"{origin}: zero_stage values must be 0-3, got {list(space.zero_stage)}. Use ZeRO stages "
                         "from 0, 1, 2, 3 (DeepSpeed's zero_optimization.stage), or `auto` for all four.")
    if not 0.0 <= space.memory_margin < 0.9:
        raise UsageError(f"{origin}: memory_margin {space.memory_margin} must be in [0, 0.9) (a fraction of capacity, "
                         "e.g. 0.05 keeps 5 % of the GPU's memory free).")


_MEGATRON_ONLY = ("tensor_parallel", "pipeline_parallel", "sequence_parallel", "max_tensor_parallel")
_CORE_ONLY = ("virtual_pipeline", "max_virtual_pipeline", "context_parallel", "distributed_optimizer")
_PINNED: dict[str, tuple[str, ...]] = {
    # What tune/candidates.knob_values keeps at the command's own value, per framework.
    "megatron": ("zero_stage",),
    "megatron-deepspeed": (*_CORE_ONLY, "expert_parallel", "expert_tensor_parallel"),
    "deepspeed": (*_MEGATRON_ONLY, *_CORE_ONLY, "expert_parallel", "expert_tensor_parallel", "recompute",
                  "recompute_block_layers"),
    "hf-deepspeed": (*_MEGATRON_ONLY, *_CORE_ONLY, "expert_parallel", "expert_tensor_parallel", "recompute_block_layers"),
    "torch": (*_MEGATRON_ONLY, *_CORE_ONLY, "expert_parallel", "expert_tensor_parallel", "recompute",
              "recompute_block_layers", "zero_stage"),
}


def ignored_knobs(path: str | Path, framework: str, num_experts: int,
                  raw: Mapping[str, Any] | None = None, searched: frozenset[str] = frozenset()) -> list[str]:
    """Keys of the user's `--search FILE` (`raw`: the file already read) that this framework's launch command cannot
    change (kept as the command has them), one note each, so a widened knob that does nothing is not silent;
    `searched`: knobs this command changes although its framework usually does not (a Trainer's
    --gradient_checkpointing under DDP / FSDP)."""
    raw = read_search_file(path) if raw is None else raw
    pinned = set(_PINNED.get(framework, ())) - searched
    if num_experts <= 0:
        pinned |= {"expert_parallel", "expert_tensor_parallel"}
    keys = [k for k in raw if k in pinned and raw[k] is not None]
    return [f"{path}: {k} is not searched for a {framework} command (the command's own value is kept: "
            f"{_why_pinned(k, framework)})" for k in keys]


def _why_pinned(key: str, framework: str) -> str:
    if key == "context_parallel" and framework != "torch":  # Megatron-DeepSpeed, DeepSpeed and HF scripts
        return ("the sequence split there is DeepSpeed-Ulysses (--ds-sequence-parallel-size / ds_config "
                "sequence_parallel_size), which predict prices as context parallelism's ring exchange, not as its "
                "all-to-alls run, so tune does not rank its sizes")
    return _WHY.get(key, "the framework has no such setting in its launch command")


_WHY = {
    "zero_stage": "ZeRO is a DeepSpeed setting; Megatron-LM shards optimizer state with distributed_optimizer",
    "expert_parallel": "dense model, or EP is set in the script's own code",
    "expert_tensor_parallel": "dense model, or expert TP is set in the script's own code",
}
