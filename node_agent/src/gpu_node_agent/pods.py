"""Which Kubernetes pod a GPU process belongs to, from its cgroup (``/proc/PID/cgroup``).

The kubelet puts every pod in a cgroup named after its UID:

- cgroup v1, or v2 with the cgroupfs driver:
  ``11:memory:/kubepods/burstable/pod6b1c0a4e-1f2d-4c3b-9a8e-7d6c5b4a3f21/<container>``
  (guaranteed pods sit right under ``/kubepods/pod<uid>/``);
- cgroup v2 with the systemd driver (the UID's dashes become underscores):
  ``0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6b1c0a4e_1f2d_4c3b_9a8e_7d6c5b4a3f21.slice/cri-containerd-<id>.scope``.

Static (mirror) pods have a 32-hex-digit UID (the config hash) instead of a UUID. Read from a
container with its own cgroup namespace, the path may start with ``/../..``; the pod's part is
still in it. The agent needs ``hostPID`` to see the GPU processes' ``/proc`` entries at all.
"""

from __future__ import annotations

import re
from pathlib import Path

_HEX = "[0-9a-fA-F]"
_UUID = f"{_HEX}{{8}}[-_]{_HEX}{{4}}[-_]{_HEX}{{4}}[-_]{_HEX}{{4}}[-_]{_HEX}{{12}}"
# "pod<uid>" as a whole path component (v1) or slice-name part (v2 systemd).
_POD = re.compile(rf"(?:^|[/-])pod(?P<uid>{_UUID}|{_HEX}{{32}})(?=$|[/.])")


def pod_uid_from_cgroup(text: str) -> str | None:
    """The pod UID in the contents of a ``/proc/PID/cgroup`` file, or None (not in a pod)."""
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        path = parts[2]
        if "kubepods" not in path:
            continue
        for component in path.split("/"):
            match = _POD.search(component)
            if match:
                return match.group("uid").replace("_", "-").lower()
    return None


def pod_uid_for_pid(pid: int, *, proc_root: Path | str = "/proc") -> str | None:
    """The pod UID of a process on this host, or None when it is not in a pod (or gone)."""
    try:
        text = (Path(proc_root) / str(pid) / "cgroup").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return pod_uid_from_cgroup(text)
