"""The GPU fleet pages (platform admins): nodes and GPUs, one GPU's MIG layout and its
isolation probes, the planner. Included by ``portal/pages.py`` in the portal's URL namespace."""

from django.urls import path

from gpu_agent.views import fleet, plan, probe

urlpatterns = [
    path("fleet/", fleet.fleet, name="fleet"),
    path("fleet/plan/", plan.fleet_plan, name="fleet-plan"),
    path("fleet/isolation/", probe.isolation, name="fleet-isolation"),
    path("fleet/plan/proposals/<int:pk>/", plan.plan_proposal, name="fleet-plan-proposal"),
    path("fleet/gpus/<str:uuid>/", fleet.gpu_detail, name="fleet-gpu"),
    path("fleet/gpus/<str:uuid>/layout/", fleet.gpu_layout, name="fleet-gpu-layout"),
    path("fleet/gpus/<str:uuid>/status/", fleet.gpu_layout_status, name="fleet-gpu-status"),
    path("fleet/gpus/<str:uuid>/probes/", probe.gpu_probe, name="fleet-gpu-probes"),
    path(
        "fleet/gpus/<str:uuid>/layout/validate/",
        fleet.GpuLayoutValidateView.as_view(),
        name="fleet-gpu-layout-validate",
    ),
]
