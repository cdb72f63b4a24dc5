"""MoE dispatch and un-permute in Gluon with the AMD Tensor Data Mover (TDM) of gfx1250.

TDM moves a 2-D block between global and shared memory by descriptor, asynchronously; its gather
and scatter modes take a vector of row indices (int32: up to 8 rows per instruction, more rows
become several instructions). Each program moves BLOCK_R rows x BLOCK_C columns:
- `tdm_gather_rows_kernel`: async_gather src rows idx[r] into shared memory, async_store the block
  to out[r] (contiguous): MoE dispatch, out[r, :] = src[idx[r], :].
- `tdm_scatter_rows_kernel`: async_load contiguous rows of y into shared memory, async_scatter
  them to out[pos[r]]: MoE un-permute (expert-sorted rows back to token order), out[pos[r], :] =
  y[r, :], with pos a permutation (every output row written once).

Build-only: nobody here has gfx1250 hardware; the cases track compile statistics. Only the
builder imports this file.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.amd.cdna5 import tdm


@gluon.jit
def tdm_gather_rows_kernel(
    # pointers
    src_ptr, idx_ptr, out_ptr,
    # sizes
    SRC_ROWS, ROWS, COLS,
    # meta-parameters
    BLOCK_R: gl.constexpr, BLOCK_C: gl.constexpr,
):
    NUM_WARPS: gl.constexpr = gl.num_warps()
    # shared rows padded by 8 elements (16 bytes): TDM store/scatter want the pad interval = a row
    SHARED: gl.constexpr = gl.PaddedSharedLayout.with_identity_for([[BLOCK_C, 8]], [BLOCK_R, BLOCK_C], [1, 0])
    BLOCKED: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [1, NUM_WARPS], [1, 0])
    ROW_LAYOUT: gl.constexpr = gl.SliceLayout(1, BLOCKED)

    pid_r = gl.program_id(0)
    pid_c = gl.program_id(1)
    rows = pid_r * BLOCK_R + gl.arange(0, BLOCK_R, layout=ROW_LAYOUT)
    src_rows = gl.load(idx_ptr + rows, mask=rows < ROWS, other=0).to(gl.int32)

    src_desc = tdm.make_tensor_descriptor(base=src_ptr, shape=(SRC_ROWS, COLS), strides=(COLS, 1),
                                          block_shape=(BLOCK_R, BLOCK_C), layout=SHARED)
    out_desc = tdm.make_tensor_descriptor(base=out_ptr, shape=(ROWS, COLS), strides=(COLS, 1),
                                          block_shape=(BLOCK_R, BLOCK_C), layout=SHARED)
    buf = gl.allocate_shared_memory(src_desc.dtype, src_desc.block_shape, src_desc.layout)
    src_desc = tdm.update_tensor_descriptor(src_desc, add_offsets=[0, pid_c * BLOCK_C], clamp_bounds=True)
    tdm.async_gather(src_desc, src_row_indices=src_rows, dst=buf)
    tdm.async_wait(0)
    tdm.async_store(out_desc, [pid_r * BLOCK_R, pid_c * BLOCK_C], buf)
    tdm.async_wait(0)


@gluon.jit
def tdm_scatter_rows_kernel(
    # pointers
    y_ptr, pos_ptr, out_ptr,
    # sizes
    ROWS, COLS,
    # meta-parameters
    BLOCK_R: gl.constexpr, BLOCK_C: gl.constexpr,
):
    NUM_WARPS: gl.constexpr = gl.num_warps()
    # shared rows padded by 8 elements (16 bytes): TDM store/scatter want the pad interval = a row
    SHARED: gl.constexpr = gl.PaddedSharedLayout.with_identity_for([[BLOCK_C, 8]], [BLOCK_R, BLOCK_C], [1, 0])
    BLOCKED: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [1, NUM_WARPS], [1, 0])
    ROW_LAYOUT: gl.constexpr = gl.SliceLayout(1, BLOCKED)

    pid_r = gl.program_id(0)
    pid_c = gl.program_id(1)
    rows = pid_r * BLOCK_R + gl.arange(0, BLOCK_R, layout=ROW_LAYOUT)
    dst_rows = gl.load(pos_ptr + rows, mask=rows < ROWS, other=0).to(gl.int32)

    y_desc = tdm.make_tensor_descriptor(base=y_ptr, shape=(ROWS, COLS), strides=(COLS, 1),
                                        block_shape=(BLOCK_R, BLOCK_C), layout=SHARED)
    out_desc = tdm.make_tensor_descriptor(base=out_ptr, shape=(ROWS, COLS), strides=(COLS, 1),
                                          block_shape=(BLOCK_R, BLOCK_C), layout=SHARED)
    buf = gl.allocate_shared_memory(y_desc.dtype, y_desc.block_shape, y_desc.layout)
    tdm.async_load(y_desc, [pid_r * BLOCK_R, pid_c * BLOCK_C], buf)
    tdm.async_wait(0)
    out_desc = tdm.update_tensor_descriptor(out_desc, add_offsets=[0, pid_c * BLOCK_C], clamp_bounds=True)
    tdm.async_scatter(out_desc, dst_row_indices=dst_rows, src=buf)
    tdm.async_wait(0)
