"""Attention reference in float64. Imports nothing but NumPy (the agent loads it alone).

`index` (the agent passes it when the case's ReferenceSpec has a subset) selects query rows along
axis 2 of O: the reference computes only those rows, so a 16k-token prefill costs a few hundred
rows' worth of work instead of 16k x 16k per head.
"""

import numpy as np


def _attention(q, k, v, causal, index):
    batch, h_q, n_q, d = np.shape(q)
    rows = np.arange(n_q) if index is None else np.asarray(index, dtype=np.int64)
    # only the checked query rows are widened to float64 (a 16k-token prefill's Q is 0.5 GB in float64)
    q = np.asarray(np.asarray(q)[:, :, rows], dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    h_kv, n_kv = k.shape[1], k.shape[2]
    positions = rows + (n_kv - n_q)            # causal: queries are the last n_q positions (bottom-right)
    out = np.empty((batch, h_q, len(rows), d))
    group = h_q // h_kv
    for b in range(batch):
        for h in range(h_q):
            scores = q[b, h] @ k[b, h // group].T / np.sqrt(d)
            if causal:
                scores = np.where(np.arange(n_kv)[None, :] <= positions[:, None], scores, -np.inf)
            scores -= scores.max(axis=1, keepdims=True)
            p = np.exp(scores)
            out[b, h] = (p / p.sum(axis=1, keepdims=True)) @ v[b, h // group]
    return out


def causal_attention(q, k, v, index=None):
    return _attention(q, k, v, True, index)


def attention(q, k, v, index=None):
    return _attention(q, k, v, False, index)
