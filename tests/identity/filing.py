"""What a signed-in user's API token may still do: file a quota request for team-a."""

from __future__ import annotations

from rest_framework.test import APIClient


def file_request_with_token(token: str) -> int:
    """The status code of filing a request for team-a on demo-a100 with ``token``."""
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    body = {
        "tenant": "team-a",
        "cluster": "demo-a100",
        "reason": "bigger training runs",
        "items": [
            {"flavor": "a100-80gb", "resource": "nvidia.com/gpu", "guaranteed": 8, "limit": 10}
        ],
    }
    return api.post("/api/v1/quota-requests/", body, format="json").status_code
