"""Move a time-sliced flavor to vGPU shares through HAMi.

    manage.py flavor_to_vgpu --cluster NAME --flavor NAME --gpu-memory-mib 15360 \\
        [--vgpu-split 10] --actor USERNAME

Each tenant's shares become the same fraction of one GPU's memory (whole MiB, rounded down)
and compute (whole percent), and vGPUs; one transaction, audited, pushed after commit
(``quotas.services.flavor_vgpu_convert``). Refused when the cluster has no new enough HAMi.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import ApplicationError
from quotas.models import ResourceFlavor
from quotas.services import flavor_vgpu_convert
from quotas.services.vgpu_amounts import vgpu_amount_words
from tenants.models import User


class Command(BaseCommand):
    help = "Move a time-sliced flavor to vGPU shares (HAMi), keeping each tenant's fraction."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", required=True)
        parser.add_argument("--flavor", required=True)
        parser.add_argument("--gpu-memory-mib", type=int, help="One GPU's memory (a T4: 15360).")
        parser.add_argument("--vgpu-split", type=int, help="vGPUs per GPU (HAMi's split).")
        parser.add_argument("--actor", required=True, help="The platform admin doing it.")

    def handle(self, *args: Any, **options: Any) -> None:
        flavor = ResourceFlavor.objects.filter(
            cluster__name=options["cluster"], name=options["flavor"]
        ).first()
        if flavor is None:
            raise CommandError(f"no flavor {options['flavor']!r} on {options['cluster']!r}")
        actor = User.objects.filter(username=options["actor"], is_platform_admin=True).first()
        if actor is None:
            raise CommandError(f"{options['actor']!r} is not a platform admin")
        try:
            done = flavor_vgpu_convert(
                flavor=flavor,
                gpu_memory_mib=options["gpu_memory_mib"],
                vgpu_split=options["vgpu_split"],
                actor=actor,
            )
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        for share in done.shares:
            amounts = ", ".join(
                vgpu_amount_words(line.limit, line.resource) for line in share.lines
            )
            rest = f" (rounded down: {share.rest})" if share.rest else ""
            self.stdout.write(f"{share.tenant}: limit {amounts}{rest}")
        self.stdout.write(self.style.SUCCESS(f"{flavor.name} now gives vGPU shares (HAMi)."))
