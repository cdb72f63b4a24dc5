"""Flash attention forward in Triton: O = softmax(Q K^T * scale [+ causal mask]) V, bf16 in/out, fp32
accumulate, grouped-query attention (GQA: query head h reads KV head h // (H_Q // H_KV)).

Two kernels, after Triton's tutorial 06-fused-attention:
- `attn_fwd_kernel` (prefill): one program per BLOCK_M query rows of one (batch, query head); it walks
  the keys in BLOCK_N steps with an online softmax (running max m_i and sum l_i, in base 2). Causal
  programs stop at their diagonal block: the blocks left of it need no mask, the diagonal one does.
  Programs for the longest rows (last query blocks) start first, so the causal tail is short.
- `attn_decode_kernel` (flash decoding, split-K, one launch): one query token per head against a long
  KV cache. Each program takes one KV head, all the query heads that share it (packed as rows of one
  dot, so K/V are read once for the group) and one chunk of the keys; it writes its partial (m, l,
  acc) to a workspace, then counts itself in on a per-head semaphore; the last program of a head
  combines the partials and resets the semaphore to zero, so the next launch finds it as it was.

Layouts are contiguous: Q, O [B, H_Q, N_Q, HEAD_DIM]; K, V [B, H_KV, N_KV, HEAD_DIM]. Sequence
lengths are multiples of the blocks (the cases guarantee it), so K/V loads carry no bounds masks.
Only the builder imports this file (loaded by path from the suite copy); the shapes, tile table,
launch, reference and FLOP counts live in `attention/triton_cases.py`.
"""

import triton
import triton.language as tl


@triton.jit
def _attn_block_loop(
    acc, l_i, m_i, q,
    k_base, v_base, offs_m, offs_n, offs_d, lo, hi, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
):
    """Online softmax over keys [lo, hi) in BLOCK_N steps; MASKED applies the causal mask (key <= query)."""
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        # K^T block [HEAD_DIM, BLOCK_N] and scores [BLOCK_M, BLOCK_N]
        k = tl.load(k_base + (start_n + offs_n)[None, :] * HEAD_DIM + offs_d[:, None])
        qk = tl.dot(q, k)
        if MASKED:
            qk = tl.where(offs_m[:, None] >= (start_n + offs_n)[None, :], qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + (start_n + offs_n)[:, None] * HEAD_DIM + offs_d[None, :])
        acc = tl.dot(p.to(tl.bfloat16), v, acc * alpha[:, None])
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def attn_fwd_kernel(
    # pointers
    q_ptr, k_ptr, v_ptr, o_ptr,
    # sizes
    H_Q, H_KV, N_Q, N_KV,
    # softmax scale (1 / sqrt(HEAD_DIM))
    sm_scale,
    # meta-parameters
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):
    # -- which rows: axis 0 is (batch, query head), axis 1 the query block, longest rows first --
    bh = tl.program_id(0)
    start_m = tl.num_programs(1) - 1 - tl.program_id(1)
    b = bh // H_Q
    h = bh % H_Q
    h_kv = h // (H_Q // H_KV)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q_base = q_ptr + bh.to(tl.int64) * N_Q * HEAD_DIM
    k_base = k_ptr + (b * H_KV + h_kv).to(tl.int64) * N_KV * HEAD_DIM
    v_base = v_ptr + (b * H_KV + h_kv).to(tl.int64) * N_KV * HEAD_DIM

    # -- running max, sum and output accumulator, in fp32 --
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634     # exp(x) = exp2(x * log2(e))
    q = tl.load(q_base + offs_m[:, None] * HEAD_DIM + offs_d[None, :])

    if CAUSAL:   # queries and keys aligned (N_Q == N_KV): unmasked blocks, then the diagonal block
        tl.static_assert(BLOCK_M % BLOCK_N == 0, "causal: the diagonal block is whole key blocks")
        acc, l_i, m_i = _attn_block_loop(acc, l_i, m_i, q, k_base, v_base, offs_m, offs_n, offs_d,
                                         0, start_m * BLOCK_M, qk_scale, HEAD_DIM, BLOCK_N, False)
        acc, l_i, m_i = _attn_block_loop(acc, l_i, m_i, q, k_base, v_base, offs_m, offs_n, offs_d,
                                         start_m * BLOCK_M, (start_m + 1) * BLOCK_M, qk_scale,
                                         HEAD_DIM, BLOCK_N, True)
    else:
        acc, l_i, m_i = _attn_block_loop(acc, l_i, m_i, q, k_base, v_base, offs_m, offs_n, offs_d,
                                         0, N_KV, qk_scale, HEAD_DIM, BLOCK_N, False)

    # -- normalize and write the rows --
    acc = acc / l_i[:, None]
    tl.store(o_ptr + bh.to(tl.int64) * N_Q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :],
             acc.to(tl.bfloat16))


