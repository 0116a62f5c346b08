"""API fuzzing: schemathesis generates requests for every operation of the OpenAPI document and
sends them to the WSGI application, as a lead, as an admin and (agent routes) as a node agent.

No answer may be a 5xx, and every answer must match the document (status code, content type,
body schema). ``make test`` (and CI) runs a bounded number of examples per operation
(``FUZZ_EXAMPLES``, default 3), derandomized: the same examples every run, so a submission
passes or fails on its code, not on chance. ``make fuzz`` explores (``FUZZ_RANDOM=1``, 200
examples per operation); what it finds becomes a plain test in ``test_found.py``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, settings

from gpu_agent.services.nodes import agent_register, join_token_create
from portal.wsgi import application
from tenants.models import Membership, Namespace, Tenant, User
from tenants.services import api_token_create

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "3"))
EXPLORE = os.environ.get("FUZZ_RANDOM") == "1"

# Operations that answer 4xx for nearly every generated body still run; these are left out
# because they are not JSON endpoints: the document itself and its viewer.
schema = schemathesis.openapi.from_dict(SchemaGenerator().get_schema(request=None, public=True))
schema.app = application

CHECKS = [
    schemathesis.checks.not_a_server_error,
    schemathesis.checks.status_code_conformance,
    schemathesis.checks.content_type_conformance,
    schemathesis.checks.response_schema_conformance,
]


@pytest.fixture
def wsgi_in_test_transaction(settings) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """Requests go through the real WSGI handler in this process and this test's transaction
    (as Django's test client does: the handler must not close the connection)."""
    settings.ALLOWED_HOSTS = ["*"]
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def tokens(db, wsgi_in_test_transaction) -> dict[str, str]:  # type: ignore[no-untyped-def]
    admin = User.objects.create_user("fuzz-admin", is_platform_admin=True, is_staff=True)
    alice = User.objects.create_user("fuzz-alice")
    team = Tenant.objects.create(slug="team-a", display_name="Team A")
    Namespace.objects.create(tenant=team, name="team-a")
    Membership.objects.create(user=alice, tenant=team, role="lead")
    _, join = join_token_create(node_name="gpu-node-1", actor=admin)
    _, node_secret = agent_register(join_secret=join, hostname="gpu-node-1", agent_version="1.0")
    return {
        "admin": api_token_create(user=admin, name="fuzz")[1],
        "lead": api_token_create(user=alice, name="fuzz")[1],
        "node": node_secret,
    }


def _call(case: schemathesis.Case, authorization: str) -> None:
    # Schemathesis fills the security schemes' header and cookie with random values; the
    # caller's real credentials replace them.
    headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}
    case.headers = {**headers, "Authorization": authorization}
    case.cookies = {k: v for k, v in (case.cookies or {}).items() if k != "sessionid"}
    case.call_and_validate(checks=CHECKS)


@pytest.mark.django_db
@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    derandomize=not EXPLORE,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
def test_api_operation(case: schemathesis.Case, tokens: dict[str, str]) -> None:
    if case.path.startswith("/api/v1/agent/"):
        _call(case, f"Bearer {tokens['node']}")
        return
    _call(case, f"Token {tokens['lead']}")
    _call(case, f"Token {tokens['admin']}")
