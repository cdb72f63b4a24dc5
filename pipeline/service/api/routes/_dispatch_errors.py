"""The dispatcher's errors as HTTP answers: a refused request 422, a lost lease 409."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import HTTPException

from pipeline.orchestration.dispatch.triggers import TriggerError
from pipeline.results.store.queue import DispatchError, LeaseLost


@contextmanager
def dispatch_errors() -> Iterator[None]:
    try:
        yield
    except LeaseLost as exc:
        raise HTTPException(409, str(exc)) from None
    except (DispatchError, TriggerError) as exc:
        raise HTTPException(422, str(exc)) from None
