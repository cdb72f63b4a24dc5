"""Convolution reference in float64, NHWC. Imports nothing but NumPy (the agent loads it alone).

The reference takes the kernel's arrays alone, so the stride is in the function's name and the
padding is "same" for odd filters, pad = (R - 1) // 2, as in every case of the suite.
`index` (passed when the case's ReferenceSpec has a subset) selects output rows p along axis 1 of Y:
only those rows are computed.
"""

import numpy as np


def _conv(x, w, stride, depthwise, index):
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    n, h, wd, c = x.shape
    r, s = w.shape[1], w.shape[2]
    pad = (r - 1) // 2
    p_out, q_out = (h + 2 * pad - r) // stride + 1, (wd + 2 * pad - s) // stride + 1
    rows = np.arange(p_out) if index is None else np.asarray(index, dtype=np.int64)
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    k = c if depthwise else w.shape[0]
    out = np.zeros((n, len(rows), q_out, k))
    cols = np.arange(q_out) * stride
    for i in range(r):
        for j in range(s):
            patch = xp[:, rows * stride + i][:, :, cols + j]          # [N, rows, Q, C]
            out += patch * w[:, i, j] if depthwise else patch @ w[:, i, j, :].T
    return out


def conv2d_stride1(x, w, index=None):
    """x [N, H, W, C], w [K, R, S, C] -> y [N, P, Q, K]."""
    return _conv(x, w, 1, False, index)


def conv2d_stride2(x, w, index=None):
    return _conv(x, w, 2, False, index)


def depthwise_conv2d_stride1(x, w, index=None):
    """x [N, H, W, C], w [C, R, S] -> y [N, P, Q, C]."""
    return _conv(x, w, 1, True, index)


def depthwise_conv2d_stride2(x, w, index=None):
    return _conv(x, w, 2, True, index)
