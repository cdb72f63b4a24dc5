"""Convolution forward in Triton, NHWC, bf16 in/out, fp32 accumulate.

- `conv2d_implicit_gemm_kernel`: the convolution as a GEMM that is never materialized (implicit
  GEMM): rows are output pixels (n, p, q) -> M = N * P * Q, columns are output channels K, and the
  reduction runs over (r, s, c) -> R * S * C. Each program computes one BLOCK_M x BLOCK_N tile of Y,
  gathering its A tile from X on the fly (padding = masked loads of zero) and reading W [K, R, S, C]
  (cuDNN's NHWC filter layout, KRSC) as B^T. Grouped program order for L2 reuse, as in the GEMM.
- `conv2d_depthwise_kernel`: one filter per channel (groups = C), a direct kernel: each program
  computes BLOCK_P output pixels x BLOCK_C channels, summing R x S shifted loads times the channel's
  taps. Depthwise is memory-bound (9 multiply-adds per loaded element): no tensor cores.

Layouts: X [N, H, W, C], Y [N, P, Q, K]; W [K, R, S, C] (depthwise: [C, R, S]).
Only the builder imports this file (loaded by path from the suite copy).
"""

import triton
import triton.language as tl


@triton.jit
def conv2d_implicit_gemm_kernel(
    # pointers
    x_ptr, w_ptr, y_ptr,
    # sizes: input N x H x W x C, filter K x R x S x C, output N x P x Q x K
    N, H, W, C, K, P, Q,
    # geometry
    STRIDE: tl.constexpr, PAD: tl.constexpr, R: tl.constexpr, S: tl.constexpr,
    # meta-parameters
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    # -- which tile of Y (grouped ordering, as in the GEMM) --
    pid = tl.program_id(0)
    M = N * P * Q
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(K, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    # -- rows: output pixels (n, p, q) and the input corner each one's window starts at --
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_ok = offs_m < M
    n = offs_m // (P * Q)
    pq = offs_m % (P * Q)
    h0 = (pq // Q) * STRIDE - PAD
    w0 = (pq % Q) * STRIDE - PAD
    x_row = x_ptr + n.to(tl.int64) * H * W * C
    # -- columns: output channels --
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < K
    RSC = R * S * C

    # -- walk the reduction (r, s, c) in BLOCK_K steps, accumulating in fp32 --
    accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, RSC, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_ok = offs_k < RSC
        r = offs_k // (S * C)
        s = (offs_k // C) % S
        c = offs_k % C
        h = h0[:, None] + r[None, :]
        w = w0[:, None] + s[None, :]
        a_ok = m_ok[:, None] & k_ok[None, :] & (h >= 0) & (h < H) & (w >= 0) & (w < W)
        a = tl.load(x_row[:, None] + (h * W + w) * C + c[None, :], mask=a_ok, other=0.0)
        b = tl.load(w_ptr + offs_n[None, :] * RSC + offs_k[:, None], mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        accumulator = tl.dot(a, b, accumulator)

    # -- write the tile of Y [M, K] --
    y_ptrs = y_ptr + offs_m.to(tl.int64)[:, None] * K + offs_n[None, :]
    tl.store(y_ptrs, accumulator.to(tl.bfloat16), mask=m_ok[:, None] & n_ok[None, :])


@triton.jit
def conv2d_depthwise_kernel(
    # pointers
    x_ptr, w_ptr, y_ptr,
    # sizes: input N x H x W x C, filter C x R x S, output N x P x Q x C
    N, H, W, C, P, Q,
    # geometry
    STRIDE: tl.constexpr, PAD: tl.constexpr, R: tl.constexpr, S: tl.constexpr,
    # meta-parameters
    BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr,
):
    # -- which pixels (flattened n, p, q) and channels --
    offs_pix = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    pix_ok = offs_pix < N * P * Q
    c_ok = offs_c < C
    n = offs_pix // (P * Q)
    pq = offs_pix % (P * Q)
    h0 = (pq // Q) * STRIDE - PAD
    w0 = (pq % Q) * STRIDE - PAD
    x_row = x_ptr + n.to(tl.int64) * H * W * C

    # -- R x S taps, each a shifted load times the channel's weight --
    accumulator = tl.zeros((BLOCK_P, BLOCK_C), dtype=tl.float32)
    for r in tl.static_range(R):
        for s in tl.static_range(S):
            h = h0 + r
            w = w0 + s
            ok = pix_ok & (h >= 0) & (h < H) & (w >= 0) & (w < W)
            x = tl.load(x_row[:, None] + ((h * W + w) * C)[:, None] + offs_c[None, :],
                        mask=ok[:, None] & c_ok[None, :], other=0.0)
            tap = tl.load(w_ptr + offs_c * (R * S) + r * S + s, mask=c_ok, other=0.0)
            accumulator += x.to(tl.float32) * tap.to(tl.float32)[None, :]

    y_ptrs = y_ptr + offs_pix.to(tl.int64)[:, None] * C + offs_c[None, :]
    tl.store(y_ptrs, accumulator.to(tl.bfloat16), mask=pix_ok[:, None] & c_ok[None, :])
