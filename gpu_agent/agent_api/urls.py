"""Routes of the agents (``agent/...``) and of the admins' fleet endpoints, included under
``/api/v1/`` by ``portal/api/urls.py``."""

from django.urls import path
from rest_framework.routers import DefaultRouter

from gpu_agent.agent_api.views import (
    AgentDesiredView,
    AgentProbeResultView,
    AgentProbesView,
    AgentRegisterView,
    AgentReportView,
    AgentResultView,
    GpuLayoutView,
    GpuProbeView,
    IsolationPairsView,
    NodeViewSet,
)

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("nodes", NodeViewSet, basename="node")

urlpatterns = [
    path("agent/register/", AgentRegisterView.as_view(), name="agent-register"),
    path("agent/report/", AgentReportView.as_view(), name="agent-report"),
    path("agent/desired/", AgentDesiredView.as_view(), name="agent-desired"),
    path("agent/result/", AgentResultView.as_view(), name="agent-result"),
    path("agent/probes/", AgentProbesView.as_view(), name="agent-probes"),
    path(
        "agent/probes/<int:id>/result/",
        AgentProbeResultView.as_view(),
        name="agent-probe-result",
    ),
    path("gpus/<str:uuid>/layout/", GpuLayoutView.as_view(), name="gpu-layout"),
    path("gpus/<str:uuid>/probes/", GpuProbeView.as_view(), name="gpu-probes"),
    path("isolation-pairs/", IsolationPairsView.as_view(), name="isolation-pairs"),
    *router.urls,
]
