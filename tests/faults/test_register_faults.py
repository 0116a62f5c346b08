"""A registration whose answer is lost: the portal used the join token, but the agent's HTTP
client gave up (a timeout) before the node token arrived. The portal is the real one
(``live_server``), the agent's registration loop the real one (``_register`` with the
agent's ``PortalClient`` and its state directory): the retry gets the node, not "used or
expired"; another agent holding the same used join token is still refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpu_agent.models import NodeToken
from gpu_agent.services.nodes import join_token_create, node_token_authenticate
from gpu_node_agent.runner import AgentState, PortalAuthError, PortalClient, PortalUnavailable
from gpu_node_agent.runner import _register as agent_register_loop
from tests.faults.invariants import Outcome, record

pytestmark = [pytest.mark.integration]

NODE = "gpu-node-r1"


class AnswerLost(PortalClient):
    """The first registration reaches the portal, which answers; the agent never reads it
    (its timeout fired), as ``urlopen`` timing out raises ``PortalUnavailable``."""

    lost: list[str]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lost = []

    def register(self, join_token: str, hostname: str, agent_key: str = "") -> tuple[str, str]:
        node, token = super().register(join_token, hostname, agent_key)
        if not self.lost:
            self.lost.append(token)
            raise PortalUnavailable("POST register/: timed out")
        return node, token


def test_a_registration_retried_after_a_lost_answer_gets_the_node(
    transactional_db, live_server, world, tmp_path: Path
) -> None:
    _, join = join_token_create(node_name=NODE, actor=world.admin, cluster=world.h100)
    client = AnswerLost(live_server.url, timeout=5)
    state = AgentState(tmp_path / "agent")
    waits: list[float] = []
    node, token = agent_register_loop(
        client, state, join, NODE, sleep=waits.append, max_backoff=1.0
    )
    assert node == NODE and len(waits) == 1  # one retry, after the lost answer
    assert (tmp_path / "agent" / "node-token").read_text().strip() == token
    seen = node_token_authenticate(secret=token)
    assert seen is not None and seen.node.name == NODE
    # The token whose answer was lost no longer works; only the one the agent holds does.
    assert node_token_authenticate(secret=client.lost[0]) is None
    assert NodeToken.objects.filter(node__name=NODE, revoked_at__isnull=True).count() == 1
    # The agent can report with it.
    reporter = PortalClient(live_server.url, token=token, timeout=5)
    answer = reporter.report({"node": NODE, "sent_at": "2026-12-03T08:00:00Z", "gpus": []})
    assert answer.desired_generation == 0
    # Another agent (its own state directory, so its own key) with the same join token: refused.
    other = PortalClient(live_server.url, timeout=5)
    with pytest.raises(PortalAuthError):
        other.register(join, NODE, AgentState(tmp_path / "other").agent_key())
    with pytest.raises(PortalAuthError):
        other.register(join, NODE)  # an agent that sends no key
    assert node_token_authenticate(secret=token) is not None  # still the agent's
    record(
        "agent registration answer lost (client timeout)",
        injected=1,
        outcome=Outcome(converge_s=0.0, approvals=0, lost=0),
    )
