"""factory_boy factories. Quotas are written through services, never saved raw."""

from __future__ import annotations

from decimal import Decimal

import factory

from quotas.choices import (
    CPU_RESOURCE,
    GPU_RESOURCE,
    GPUCORES_RESOURCE,
    GPUMEM_RESOURCE,
    MEMORY_RESOURCE,
    FlavorKind,
    SyncBackend,
    mig_resource,
)
from quotas.models import Cluster, FlavorResource, ResourceFlavor
from tenants.models import Tenant, User

GI = 1024**3
TI = 1024**4
PASSWORD = "correct-horse-battery"


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")

    @factory.post_generation
    def password(self, create: bool, extracted: str | None, **kwargs: object) -> None:
        self.set_password(extracted or PASSWORD)
        if create:
            self.save(update_fields=["password"])


class ClusterFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Cluster
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"cluster-{n}")
    display_name = factory.LazyAttribute(lambda c: c.name.title())
    elastic_cap_fraction = Decimal("0.5")
    # Tests that push to a cluster point it at the local API stand-in themselves.
    backend = SyncBackend.NONE


def gpu_flavor(
    cluster: Cluster,
    name: str = "a100-80gb",
    *,
    gpus: int = 16,
    cpu: int = 256,
    memory: int = 2 * TI,
    weight: str = "1",
    gpu_model: str = "NVIDIA A100-SXM4-80GB",
) -> ResourceFlavor:
    flavor = ResourceFlavor.objects.create(
        cluster=cluster,
        name=name,
        kind=FlavorKind.GPU,
        gpu_model=gpu_model,
        gpu_weight=Decimal(weight),
        node_labels={"nvidia.com/gpu.product": gpu_model.replace(" ", "-")},
    )
    FlavorResource.objects.bulk_create(
        [
            FlavorResource(flavor=flavor, resource=GPU_RESOURCE, capacity=Decimal(gpus)),
            FlavorResource(flavor=flavor, resource=CPU_RESOURCE, capacity=Decimal(cpu)),
            FlavorResource(flavor=flavor, resource=MEMORY_RESOURCE, capacity=Decimal(memory)),
        ]
    )
    return flavor


def mig_flavor(
    cluster: Cluster, profile: str = "1g.10gb", *, count: int = 14, weight: str = "0.143"
) -> ResourceFlavor:
    flavor = ResourceFlavor.objects.create(
        cluster=cluster,
        name=f"h100-mig-{profile.replace('.', '-')}",
        kind=FlavorKind.MIG,
        gpu_model="NVIDIA H100 80GB HBM3",
        mig_profile=profile,
        gpu_weight=Decimal(weight),
    )
    FlavorResource.objects.create(
        flavor=flavor, resource=mig_resource(profile), capacity=Decimal(count)
    )
    return flavor


def vgpu_flavor(
    cluster: Cluster,
    name: str = "t4-vgpu",
    *,
    gpus: int = 1,
    gpu_memory_mib: int = 15360,
    split: int = 10,
    gpu_model: str = "Tesla T4",
    weight: str = "0.25",
) -> ResourceFlavor:
    """GPUs shared through HAMi: capacity in vGPUs (``split`` a GPU), GPU memory (bytes) and
    compute (percent points, 100 a GPU), as the foundation of issue 34 counts them."""
    flavor = ResourceFlavor.objects.create(
        cluster=cluster,
        name=name,
        kind=FlavorKind.VGPU,
        gpu_model=gpu_model,
        gpu_weight=Decimal(weight),
        gpu_memory_mib=gpu_memory_mib,
        vgpu_split=split,
        node_labels={"nvidia.com/gpu.product": gpu_model.replace(" ", "-")},
    )
    FlavorResource.objects.bulk_create(
        [
            FlavorResource(flavor=flavor, resource=GPU_RESOURCE, capacity=Decimal(gpus * split)),
            FlavorResource(
                flavor=flavor,
                resource=GPUMEM_RESOURCE,
                capacity=Decimal(gpus * gpu_memory_mib * 1024**2),
            ),
            FlavorResource(flavor=flavor, resource=GPUCORES_RESOURCE, capacity=Decimal(gpus * 100)),
        ]
    )
    return flavor


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"team-{n}")
    display_name = factory.LazyAttribute(lambda t: t.slug.title())
