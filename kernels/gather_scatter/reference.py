"""Gather/scatter references in float64. Imports nothing but NumPy (the agent loads it alone)."""

import numpy as np


def _f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def gather_rows(table: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """out[r, :] = table[idx[r], :]: MoE dispatch, embedding lookup. The rows are taken before they are
    widened: a 128k-row embedding table in float64 is 4 GB, the looked-up rows a few MB."""
    return _f64(np.asarray(table)[np.asarray(idx, dtype=np.int64).reshape(-1)])


def scatter_rows(y: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """out[pos[r], :] = y[r, :]: MoE un-permute, expert-sorted rows back to token-slot order (`pos` a
    permutation, so every output row is written once)."""
    pos = np.asarray(pos, dtype=np.int64).reshape(-1)
    out = np.full((pos.size, np.shape(y)[1]), np.nan)
    out[pos] = _f64(y)
    return out


def scatter_add_rows(residual: np.ndarray, y: np.ndarray, token: np.ndarray, w: np.ndarray) -> np.ndarray:
    """out = residual; out[token[r], :] += w[r] * y[r, :] for every row r: MoE combine into the
    residual stream, scatter form (`token` is [R, 1])."""
    out = _f64(residual).copy()
    np.add.at(out, np.asarray(token, dtype=np.int64).reshape(-1), _f64(w).reshape(-1, 1) * _f64(y))
    return out


def combine_rows(y: np.ndarray, pos: np.ndarray, w: np.ndarray) -> np.ndarray:
    """out[t, :] = sum_j w[t, j] * y[pos[t, j], :]: MoE combine, segmented-sum form (pos, w: [T, K])."""
    return np.einsum("tk,tkh->th", _f64(w), _f64(np.asarray(y)[np.asarray(pos, dtype=np.int64)]))
