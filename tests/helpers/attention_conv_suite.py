"""A small suite for tests: the real attention and conv families (their files as they are), with an
__init__ that keeps their small cases and adds variants made by the launch alone:

- "small-prefill-noncausal" (Triton): CAUSAL=False against the causal reference -> wrong;
- "small-prefill-short-grid" (Triton): one query block short, rows 128..255 never written, outside
  most random row subsets -> wrong only through the written-everywhere check;
- "small-prefill-noncausal" (vendor): SDPA with is_causal=False -> wrong.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUITE = "kernels"

_INIT = '''\
"""Small attention and conv cases, and wrong variants, for tests."""
from dataclasses import replace

from pipeline.build.suite_api import TorchSource
from pipeline.contracts.ids import CaseId

from . import attention, conv
from .attention import triton_cases as at, vendor_cases as av

WRONG = {wrong!r}


def _renamed(case, name):
    return replace(case, case_id=CaseId.parse(str(case.case_id)).model_copy(update={{"name": name}}))


def _variants():
    shape = next(s for s in at.SHAPES if s.name == "small-prefill")

    def noncausal(target):
        source = at.make_source(shape, target)
        return replace(source, constexprs={{**source.constexprs, "CAUSAL": False}})

    def short_grid(target):
        source = at.make_source(shape, target)
        return replace(source, grid=(source.grid[0], source.grid[1] - 1))

    vendor = TorchSource(op="sdpa", params={{**av.source(shape).params, "is_causal": False}})
    return [
        replace(_renamed(at.case(shape), "small-prefill-noncausal"), make_source=noncausal),
        replace(_renamed(at.case(shape), "small-prefill-short-grid"), make_source=short_grid),
        replace(_renamed(av.case(shape), "small-prefill-noncausal"), make_source=lambda target: vendor),
    ]


def cases():
    small = [c for c in (*attention.cases(), *conv.cases()) if c.case_id.name.startswith("small-")]
    return [*small, *(_variants() if WRONG else [])]
'''


def attention_conv_suite_files(*, wrong: bool = False) -> dict[str, str]:
    """Files (relative to the repository root) of a suite folder with the small attention and conv
    cases (Triton and vendor), plus the wrong variants when `wrong`."""
    files = {}
    for family in ("attention", "conv"):
        root = REPO / SUITE / family
        files.update({f"{SUITE}/{family}/{p.name}": p.read_text() for p in root.glob("*.py")})
    files[f"{SUITE}/__init__.py"] = _INIT.format(wrong=wrong)
    return files
