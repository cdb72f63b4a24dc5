"""Attention reference for the IREE cases, in float64. Imports nothing but NumPy.

Grouped-query layout: q[B, HKV, G, S, D] (query head h = hkv * G + g, so this is [B, H, S, D]
reshaped), k and v [B, HKV, SKV, D]; no mask (decode attends to the whole cache).
"""

import numpy as np


def gqa_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    q64, k64, v64 = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    scores = np.einsum("bhgsd,bhtd->bhgst", q64, k64) / np.sqrt(q64.shape[-1])
    scores -= scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("bhgst,bhtd->bhgsd", p, v64)
