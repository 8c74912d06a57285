"""Megatron-Core's custom pipeline layout (--pipeline-model-parallel-layout), read and checked as Megatron does.

Source: megatron/core/transformer/pipeline_parallel_layer_layout.py (PipelineParallelLayerLayout). The string
lists the PP x VPP stages in model order, split by "|": E = embedding, t = transformer (decoder) layer,
m = MTP layer, L = loss; commas are cosmetic; "(...)*n" and "x*n" repeat. Stage i runs on pipeline rank
i % PP as its virtual stage i // PP, the order in which graph/stages.py numbers model chunks
(chunk v = vchunk * PP + stage). arguments.py sets the virtual pipeline size to stages / PP.
"""

from __future__ import annotations

import re

from llmperf_hook.errors import ConfigError

LAYER_CHARS = {"E": "embedding", "L": "loss", "t": "decoder", "m": "mtp"}
"""parse_str_to_list's char2layer_type."""


def layout_stages(layout: str) -> tuple[str, ...]:
    """The stages of a layout string, unrolled (parse_str_to_list: commas dropped, "(..)*n" then "x*n" unrolled,
    "|" splits); ConfigError on a character Megatron does not know."""
    text = layout.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        text = re.sub(pattern, lambda m: m.group(1) * int(m.group(2)), text)
    stages = tuple(text.split("|"))
    bad = sorted({c for stage in stages for c in stage if c not in LAYER_CHARS})
    if bad:
        raise ConfigError(f"--pipeline-model-parallel-layout {layout!r} has the character(s) {', '.join(map(repr, bad))}; "
                          f"Megatron asserts 'Invalid layer character' (known: E embedding, t transformer layer, m MTP "
                          "layer, L loss; '|' splits stages, '(..)*n' and 'x*n' repeat, commas are ignored). Fix the layout.")
    return stages


def layout_num_stages(layout: str) -> int:
    """PP x VPP stages of a layout string (get_num_stages_from_str)."""
    return len(layout_stages(layout))


def layout_layers_per_stage(layout: str) -> tuple[int, ...]:
    """Transformer layers of each stage, in model order (the chunk order of graph/stages.py)."""
    return tuple(stage.count("t") for stage in layout_stages(layout))


def check_layout(layout: str, pp: int, num_layers: int, mtp_num_layers: int) -> None:
    """PipelineParallelLayerLayout.__init__ and validate_layer_layout (called by TransformerConfig): ConfigError
    for what Megatron asserts."""
    stages = layout_stages(layout)
    if len(stages) % pp:
        _refuse(layout, f"has {len(stages)} stages, not a multiple of pipeline-model-parallel-size {pp}",
                "'pipeline_model_parallel_layout must be divisible by pipeline_model_parallel_size'")
    flat = "".join(stages)
    counts = {c: flat.count(c) for c in LAYER_CHARS}
    rules = [
        (flat[:1] != "E" or counts["E"] != 1, "must begin with the embedding E, given once",
         "'The first layer must be embedding' / 'Embedding must be specified exactly once'"),
        (flat[-1:] != "L" or counts["L"] != 1, "must end with the loss L, given once",
         "'The last layer must be loss' / 'Loss must be specified exactly once'"),
        (counts["t"] != num_layers, f"places {counts['t']} transformer layers (t) but --num-layers is {num_layers}",
         "'Number of decoder layers ... must match num_layers'"),
        (counts["m"] != mtp_num_layers, f"places {counts['m']} MTP layers (m) but --mtp-num-layers is {mtp_num_layers}",
         "'Number of mtp layers in layout must match mtp_num_layers'"),
        ("m" in flat and "t" in flat[flat.index("m"):], "places a transformer layer after an MTP layer",
         "'decoder layers must be placed before MTP layers'"),
    ]
    for broken, what, quote in rules:
        if broken:
            _refuse(layout, what, quote)
    vpp = len(stages) // pp
    holding = [i for i, stage in enumerate(stages) if "m" in stage]
    if any(i // pp != vpp - 1 for i in holding) or len(holding) > 1:
        _refuse(layout, "places MTP layers outside one stage that is its rank's last virtual stage",
                "'MTP should be always in the last virtual pipeline stage of that rank' / 'All of the MTP layers must "
                "be in the same one virtual pipeline stage'")


def _refuse(layout: str, what: str, quote: str) -> None:
    raise ConfigError(f"--pipeline-model-parallel-layout {layout!r} {what}: Megatron asserts {quote} "
                      "(pipeline_parallel_layer_layout.py). Fix the layout.")
