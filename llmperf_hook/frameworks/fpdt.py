"""Megatron-DeepSpeed's FPDT (Fully Pipelined Distributed Transformer, --ds-sequence-parallel-fpdt): what it refuses at
its first step, and the one warning for what llmperf does not price.

FPDT runs DeepSpeed-Ulysses in chunks (deepspeed/sequence/fpdt_layer.py, 0.19.8; Megatron-DeepSpeed 4efb479
megatron/model/transformer.py and gpt_model.py). For a sequence S over SP ranks (S / SP tokens per rank) and
--ds-sequence-parallel-fpdt-chunk-size C (default 65536):
- attention: FPDT_Attention.forward takes S // C chunks (num_chunks_attn = local tokens * SP // C), and
  _FPDTGPUAttentionImpl_ asserts that they divide the S / SP local tokens (S < C divides by zero);
- MLP: FPDT_FFN runs chunks of C // SP // 2 local tokens and asserts they divide S / SP;
- input: FPDT_InputConstruct (pretrain_gpt.py's batch) asserts S % SP == 0 and S % C == 0;
- loss: FPDT_LogitsLoss runs num_chunks_ce = (S / SP) // (C // SP // 32) chunks and asserts they divide S / SP.
The chunks hold the same FLOPs as one Ulysses pass (each query chunk against the key chunks up to it, causal on the
diagonal); what differs is memory (never the whole sequence's QKV, MLP intermediate or logits at once; with
--ds-sequence-parallel-fpdt-offloading the chunks wait in host memory) and the per-chunk all-to-alls and copies.
"""

from __future__ import annotations

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.flags import FlagValues

FPDT_FLAGS = ("ds_sequence_parallel_fpdt_chunk_size", "ds_sequence_parallel_fpdt_offloading")
DEFAULT_CHUNK = 65536
"""megatron/arguments.py --ds-sequence-parallel-fpdt-chunk-size default."""


def _refuse(rule: str, seq: int, sp: int, chunk: int) -> ConfigError:
    return ConfigError(f"--ds-sequence-parallel-fpdt with --seq-length {seq}, --ds-sequence-parallel-size {sp} and "
                       f"--ds-sequence-parallel-fpdt-chunk-size {chunk}: {rule}, so the first step fails "
                       "(deepspeed/sequence/fpdt_layer.py). Pick a chunk size that divides the sequence into chunks "
                       "that divide the per-rank sequence, e.g. a power of two between 64 * SP and the sequence length.")


def fpdt_chunks(seq: int, sp: int, chunk: int) -> tuple[int, int, int]:
    """(attention chunks, MLP chunks, loss chunks) FPDT runs per layer and step; ConfigError where it fails."""
    local = seq // sp
    if seq % sp or seq % chunk:
        raise _refuse(f"the input split needs the sequence divisible by the SP size and by the chunk size ({seq} % {sp} "
                      f"= {seq % sp}, {seq} % {chunk} = {seq % chunk}; FPDT_InputConstruct asserts)", seq, sp, chunk)
    attn = seq // chunk
    if attn == 0 or local % attn:
        raise _refuse(f"attention runs {seq} // {chunk} = {attn} chunks, which must divide the {local} tokens per rank "
                      "(FPDT_Attention / _FPDTGPUAttentionImpl_ assert)", seq, sp, chunk)
    ffn_len = chunk // sp // 2
    if ffn_len == 0 or local % ffn_len:
        raise _refuse(f"the MLP runs chunks of {chunk} // {sp} // 2 = {ffn_len} tokens, which must divide the {local} "
                      "tokens per rank (FPDT_FFN assert)", seq, sp, chunk)
    ce_len = chunk // sp // 32
    ce = local // ce_len if ce_len else 0
    if ce == 0 or local % ce:
        raise _refuse(f"the loss runs {local} // ({chunk} // {sp} // 32) = {ce} chunks, which must divide the {local} "
                      "tokens per rank (FPDT_LogitsLoss assert)", seq, sp, chunk)
    return attn, local // ffn_len, ce


def fpdt_warnings(flags: FlagValues) -> list[str]:
    """The one FPDT warning (or ConfigError for what its first step refuses); its chunk flags alone have no effect."""
    given = [flags.seen_flags[name] for name in FPDT_FLAGS if flags.has(name) and flags.get(name)]
    if not flags.get("ds_sequence_parallel_fpdt"):
        return [f"{', '.join(given)}: no effect without --ds-sequence-parallel-fpdt"] if given else []
    seq, sp = int(flags.get("seq_length") or 0), int(flags.get("ds_sequence_parallel_size") or 1)
    chunk = int(flags.get("ds_sequence_parallel_fpdt_chunk_size") or DEFAULT_CHUNK)
    attn, ffn, ce = fpdt_chunks(seq, sp, chunk)
    offload = flags.get("ds_sequence_parallel_fpdt_offloading") and attn > 1  # FPDT_Attention: offloads past 1 chunk
    return [f"--ds-sequence-parallel-fpdt: FPDT's chunked Ulysses ({attn} attention chunks, {ffn} MLP and {ce} loss "
            "chunks per layer and micro-batch) priced as one Ulysses pass over the sequence: the same FLOPs, but its "
            "per-chunk all-to-alls and kernels" + (", the copies of the chunks to and from host memory "
                                                  "(--ds-sequence-parallel-fpdt-offloading)" if offload else "")
            + " are not timed, and its smaller activation and logits memory (never the whole sequence at once) is "
            "not modelled: peak memory is overestimated"]
