"""GitHub webhooks: POST /webhooks/github receives deliveries (signed with the configured secret);
GET /webhooks/github/deliveries lists what came of them (admin scope).

A delivery is answered at once: 401 when its X-Hub-Signature-256 does not verify (nothing is
stored), 400 for a body that is not acceptable JSON and 422 for a pull_request or push payload whose
fields are not the types GitHub sends (`webhook.Payload`; both naming the field, nothing stored),
200 "duplicate" for a delivery id already received, 202 "accepted" when it runs something
(the service's webhook worker fetches, records and queues it), 200 "ignored" otherwise
(`pipeline.service.github_webhook` says which events and actions run)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import JSONResponse

from pipeline.contracts import strict_json
from pipeline.service.api.deps import BodyDep, SessionDep, SettingsDep, require_scope
from pipeline.service.api.strict_route import StrictJsonRoute
from pipeline.service.github_webhook import decide, verify_signature
from pipeline.results.store import deliveries

router = APIRouter(route_class=StrictJsonRoute, tags=["webhooks"])

SIGNATURE_HEADER = "X-Hub-Signature-256"


@router.post("/webhooks/github", summary="Receive a GitHub webhook delivery (signed with the webhook secret)",
             responses={401: {"description": "signature missing or wrong, or no secret configured"}})
def github_webhook(request: Request, body: BodyDep, session: SessionDep, settings: SettingsDep) -> JSONResponse:
    secret = settings.github.webhook_secret.get_secret_value()
    if not secret:
        raise HTTPException(401, "no webhook secret configured on the service (BENCHFARM_GITHUB__WEBHOOK_SECRET)")
    if not verify_signature(secret, body, request.headers.get(SIGNATURE_HEADER)):
        raise HTTPException(401, f"{SIGNATURE_HEADER} missing or wrong")
    delivery_id = request.headers.get("X-GitHub-Delivery", "").strip()
    event = request.headers.get("X-GitHub-Event", "").strip()
    if not delivery_id or not event or len(delivery_id) > 100 or len(event) > 50:
        raise HTTPException(400, "X-GitHub-Delivery and X-GitHub-Event headers are required")
    try:
        payload = strict_json.loads(body)
    except strict_json.BodyError as exc:
        raise HTTPException(400, f"the body is not acceptable JSON: {exc.field}: {exc} (set the webhook's content type to "
                                 "application/json)") from None
    if not isinstance(payload, dict):
        raise HTTPException(400, "the body is not a JSON object")
    if deliveries.delivery_known(session, delivery_id):
        return JSONResponse({"status": "duplicate", "delivery": delivery_id})
    decision = decide(event, payload, settings.github)
    action = payload.get("action") if isinstance(payload.get("action"), str) else None
    ignored = decision.kind == "ignore"
    if not deliveries.record_delivery(session, delivery_id=delivery_id, event=event, action=action, payload=payload,
                                      ignored=ignored, reason=decision.reason):
        # the same delivery, received twice at once: the other request took it
        return JSONResponse({"status": "duplicate", "delivery": delivery_id})
    if ignored:
        return JSONResponse({"status": "ignored", "delivery": delivery_id, "reason": decision.reason})
    return JSONResponse({"status": "accepted", "delivery": delivery_id, "reason": decision.reason}, status_code=202)


@router.get("/webhooks/github/deliveries", dependencies=[require_scope("admin")],
            summary="Received deliveries, newest first, with what came of them")
def list_deliveries(session: SessionDep, limit: int = Query(50, ge=1, le=1000)) -> list[dict[str, Any]]:
    return [asdict(d) for d in deliveries.list_deliveries(session, limit=limit)]
