"""GitHub webhook deliveries as stored (`WebhookDelivery`): received and kept by their
X-GitHub-Delivery id, processed later by the service's webhook worker, listed for admins. Nothing
here commits, except that a delivery received twice at once rolls the losing request back."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from pipeline.results.store.models import WebhookDelivery, utcnow

__all__ = ["DeliveryOut", "PendingDelivery", "delivery_known", "list_deliveries", "next_pending", "record_delivery",
           "settle_delivery"]


def delivery_known(session: Session, delivery_id: str) -> bool:
    """Whether a delivery with this id was received already (a redelivery is not processed again)."""
    return session.get(WebhookDelivery, delivery_id) is not None


def record_delivery(session: Session, *, delivery_id: str, event: str, action: str | None, payload: dict[str, Any],
                    ignored: bool, reason: str) -> bool:
    """Keep a received delivery: pending (its payload kept for the worker), or ignored with `reason`
    (no payload). False: the same delivery was received at once by another request, which took it;
    the session's transaction is rolled back."""
    now = utcnow()
    session.add(WebhookDelivery(
        id=delivery_id, event=event, action=(action or "")[:50] or None, payload={} if ignored else payload,
        state="ignored" if ignored else "pending", outcome=reason if ignored else None,
        received_at=now, processed_at=now if ignored else None))
    try:
        session.flush()
    except IntegrityError:
        session.rollback()
        return False
    return True


@dataclass(frozen=True)
class DeliveryOut:
    id: str
    event: str
    action: str | None
    state: str
    outcome: str | None
    run_id: str | None
    received_at: datetime
    processed_at: datetime | None


def list_deliveries(session: Session, *, limit: int) -> list[DeliveryOut]:
    """The newest `limit` deliveries, newest first, with what came of them."""
    rows = session.scalars(sa.select(WebhookDelivery).order_by(WebhookDelivery.received_at.desc()).limit(limit))
    return [DeliveryOut(d.id, d.event, d.action, d.state, d.outcome, d.run_id, d.received_at, d.processed_at)
            for d in rows]


@dataclass(frozen=True)
class PendingDelivery:
    id: str
    event: str
    payload: dict[str, Any]


def next_pending(session: Session) -> PendingDelivery | None:
    """The oldest delivery still pending."""
    delivery = session.scalar(sa.select(WebhookDelivery).where(WebhookDelivery.state == "pending")
                              .order_by(WebhookDelivery.received_at).limit(1))
    return PendingDelivery(delivery.id, delivery.event, dict(delivery.payload)) if delivery is not None else None


def settle_delivery(session: Session, delivery_id: str, *, state: str, outcome: str, run_id: str | None) -> None:
    """What came of a processed delivery; its payload is dropped."""
    session.execute(sa.update(WebhookDelivery).where(WebhookDelivery.id == delivery_id).values(
        state=state, outcome=outcome[:4000], run_id=run_id, processed_at=utcnow(), payload={}))
