"""Write what the portal owns in each cluster as YAML, for GitOps (Argo CD, Flux) or review.

    manage.py export_manifests --out DIR [--cluster NAME ...]

One directory per cluster: ``cluster.yaml`` (cluster-wide objects) and ``tenants/<slug>.yaml``,
each in apply order with sorted keys, so a diff between two exports shows only what changed.
Every object is validated first (Kubernetes and CRD schemas); nothing is written if one fails.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from quotas.kube.applier import write_manifests
from quotas.kube.validate import validate_objects
from quotas.models import Cluster
from quotas.sync import desired_objects


class Command(BaseCommand):
    help = "Export the Kubernetes objects the portal owns, per cluster, as YAML files."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", required=True, type=Path, help="Directory to write to.")
        parser.add_argument(
            "--cluster", action="append", default=[], help="Only this cluster (repeatable)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        clusters = Cluster.objects.order_by("name")
        if options["cluster"]:
            clusters = clusters.filter(name__in=options["cluster"])
            missing = set(options["cluster"]) - set(clusters.values_list("name", flat=True))
            if missing:
                raise CommandError(f"no such cluster: {', '.join(sorted(missing))}")
        exports = []
        for cluster in clusters:
            objects = desired_objects(cluster)
            errors = validate_objects(objects, kubernetes_version=cluster.kubernetes_version)
            if errors:
                raise CommandError(f"{cluster.name}: " + "; ".join(errors[:10]))
            exports.append((cluster, objects))
        for cluster, objects in exports:
            directory = options["out"] / cluster.name
            written = set(write_manifests(directory, objects))
            for stale in directory.rglob("*.yaml"):
                if stale not in written:
                    stale.unlink()  # a tenant that left: its file goes too
            self.stdout.write(f"{cluster.name}: {len(objects)} objects in {len(written)} files")
