"""The fleet's timing settings, read in one place: the services, selectors, tasks and pages
that need a deadline or an interval ask here (``portal/settings/base.py`` reads them from the
environment and fails loudly on a bad value)."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings


def join_token_ttl_default() -> timedelta:
    """How long a join token works when its creator gives no TTL (``AGENT_JOIN_TOKEN_TTL_S``)."""
    return timedelta(seconds=settings.AGENT_JOIN_TOKEN_TTL_S)


def register_retry_window() -> timedelta:
    """How long after its join token was used an agent may repeat its registration with the
    same agent key (``AGENT_REGISTER_RETRY_S``)."""
    return timedelta(seconds=settings.AGENT_REGISTER_RETRY_S)


def stale_after() -> timedelta:
    """A node is stale after this long without a report (3 missed reports by default,
    ``AGENT_STALE_AFTER_S``)."""
    return timedelta(seconds=settings.AGENT_STALE_AFTER_S)


def last_report_write_every() -> timedelta:
    """A quiet node's last-report time is written at most this often
    (``AGENT_LAST_REPORT_WRITE_S``, at most half the stale period)."""
    return timedelta(seconds=settings.AGENT_LAST_REPORT_WRITE_S)


def layout_deadline() -> timedelta:
    """An open desired layout fails when the agent has not applied it within this, and an
    isolation probe without a result (``AGENT_LAYOUT_DEADLINE_S``)."""
    return timedelta(seconds=settings.AGENT_LAYOUT_DEADLINE_S)


def operator_settle_time() -> timedelta:
    """How long a config is in the GPU Operator's ConfigMap before a node label names it
    (``MIG_OPERATOR_SETTLE_S``: the kubelet refreshes mounted ConfigMaps late)."""
    return timedelta(seconds=settings.MIG_OPERATOR_SETTLE_S)


def cluster_nodes_stale_after() -> timedelta:
    """A cluster's reading of a node (``Node.cluster_seen_at``) confirms its GPUs for this
    long: read every minute, it ages out after five missed reads, the cluster out of reach
    (``CLUSTER_NODES_STALE_AFTER_S``, 300 s unless set)."""
    return timedelta(seconds=getattr(settings, "CLUSTER_NODES_STALE_AFTER_S", 300))


def agent_token_audience() -> str:
    """The audience of the ServiceAccount tokens in-cluster agents join with: their projected
    token is for the portal only (``AGENT_SERVICE_ACCOUNT_AUDIENCE``, ``gpu-quota-portal``)."""
    return str(getattr(settings, "AGENT_SERVICE_ACCOUNT_AUDIENCE", "gpu-quota-portal"))


def agent_service_account() -> str:
    """``NAMESPACE/NAME`` of the ServiceAccount whose pods join as node agents
    (``AGENT_SERVICE_ACCOUNT``, ``gpu-agent/gpu-agent``, as deploy/kubernetes/node-agent)."""
    return str(getattr(settings, "AGENT_SERVICE_ACCOUNT", "gpu-agent/gpu-agent"))