@triton.jit
def attn_decode_kernel(
    # pointers: q, o [B, H_Q, 1, HEAD_DIM]; k, v [B, H_KV, N_KV, HEAD_DIM]; partials and semaphore
    q_ptr, k_ptr, v_ptr, o_ptr,
    part_ml_ptr, part_acc_ptr, sem_ptr,
    # sizes
    H_Q, H_KV, N_KV,
    # softmax scale
    sm_scale,
    # meta-parameters: GROUP = H_Q // H_KV query heads packed in BLOCK_H (>= 16) rows of one dot
    HEAD_DIM: tl.constexpr, GROUP: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    NUM_SPLITS: tl.constexpr, CHUNK: tl.constexpr,
):
    # -- which keys: axis 0 is the split (a chunk of CHUNK keys), axis 1 is (batch, KV head) --
    split = tl.program_id(0)
    bkv = tl.program_id(1)
    offs_h = tl.arange(0, BLOCK_H)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_h < GROUP
    heads = bkv * GROUP + offs_h       # flat (batch, query head) index of each row: b * H_Q + h
    k_base = k_ptr + bkv.to(tl.int64) * N_KV * HEAD_DIM
    v_base = v_ptr + bkv.to(tl.int64) * N_KV * HEAD_DIM

    # -- this chunk's online softmax, one row per query head of the group --
    q = tl.load(q_ptr + heads[:, None] * HEAD_DIM + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    m_i = tl.zeros([BLOCK_H], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    acc, l_i, m_i = _attn_block_loop(acc, l_i, m_i, q, k_base, v_base, offs_h, offs_n, offs_d,
                                     split * CHUNK, (split + 1) * CHUNK, qk_scale, HEAD_DIM, BLOCK_N, False)

    # -- write the partial: (m, l) and the unnormalized acc of each head for this split --
    part = heads * NUM_SPLITS + split
    tl.store(part_ml_ptr + part * 2, m_i, mask=row_ok)
    tl.store(part_ml_ptr + part * 2 + 1, l_i, mask=row_ok)
    tl.store(part_acc_ptr + part[:, None] * HEAD_DIM + offs_d[None, :], acc, mask=row_ok[:, None])

    # -- count in; the last program of this KV head combines every split's partial --
    tl.debug_barrier()                                   # every thread's partial stores precede the release
    arrived = tl.atomic_add(sem_ptr + bkv, 1, sem="acq_rel", scope="gpu")
    if arrived == NUM_SPLITS - 1:
        tl.debug_barrier()
        m = tl.zeros([BLOCK_H], dtype=tl.float32) - float("inf")
        l_sum = tl.zeros([BLOCK_H], dtype=tl.float32)
        out = tl.zeros([BLOCK_H, HEAD_DIM], dtype=tl.float32)
        for s in range(NUM_SPLITS):
            p = heads * NUM_SPLITS + s
            m_s = tl.load(part_ml_ptr + p * 2, mask=row_ok, other=0.0, cache_modifier=".cg")
            l_s = tl.load(part_ml_ptr + p * 2 + 1, mask=row_ok, other=1.0, cache_modifier=".cg")
            a_s = tl.load(part_acc_ptr + p[:, None] * HEAD_DIM + offs_d[None, :], mask=row_ok[:, None],
                          other=0.0, cache_modifier=".cg")
            m_new = tl.maximum(m, m_s)
            alpha = tl.math.exp2(m - m_new)
            beta = tl.math.exp2(m_s - m_new)
            l_sum = l_sum * alpha + l_s * beta
            out = out * alpha[:, None] + a_s * beta[:, None]
            m = m_new
        tl.store(o_ptr + heads[:, None] * HEAD_DIM + offs_d[None, :], (out / l_sum[:, None]).to(tl.bfloat16),
                 mask=row_ok[:, None])
        tl.atomic_xchg(sem_ptr + bkv, 0, sem="relaxed", scope="gpu")   # leave the semaphore as found
