"""The attention and conv references (NumPy float64) against plain loops, and their row subsets."""

from __future__ import annotations

import numpy as np

from pipeline.agents.runners.checking import check_against_reference
from pipeline.build.suite_loader import load_suite_module
from pipeline.contracts.manifest import ReferenceSpec, ReferenceSubset

ATT = load_suite_module("kernels", "attention.reference")
CONV = load_suite_module("kernels", "conv.reference")


def _naive_attention(q, k, v, causal):
    b, hq, nq, d = q.shape
    nkv, group = k.shape[2], hq // k.shape[1]
    out = np.zeros_like(q, dtype=np.float64)
    for h in range(hq):
        for i in range(nq):
            s = np.array([q[0, h, i] @ k[0, h // group, j] for j in range(nkv)]) / np.sqrt(d)
            if causal:
                s[np.arange(nkv) > i + nkv - nq] = -np.inf
            p = np.exp(s - s.max())
            out[0, h, i] = p @ v[0, h // group] / p.sum()
    return out


def test_attention_reference_matches_loops_and_its_subset() -> None:
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal(s) for s in ([1, 6, 12, 8], [1, 2, 12, 8], [1, 2, 12, 8]))
    for causal, fn in ((True, ATT.causal_attention), (False, ATT.attention)):
        full = fn(q, k, v)
        assert np.allclose(full, _naive_attention(q, k, v, causal))
        rows = np.array([0, 5, 11])
        assert np.allclose(fn(q, k, v, index=rows), full[:, :, rows])


def _naive_conv(x, w, stride, depthwise):
    n, h, wd, c = x.shape
    r = w.shape[1]
    pad = (r - 1) // 2
    p = (h + 2 * pad - r) // stride + 1
    k = c if depthwise else w.shape[0]
    y = np.zeros((n, p, p, k))
    for pi in range(p):
        for qi in range(p):
            for i in range(r):
                for j in range(r):
                    hh, ww = pi * stride - pad + i, qi * stride - pad + j
                    if 0 <= hh < h and 0 <= ww < wd:
                        y[:, pi, qi] += x[:, hh, ww] * w[:, i, j] if depthwise else x[:, hh, ww] @ w[:, i, j].T
    return y


def test_conv_references_match_loops_and_their_subset() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal([2, 9, 9, 4])
    dense, depthwise = rng.standard_normal([5, 3, 3, 4]), rng.standard_normal([4, 3, 3])
    for stride in (1, 2):
        got = getattr(CONV, f"conv2d_stride{stride}")(x, dense)
        assert np.allclose(got, _naive_conv(x, dense, stride, False))
        got_dw = getattr(CONV, f"depthwise_conv2d_stride{stride}")(x, depthwise)
        assert np.allclose(got_dw, _naive_conv(x, depthwise, stride, True))
        rows = np.array([1, 3])
        assert np.allclose(getattr(CONV, f"conv2d_stride{stride}")(x, dense, index=rows), got[:, rows])
    stem = CONV.conv2d_stride2(rng.standard_normal([1, 16, 16, 3]), rng.standard_normal([8, 7, 7, 3]))
    assert stem.shape == (1, 8, 8, 8)


def test_subset_check_still_catches_unwritten_elements() -> None:
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal([1, 2, 64, 8]) for _ in range(3))
    spec = ReferenceSpec(module="m", function="f", atol=1e-6, rtol=1e-6, subset=ReferenceSubset(axis=2, count=4))
    out = ATT.causal_attention(q, k, v)
    ok = check_against_reference([out], [q, k, v], ATT.causal_attention, ["o"], spec, np.random.default_rng(0))
    assert ok.passed, ok.detail
    out[0, 1, 63, 7] = np.nan        # one element never written: outside the compared rows, most likely
    bad = check_against_reference([out], [q, k, v], ATT.causal_attention, ["o"], spec, np.random.default_rng(0))
    assert not bad.passed and "1/1024 elements not written" in bad.detail
    out[0, 1, 63, 7] = 0.0
    wrong = check_against_reference([out * 1.5], [q, k, v], ATT.causal_attention, ["o"], spec, np.random.default_rng(0))
    assert not wrong.passed and "outside atol" in wrong.detail
