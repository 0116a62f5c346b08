"""API throttling (core.api.throttling): one bucket per token, per signed-in user, per node
token and per anonymous address, counted in the real cache; 429 with Retry-After in the
project's error format; the agents' rate leaves room for a fleet of 1,000 nodes."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import AnonymousUser
from rest_framework.test import APIClient

from core.api.throttling import ApiRateThrottle
from gpu_agent.models import NodeToken
from gpu_agent.services.nodes import agent_register, join_token_create
from tenants.services import api_token_create

PRODUCTION_RATES = dict(django_settings.API_THROTTLE_RATES)  # as configured (env or defaults)


@pytest.fixture
def tight(settings: Any) -> None:
    """The limits on, at 3 requests a minute for every kind of caller."""
    settings.API_THROTTLE_ENABLED = True
    settings.API_THROTTLE_RATES = dict.fromkeys(PRODUCTION_RATES, "3/min")


def token_client(user: Any) -> APIClient:
    _, secret = api_token_create(user=user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    return client


def node_client(world: Any, name: str) -> APIClient:
    _, join = join_token_create(node_name=name, actor=world.admin)
    _, secret = agent_register(join_secret=join, hostname=f"{name}.lab", agent_version="1.0")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def assert_throttled(response: Any) -> None:
    assert response.status_code == 429, response.content
    retry_after = int(response["Retry-After"])
    assert 0 < retry_after <= 60
    body = response.json()
    assert body["code"] == "throttled"
    assert body["fields"] == {}
    assert f"{retry_after} second" in body["detail"]


def test_a_token_gets_its_rate_then_429_with_retry_after(world, tight):
    alice = token_client(world.alice)
    for _ in range(3):
        assert alice.get("/api/v1/me/").status_code == 200
    assert_throttled(alice.get("/api/v1/tenants/"))  # one bucket for all endpoints
    # Another token, even of the same user, has its own bucket; so does another user.
    assert token_client(world.alice).get("/api/v1/me/").status_code == 200
    assert token_client(world.bob).get("/api/v1/me/").status_code == 200


def test_a_session_is_throttled_per_user(world, tight):
    first, second = APIClient(), APIClient()
    first.force_login(world.carol)
    second.force_login(world.carol)
    for _ in range(3):
        assert first.get("/api/v1/me/").status_code == 200
    assert_throttled(second.get("/api/v1/me/"))  # the same user in another browser


def test_each_node_token_has_its_own_bucket(world, tight):
    node_1, node_2 = node_client(world, "gpu-node-1"), node_client(world, "gpu-node-2")
    for _ in range(3):
        assert node_1.get("/api/v1/agent/desired/").status_code == 200
    assert_throttled(node_1.get("/api/v1/agent/desired/"))
    assert node_2.get("/api/v1/agent/desired/").status_code == 200


def test_anonymous_callers_are_throttled_by_address(world, tight):
    body = {"join_token": "not-a-token", "hostname": "x.lab", "agent_version": "1.0"}
    guesser = APIClient(REMOTE_ADDR="192.0.2.70")
    for _ in range(3):
        assert guesser.post("/api/v1/agent/register/", body, format="json").status_code == 401
    assert_throttled(guesser.post("/api/v1/agent/register/", body, format="json"))
    other = APIClient(REMOTE_ADDR="192.0.2.71")
    assert other.post("/api/v1/agent/register/", body, format="json").status_code == 401


def test_the_limits_are_off_only_when_configured_off(world, settings):
    settings.API_THROTTLE_ENABLED = False
    settings.API_THROTTLE_RATES = dict.fromkeys(PRODUCTION_RATES, "1/min")
    client = token_client(world.alice)
    assert [client.get("/api/v1/me/").status_code for _ in range(3)] == [200, 200, 200]


def test_production_rates_fit_a_fleet_of_1000_agents_reporting_every_10_s(settings):
    """In a minute an agent calls at most 8 times (every 10 s minus its 20% jitter) plus one
    busy cycle of a dozen calls (report, desired, a result per GPU of 8, report again): none
    may be refused. Nodes never share a bucket, and one cycle of the whole fleet (1,000 checks,
    100 calls/s at a 10 s period) costs one cache round trip each."""
    settings.API_THROTTLE_ENABLED = True
    settings.API_THROTTLE_RATES = PRODUCTION_RATES
    busy = SimpleNamespace(auth=NodeToken(pk=9_000_000), user=AnonymousUser(), META={})
    assert all(ApiRateThrottle().allow_request(busy, view=None) for _ in range(8 + 12))

    fleet = [
        SimpleNamespace(auth=NodeToken(pk=10_000_000 + n), user=AnonymousUser(), META={})
        for n in range(1000)
    ]
    started = time.perf_counter()
    assert all(ApiRateThrottle().allow_request(request, view=None) for request in fleet)
    per_check_ms = (time.perf_counter() - started) / len(fleet) * 1000
    print(f"agent throttle check: {per_check_ms:.2f} ms")
    assert per_check_ms < 10  # against the 10 ms a call may take at 100 calls/s on one core


def test_a_runaway_agent_is_stopped_at_its_rate(settings):
    settings.API_THROTTLE_ENABLED = True
    settings.API_THROTTLE_RATES = PRODUCTION_RATES
    limit = int(PRODUCTION_RATES["agent"].split("/")[0])
    request = SimpleNamespace(auth=NodeToken(pk=9_999_999), user=AnonymousUser(), META={})
    answers = [ApiRateThrottle().allow_request(request, view=None) for _ in range(limit + 1)]
    assert answers == [True] * limit + [False]
