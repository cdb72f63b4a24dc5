"""One model per document (issue 15): what the API answers with is the very model the store (or the
service module that makes it) returns, never a copy of its fields declared again for the API."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import types
import typing
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.routing import APIRoute
from pydantic import BaseModel

from pipeline.service import auth, users
from pipeline.service.api import routes
from pipeline.results.store import bisect_views, compare, compile_stats, counters, queries, queue

SHARED_FIELDS = 3
"""Fewer names in common than this is a coincidence (`id`, `sha`), not a copy."""
PRODUCERS_PACKAGES = ("contracts", "results.analysis", "results.store", "orchestration.dispatch", "pr_comments")
"""Where the API's documents are made (with the service's own modules: auth, users...), so where
the class a twin copies would be. Not the pages' view models (`service.web`): they read documents."""

PRODUCERS: dict[tuple[str, str], Callable[..., Any]] = {
    ("GET", "/commits"): queries.list_commits,
    ("GET", "/commits/{sha}"): queries.commit_detail,
    ("GET", "/compare"): compare.compare_all,
    ("GET", "/series/{series_id}"): queries.series_detail,
    ("PUT", "/series/{series_id}/settings"): queries.series_detail,
    ("GET", "/counter-series"): counters.counter_history,
    ("GET", "/compile-series"): compile_stats.list_compile_series,
    ("GET", "/compile-series/history"): compile_stats.compile_history,
    ("GET", "/compile-series/steps"): compile_stats.compile_steps,
    ("GET", "/compile-series/compare"): compile_stats.compile_changes,
    ("GET", "/change-points/{change_point_id}"): queries.change_point_detail,
    ("POST", "/change-points/{change_point_id}/triage"): queries.change_point_detail,
    ("GET", "/regressions"): queries.list_regressions,
    ("GET", "/dashboard"): queries.dashboard,
    ("GET", "/bisections"): bisect_views.list_bisections,
    ("GET", "/bisections/{bisection_id}"): bisect_views.get_bisection,
    ("GET", "/agents"): queue.list_agents,
    ("GET", "/jobs"): queue.list_jobs,
    ("GET", "/jobs/{job_id}"): queue.get_job,
    ("GET", "/jobs/{job_id}/results"): queries.job_results,
    ("GET", "/tokens"): auth.list_tokens,
    ("DELETE", "/tokens/{name}"): auth.revoke_token,
    ("GET", "/users"): users.list_users,
    ("POST", "/users"): users.create_user,
    ("DELETE", "/users/{name}"): users.disable_user,
}
"""Route -> the function that makes its document (the store's, or the service module's)."""


def _api_routes() -> list[APIRoute]:
    """The routes of every router of the API (`app.create_app` mounts them all under /api/v1)."""
    modules = [importlib.import_module(f"{routes.__name__}.{m.name}") for m in pkgutil.iter_modules(routes.__path__)]
    return [r for m in modules if hasattr(m, "router") for r in m.router.routes if isinstance(r, APIRoute)]


def _models_in(annotation: Any) -> Iterator[type]:
    """The pydantic models and dataclasses an annotation names, through list[...], X | None, ..."""
    if isinstance(annotation, type) and (issubclass(annotation, BaseModel) or dataclasses.is_dataclass(annotation)):
        yield annotation
    for arg in typing.get_args(annotation):
        yield from _models_in(arg)


def _fields(cls: type) -> dict[str, Any]:
    """Field name -> annotation."""
    if issubclass(cls, BaseModel):
        return {name: f.annotation for name, f in cls.model_fields.items()}
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _documents() -> set[type]:
    """Every model the API answers with, and the models inside them."""
    found: set[type] = set()
    todo = [m for r in _api_routes() if r.response_model is not None for m in _models_in(r.response_model)]
    while todo:
        model = todo.pop()
        if model not in found:
            found.add(model)
            todo += [m for annotation in _fields(model).values() for m in _models_in(annotation)]
    return found


def _producer_modules() -> Iterator[types.ModuleType]:
    """Every module of PRODUCERS_PACKAGES (migrations aside), and the service's own modules."""
    for name in PRODUCERS_PACKAGES:
        package = importlib.import_module(f"pipeline.{name}")
        yield package
        for found in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if ".migrations" not in found.name:
                yield importlib.import_module(found.name)
    service = importlib.import_module("pipeline.service")
    for found in pkgutil.iter_modules(service.__path__, f"{service.__name__}."):
        if not found.ispkg:
            yield importlib.import_module(found.name)


def _producer_models() -> set[type]:
    """Every pydantic model and dataclass defined in a producer module."""
    return {c for m in _producer_modules() for c in vars(m).values()
            if isinstance(c, type) and c.__module__ == m.__name__ and next(_models_in(c), None) is c}


def _shown(cls: type) -> set[str]:
    """What an object of `cls` hands a copy made from its attributes: its fields and properties."""
    return set(_fields(cls)) | {n for c in cls.__mro__ for n, v in vars(c).items() if isinstance(v, property)}


def test_no_document_is_declared_twice() -> None:
    """A model the API answers with, all of whose fields another class where documents are made
    also carries (as fields or properties), is a twin serialiser: a second description of that
    class's objects, filled from their attributes. Classes related by inheritance share fields by design."""
    documents = _documents()
    assert len(documents) > 20, "the API's documents were not found: the test would pass for nothing"
    producers = _producer_models()
    twins = []
    for document in sorted(documents, key=lambda c: c.__qualname__):
        fields = set(_fields(document))
        for other in producers:
            if len(fields) >= SHARED_FIELDS and fields <= _shown(other) \
                    and not issubclass(other, document) and not issubclass(document, other):
                twins.append(f"{document.__module__}.{document.__qualname__} copies "
                             f"{other.__module__}.{other.__qualname__}")
    assert not twins, "documents declared twice:\n" + "\n".join(sorted(twins))


def test_shared_documents_are_frozen_pydantic_models() -> None:
    """The documents made outside the API (store, dispatcher, auth, users) are also what the pages,
    the PR comment and caches hold: pydantic models, frozen, so that no reader changes them for
    the others."""
    shared = [d for d in _documents() if not d.__module__.startswith(routes.__name__.rsplit(".", 1)[0])]
    assert shared
    loose = [d.__qualname__ for d in shared if not (issubclass(d, BaseModel) and d.model_config.get("frozen"))]
    assert not loose, f"not frozen pydantic models: {sorted(loose)}"


def _without_none(annotation: Any) -> Any:
    """X | None -> X (a route answers 404 where its producer finds nothing)."""
    args = typing.get_args(annotation)
    if type(None) in args:
        (kept,) = [a for a in args if a is not type(None)]
        return kept
    return annotation


@pytest.mark.parametrize(("method", "path"), sorted(PRODUCERS))
def test_a_route_answers_with_the_model_its_producer_returns(method: str, path: str) -> None:
    (route,) = [r for r in _api_routes() if r.path == path and method in r.methods]
    produced = _without_none(typing.get_type_hints(PRODUCERS[method, path])["return"])
    assert route.response_model == produced, (route.response_model, produced)
