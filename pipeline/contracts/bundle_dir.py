"""A bundle on disk, as its readers see it: the manifest file and the suite copy it ships.

The builder writes bundles (`pipeline.build.bundle`); agents, the service and the builder's cache
read them through this module, which needs nothing but the contracts: an agent host does not
install the compilers to run what they made.
"""

from __future__ import annotations

import importlib.util
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from pipeline.contracts import BundleManifest, parse_manifest

__all__ = ["MANIFEST", "SUITE_DIR", "BundleModuleError", "load_bundle", "load_suite_module"]

MANIFEST = "manifest.json"
SUITE_DIR = "suite"


class BundleModuleError(RuntimeError):
    """A module of the shipped suite copy is missing or failed to load."""


def load_bundle(bundle_dir: Path) -> BundleManifest:
    return parse_manifest((Path(bundle_dir) / MANIFEST).read_bytes())


@contextmanager
def _no_bytecode() -> Iterator[None]:
    """No __pycache__ written into a bundle (its files are checksummed) or a suite checkout."""
    before = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        yield
    finally:
        sys.dont_write_bytecode = before


def load_suite_module(suite_dir: Path | str, module: str) -> ModuleType:
    """Import one suite module (e.g. `gemm.reference`) from a shipped suite copy, by its file alone.

    The suite's package `__init__` files are NOT run (they import the builder's API); a module
    loaded this way, such as a reference, may import nothing but NumPy and the standard library.
    """
    suite_dir = Path(suite_dir).resolve()
    parts = module.split(".")
    candidates = [suite_dir.joinpath(*parts).with_suffix(".py"), suite_dir.joinpath(*parts, "__init__.py")]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        raise BundleModuleError(f"suite module {module} not found in {suite_dir}")
    name = f"_benchfarm_suite_module_{uuid.uuid4().hex[:8]}_{'_'.join(parts)}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    try:
        with _no_bytecode():
            spec.loader.exec_module(loaded)
    except Exception as exc:
        raise BundleModuleError(f"loading {path} failed: {type(exc).__name__}: {exc}") from exc
    return loaded
