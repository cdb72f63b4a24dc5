"""Convolution references for the IREE cases, NHWC, in float64. Imports nothing but NumPy.

Inputs arrive padded (the kernel computes a valid convolution over them), as the cases declare.
"""

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def _windows(x: np.ndarray, kh: int, kw: int, stride: int) -> np.ndarray:
    """[N, OH, OW, C, KH, KW] views of the input windows."""
    return sliding_window_view(np.asarray(x, dtype=np.float64), (kh, kw), axis=(1, 2))[:, ::stride, ::stride]


def conv2d_nhwc_hwcf_s1(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return conv2d_nhwc_hwcf(x, w, 1)


def conv2d_nhwc_hwcf_s2(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return conv2d_nhwc_hwcf(x, w, 2)


def conv2d_nhwc_hwcf(x: np.ndarray, w: np.ndarray, stride: int) -> np.ndarray:
    """y[n, oh, ow, f] = sum_{kh, kw, c} x[n, oh*s + kh, ow*s + kw, c] * w[kh, kw, c, f]."""
    kh, kw = w.shape[:2]
    return np.einsum("nhwcij,ijcf->nhwf", _windows(x, kh, kw, stride), np.asarray(w, dtype=np.float64), optimize=True)


def depthwise_nhwc_hwc_s1(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return depthwise_nhwc_hwc(x, w, 1)


def depthwise_nhwc_hwc_s2(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return depthwise_nhwc_hwc(x, w, 2)


def depthwise_nhwc_hwc(x: np.ndarray, w: np.ndarray, stride: int) -> np.ndarray:
    """y[n, oh, ow, c] = sum_{kh, kw} x[n, oh*s + kh, ow*s + kw, c] * w[kh, kw, c]."""
    kh, kw = w.shape[:2]
    return np.einsum("nhwcij,ijc->nhwc", _windows(x, kh, kw, stride), np.asarray(w, dtype=np.float64), optimize=True)
