"""Compile statistics as series (case x target): list, history along the default branch, and the
differences between two commits (`pipeline.results.store.compile_stats`)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from pipeline.service.api.deps import SessionDep
from pipeline.service.api.schemas import ErrorBody
from pipeline.service.api.strict_route import StrictJsonRoute
from pipeline.results.store import compile_stats
from pipeline.results.store.compile_stats import CompileChangeOut, CompilePointOut, CompileSeriesOut, CompileStepOut

router = APIRouter(route_class=StrictJsonRoute, tags=["compile statistics"])


@router.get("/compile-series", response_model=list[CompileSeriesOut],
            summary="Every (case, target) the repository's bundles compiled, with its newest figures")
def list_compile_series(session: SessionDep, repository: str) -> list[CompileSeriesOut]:
    return compile_stats.list_compile_series(session, repository)


@router.get("/compile-series/history", response_model=list[CompilePointOut], responses={404: {"model": ErrorBody}},
            summary="One compile series along the default-branch history, oldest first")
def compile_history(session: SessionDep, repository: str, case: str, target: str) -> list[CompilePointOut]:
    history = compile_stats.compile_history(session, repository, case, target)
    if not history:
        raise HTTPException(404, f"no compile statistics for {case} on {target} in {repository}")
    return history


@router.get("/compile-series/steps", response_model=list[CompileStepOut], responses={404: {"model": ErrorBody}},
            summary="The change points of one compile series: every step of a deterministic figure",
            description="Binary size, registers, spills and shared bytes along the default-branch history: each "
                        "commit whose figure differs from the previous built commit's, oldest first. Deterministic, "
                        "so every step is a change; computed when read, never triaged, never a regression.")
def compile_steps(session: SessionDep, repository: str, case: str, target: str) -> list[CompileStepOut]:
    history = compile_stats.compile_history(session, repository, case, target)
    if not history:
        raise HTTPException(404, f"no compile statistics for {case} on {target} in {repository}")
    return compile_stats.compile_steps(history)


@router.get("/compile-series/compare", response_model=list[CompileChangeOut],
            summary="The compile figures that differ between two commits",
            description="Binary size, registers, spills and shared bytes of every (case, target) built at both "
                        "commits, where they differ (any difference: they are deterministic). Compile time is not "
                        "compared (a timing of the builder). Reported beside the latency verdict, never as one.")
def compare_compile(session: SessionDep, repository: str, head: str, base: str) -> list[CompileChangeOut]:
    return compile_stats.compile_changes(session, repository, head_sha=head, base_sha=base)
