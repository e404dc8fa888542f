"""llama.cpp's compute buffer: the bytes its graph allocator reserves for the largest step.

llama.cpp reserves the graph of a full ubatch (n_ubatch tokens, every one an output) and keeps the
peak of what is alive at once. Which tensors those are depends on where the peak falls: at an
attention layer (without flash attention, the KQ matrix: every head's scores of every token against
every cell of its KV stream, in f32, beside the mask), at the FFN, at the output head (the logits of
every token), or, on a hybrid, at a recurrent layer (each sequence's state read, updated and
written). Each candidate is a count of f32 values per ubatch token, from the shape; the terms
beside the big ones were matched against llama.cpp's own reports (`sched_reserve: CPU compute
buffer size`) at this commit, over the models we have (SmolLM2, the demo llama, the demo and tiny
qwen35): within 5% at 442 of 460 settings swept (lanes 1-8, context 2,048-8,192, n_batch 64-2,048,
flash attention on and off, unified and split KV, f16, q8_0 and q4_0), within 11% at all (the worst
at 64-token batches on the hybrid, where a few MB of recurrent state traffic are a large part).
tests/runtime/planning holds the plan to 5% at the settings a user meets.
"""

from __future__ import annotations

from swarm_panel.runtime.planning.shape import ModelShape

F32 = 4


def compute_buffer_bytes(shape: ModelShape, ubatch: int, kv_stream_cells: int, sequences: int,
                         flash_attn: bool, unified_quantized_kv: bool = False) -> int:
    """`kv_stream_cells`: cells one attention reads (a split stream's share, or the whole unified pool);
    `unified_quantized_kv`: one pool of q8_0 or q4_0 cells."""
    d, ff = shape.n_embd, shape.n_ff
    q, kv = shape.n_head * shape.head_dim_k, 2 * shape.n_embd_k_gqa
    # The KQ mask, one value per token and cell: f16 for flash attention, f32 otherwise (in f32 units).
    mask = kv_stream_cells / 2 if flash_attn else kv_stream_cells
    # The hybrid's graph keeps one model width fewer alive beside the FFN, and a few more scalars.
    width, tail = (3, 10) if shape.hybrid else (4, 6)
    if flash_attn:
        # Flash attention over one pool of quantized cells keeps a model width fewer alive (measured;
        # split streams do not).
        attention = mask + (width - (unified_quantized_kv and not shape.hybrid)) * d + 3 * ff + tail
    elif shape.hybrid:
        attention = kv_stream_cells * shape.n_head + mask + 5 * d + q + kv + 8
    else:
        attention = kv_stream_cells * shape.n_head + mask + 3 * d + 2 * q + kv
    ffn = attention if flash_attn else mask + 3 * ff + (width + 1) * d + tail + shape.ssm_inner
    output = shape.n_vocab + 3 * d + 4
    peak = ubatch * F32 * max(attention, ffn, output)
    if shape.hybrid:
        # Each sequence's state read, updated and written back, beside the step's conv inputs and mask.
        states = 3 * sequences * shape.ssm_state * shape.ssm_inner * F32
        peak = max(peak, states + ubatch * F32 * (shape.conv_channels + shape.ssm_inner + mask))
    return int(peak)
