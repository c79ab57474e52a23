"""``GET /api/calls`` of a running kefu, as an agent whose token is signed with ``secret``."""

from __future__ import annotations

import json
import urllib.request

from kefu.signaling.tokens import mint_token


def list_calls(http: str, secret: str) -> list[dict[str, object]]:
    token = mint_token(secret, "maria", "agent", 600.0, None)
    request = urllib.request.Request(
        f"{http}/api/calls", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        calls: list[dict[str, object]] = json.loads(response.read())["calls"]
        return calls
