"""The demo's shared T4 as vGPU shares (issue 34), small: one cluster, a vGPU T4 flavor, bob's
three labs holding 30% / 30% / 40% of its GPU memory (15 GiB) and compute, each with a
namespace; quota lines written through ``quota_set_write``."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from quotas.choices import GPU_RESOURCE, GPUCORES_RESOURCE, GPUMEM_RESOURCE
from quotas.models import Cluster, ResourceFlavor
from quotas.services import QuotaItem, SchedulingQuotas, quota_set_write
from tenants.choices import IsolationLevel
from tenants.models import Namespace, Tenant
from tests.factories import ClusterFactory, TenantFactory, vgpu_flavor

MIB = 1024**2
SHARES = {"lab-nlp": 30, "lab-vision": 30, "lab-speech": 40}


@dataclass
class VgpuWorld:
    cluster: Cluster
    flavor: ResourceFlavor
    labs: dict[str, Tenant]


def memory_share(percent: int) -> Decimal:
    """A share of the T4's 15,360 MiB, in bytes (whole MiB)."""
    return Decimal(15360 * percent // 100 * MIB)


def vgpu_world(*, actor: object = None) -> VgpuWorld:
    cluster = ClusterFactory(name="demo-t4", hami_version="2.10.0")
    flavor = vgpu_flavor(cluster)
    labs = {}
    for slug, percent in SHARES.items():
        # The labs share a GPU: the time-sliced level, which holds vGPU shares too.
        lab = TenantFactory(slug=slug, isolation_level=IsolationLevel.TIME_SLICED)
        Namespace.objects.create(tenant=lab, name=f"{slug}-research")
        quota_set_write(
            tenant=lab,
            cluster=cluster,
            actor=None,
            items=[
                QuotaItem(flavor, GPU_RESOURCE, Decimal(percent // 10), Decimal(percent // 10)),
                QuotaItem(flavor, GPUMEM_RESOURCE, memory_share(percent), memory_share(percent)),
                QuotaItem(flavor, GPUCORES_RESOURCE, Decimal(percent), Decimal(percent)),
            ],
            scheduling=SchedulingQuotas(max_running_jobs=5, max_queued_jobs=20, max_pods=20),
        )
        labs[slug] = lab
    return VgpuWorld(cluster, flavor, labs)
