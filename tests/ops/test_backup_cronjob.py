"""deploy/kubernetes/backup/: the example backup CronJob, rendered with the real
``kubectl kustomize``, validates, meets the restricted Pod Security level, dumps with the flags
docs/operations.md gives, and its script, run against a real database, keeps a dump that
``pg_restore`` reads and deletes the dumps past the retention."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.deploy.manifests import DEPLOY, KUBERNETES_VERSIONS, Obj, examples, find, render
from tests.ops.test_backup_restore import commands, section_script, server_tools

BACKUP = DEPLOY / "backup"
# The volume types the restricted Pod Security Standard allows.
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
}  # fmt: skip


def cronjob() -> Obj:
    return find(render(BACKUP), "CronJob", "portal-backup")


def pod(obj: Obj) -> Obj:
    return dict(obj["spec"]["jobTemplate"]["spec"]["template"]["spec"])


def script(obj: Obj) -> str:
    [container] = pod(obj)["containers"]
    assert container["command"][:2] == ["/bin/sh", "-ec"]
    return str(container["command"][2])


def test_the_backup_renders_and_validates_and_is_in_no_overlay():
    objects = render(BACKUP)
    assert sorted((o["kind"], o["metadata"]["name"]) for o in objects) == [
        ("CronJob", "portal-backup"),
        ("NetworkPolicy", "portal-backup"),
        ("PersistentVolumeClaim", "portal-backups"),
    ]
    for obj in objects:
        assert obj["metadata"]["namespace"] == "gpu-quota-portal"
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)
    # pg_dump of the server's major version: the PostgreSQL that docker-compose.yml runs.
    compose = yaml.safe_load((DEPLOY.parents[1] / "docker-compose.yml").read_text())
    [container] = pod(cronjob())["containers"]
    assert container["image"] == compose["services"]["postgres"]["image"]
    for overlay in (DEPLOY / "overlays").rglob("kustomization.yaml"):
        assert "backup" not in overlay.read_text(), overlay


def test_the_backup_pod_meets_the_restricted_pod_security_level():
    job = cronjob()
    spec = pod(job)
    context = spec["securityContext"]
    assert context["runAsNonRoot"] is True and context["runAsUser"] > 0
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False
    assert not {"hostNetwork", "hostPID", "hostIPC"} & set(spec)
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        security = container["securityContext"]
        assert security["allowPrivilegeEscalation"] is False
        assert security["readOnlyRootFilesystem"] is True
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert "privileged" not in security and "ports" not in container
        assert {"cpu", "memory"} <= set(container["resources"]["limits"])
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert "emptyDir" in volumes[mounts["/tmp"]]  # noqa: S108 - a path in the pod
        assert volumes[mounts["/backups"]]["persistentVolumeClaim"]["claimName"] == "portal-backups"
    for volume in spec["volumes"]:
        assert set(volume) - {"name"} <= RESTRICTED_VOLUMES, volume
    assert job["spec"]["concurrencyPolicy"] == "Forbid"
    # The namespace it runs in enforces the restricted level (the portal's base).
    namespace = find(render(DEPLOY / "base"), "Namespace", "gpu-quota-portal")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_the_backup_reaches_the_database_and_nothing_reaches_it():
    job, policy = cronjob(), find(render(BACKUP), "NetworkPolicy", "portal-backup")
    labels = job["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["spec"]["ingress"] == []
    ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
    assert ports == {53, 5432}
    # The database URL comes from the portal's own Secret, whose example names the key.
    [secret] = [v["secret"] for v in pod(job)["volumes"] if "secret" in v]
    example = next(o for o in examples() if o["metadata"]["name"] == secret["secretName"])
    assert {item["key"] for item in secret["items"]} <= set(example["stringData"])


def test_the_backup_dumps_with_the_documented_flags():
    [documented] = commands(section_script("Backup"), "pg_dump")
    [dump] = [line.strip() for line in script(cronjob()).splitlines() if "pg_dump " in line]

    def flags(line: str) -> set[str]:
        return {w.split("=")[0] if w.startswith("--file=") else w for w in shlex.split(line)[1:]
                if w.startswith("--")}  # fmt: skip

    assert flags(dump) == flags(documented) == {"--format=custom", "--no-owner", "--file"}
    assert dump.endswith('"$DATABASE_URL"')


def _run(text: str, *, tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The CronJob's script with its pod's paths moved under ``tmp_path``."""
    local = text.replace("/backups", str(tmp_path / "backups")).replace(
        "/run/secrets/portal", str(tmp_path / "secrets")
    )
    return subprocess.run(
        ["/bin/sh", "-ec", local],
        env={**env, "KEEP_DAYS": "14", "HOME": str(tmp_path)},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


@pytest.mark.integration
def test_the_backup_script_keeps_a_readable_dump_and_deletes_old_ones(
    scratch_db: Callable[..., str], tmp_path: Path
) -> None:
    from tests.ops.conftest import run_python

    url = scratch_db("cronjob")
    env = server_tools(url)
    run_python(url, "manage.py", "migrate", "--noinput")
    (tmp_path / "backups").mkdir()
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "database-url").write_text(url)
    month_ago = time.time() - 30 * 86400
    old = tmp_path / "backups" / "portal-2026-01-01-0230.dump"
    recent = tmp_path / "backups" / "portal-recent.dump"
    stale = tmp_path / "backups" / ".portal-2026-01-01-0230.dump.partial"
    for path, when in ((old, month_ago), (recent, time.time() - 86400), (stale, month_ago)):
        path.write_text("x")
        os.utime(path, (when, when))

    done = _run(script(cronjob()), tmp_path=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    kept = sorted(p.name for p in (tmp_path / "backups").iterdir())
    [new] = [name for name in kept if re.fullmatch(r"portal-\d{4}-\d\d-\d\d-\d{4}\.dump", name)]
    assert kept == sorted([new, recent.name])  # the month-old dump and partial file are gone
    listing = subprocess.run(
        ["pg_restore", "--list", str(tmp_path / "backups" / new)],
        env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "TABLE public quotas_quota" in listing
    assert "FUNCTION public quotas_guarantee_total_keep()" in listing

    # A database it cannot reach: the job fails and keeps nothing, not even a partial file.
    (tmp_path / "secrets" / "database-url").write_text(url.rsplit("/", 1)[0] + "/no_such_db")
    failed = _run(script(cronjob()), tmp_path=tmp_path, env=env)
    assert failed.returncode != 0
    assert sorted(p.name for p in (tmp_path / "backups").iterdir()) == kept
