"""Incidents: a JSON file under `<home>/incidents`, and a POST to a webhook when one is configured.

It sits in the data plane, beside the home folder it writes to, so that every room can raise one:
the sensors in `orchestration/` and the daily watch asset in `assets/` alike.

A webhook failure is reported in the incident file itself (never raised from a sensor, which must
keep running), so nothing about the incident is lost when the receiver is down.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests

from dataplane.home import Home


def record_incident(
    home: Home, kind: str, summary: str, evidence: dict[str, Any], webhook_url: str | None = None, timeout: float = 5.0
) -> Path:
    """Write one incident and post it to `webhook_url` (or the home's, `Home.webhook_url`)."""
    home.incidents.mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC)
    incident = {
        "id": f"{now:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}",
        "kind": kind,
        "summary": summary,
        "created_at": now.isoformat(),
        "evidence": evidence,
    }
    url = webhook_url or home.webhook_url
    if url:
        started = time.monotonic()
        try:
            response = requests.post(url, json=incident, timeout=timeout)
            incident["webhook"] = {
                "url": url,
                "status": response.status_code,
                "seconds": round(time.monotonic() - started, 3),
            }
        except requests.RequestException as err:
            incident["webhook"] = {"url": url, "error": f"{type(err).__name__}: {err}"}
    path = home.incidents / f"{incident['id']}-{kind}.json"
    path.write_text(json.dumps(incident, indent=2, sort_keys=True, default=str))
    return path


def list_incidents(home: Home) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(home.incidents.glob("*.json"))]
