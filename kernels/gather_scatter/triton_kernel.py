"""Row gather and segmented row sums in Triton: MoE dispatch, MoE combine, embedding lookup.

Three kernels, each a memory-bound row copy at heart (bf16 rows, index vectors in int32):
- `gather_rows_kernel`: out[r, :] = src[idx[r], :]. MoE dispatch (token rows copied into the
  expert-sorted buffer) and embedding lookup (vocabulary rows by token id) are this kernel.
- `combine_rows_kernel`: out[t, :] = sum_j w[t*K + j] * y[pos[t*K + j], :], fp32 accumulation.
  MoE combine as a sorted segmented reduction: the K slots of token t are contiguous in token order,
  `pos` points at each slot's row in the expert-sorted buffer. Every output row is written by one
  program (no atomics, deterministic, and it needs no zeroed output: the runner poisons outputs).

Only the builder imports this file (its compile worker loads it by path from the suite copy).
"""

import triton
import triton.language as tl


@triton.jit
def gather_rows_kernel(
    # pointers
    src_ptr, idx_ptr, out_ptr,
    # sizes
    ROWS, COLS,
    # meta-parameters
    BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
):
    # -- this program copies a BLOCK_R x BLOCK_C tile of out --
    pid_r = tl.program_id(axis=0)
    pid_c = tl.program_id(axis=1)
    rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    row_ok = rows < ROWS
    # -- the source row of each output row (int64 offsets: vocabularies pass 2^31 elements) --
    src_rows = tl.load(idx_ptr + rows, mask=row_ok, other=0).to(tl.int64)
    mask = row_ok[:, None] & (cols[None, :] < COLS)
    values = tl.load(src_ptr + src_rows[:, None] * COLS + cols[None, :], mask=mask)
    tl.store(out_ptr + rows.to(tl.int64)[:, None] * COLS + cols[None, :], values, mask=mask)


@triton.jit
def combine_rows_kernel(
    # pointers
    y_ptr, pos_ptr, w_ptr, out_ptr,
    # sizes
    TOKENS, COLS,
    # meta-parameters
    TOP_K: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr,
):
    # -- this program reduces the TOP_K slots of BLOCK_T tokens over BLOCK_C columns --
    pid_t = tl.program_id(axis=0)
    pid_c = tl.program_id(axis=1)
    tokens = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    tok_ok = tokens < TOKENS
    mask = tok_ok[:, None] & (cols[None, :] < COLS)
    acc = tl.zeros((BLOCK_T, BLOCK_C), dtype=tl.float32)
    for j in tl.static_range(TOP_K):
        slot = tokens * TOP_K + j
        rows = tl.load(pos_ptr + slot, mask=tok_ok, other=0).to(tl.int64)
        weight = tl.load(w_ptr + slot, mask=tok_ok, other=0.0).to(tl.float32)
        values = tl.load(y_ptr + rows[:, None] * COLS + cols[None, :], mask=mask, other=0.0)
        acc += weight[:, None] * values.to(tl.float32)
    tl.store(out_ptr + tokens.to(tl.int64)[:, None] * COLS + cols[None, :], acc.to(out_ptr.dtype.element_ty), mask=mask)
