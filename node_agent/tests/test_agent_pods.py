"""Which pod a GPU process belongs to, read from ``/proc/PID/cgroup`` lines as cgroup v1 and v2
(cgroupfs and systemd drivers, containerd and CRI-O) write them."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_node_agent.pods import pod_uid_for_pid, pod_uid_from_cgroup

UID = "6b1c0a4e-1f2d-4c3b-9a8e-7d6c5b4a3f21"
UNDERSCORED = UID.replace("-", "_")


@pytest.mark.parametrize(
    "text",
    [
        # cgroup v1: one line per hierarchy.
        f"12:memory:/kubepods/burstable/pod{UID}/0123456789abcdef\n"
        f"11:cpu,cpuacct:/kubepods/burstable/pod{UID}/0123456789abcdef\n"
        "1:name=systemd:/kubepods/burstable\n",
        f"4:devices:/kubepods/pod{UID}/fedcba9876543210",  # guaranteed QoS
        f"3:pids:/kubepods/besteffort/pod{UID}/abc",
        # cgroup v2, systemd driver: the UID's dashes become underscores.
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UNDERSCORED}.slice/"
        "cri-containerd-0123456789abcdef.scope",
        f"0::/kubepods.slice/kubepods-pod{UNDERSCORED}.slice/crio-0123.scope",
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UNDERSCORED}.slice",
        # cgroup v2 read from another cgroup namespace (a containerised agent).
        f"0::/../../kubepods-burstable-pod{UNDERSCORED}.slice/cri-containerd-01.scope",
        # cgroup v2, cgroupfs driver.
        f"0::/kubepods/burstable/pod{UID}/0123456789abcdef",
    ],
)
def test_the_pod_uid_is_found(text: str) -> None:
    assert pod_uid_from_cgroup(text) == UID


def test_a_static_pod_has_a_hash_for_a_uid() -> None:
    text = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod3d7e0b6b5a2d4c1a9f8e7d6c5b4a3f2e.slice/cri-containerd-1.scope"
    assert pod_uid_from_cgroup(text) == "3d7e0b6b5a2d4c1a9f8e7d6c5b4a3f2e"


@pytest.mark.parametrize(
    "text",
    [
        "0::/user.slice/user-1000.slice/session-3.scope",
        "0::/system.slice/docker-0123456789abcdef.scope",
        "12:memory:/docker/0123456789abcdef",
        "0::/kubepods.slice/kubepods-burstable.slice",
        f"0::/system.slice/pod{UID}.service",  # a UID outside the kubepods tree
        "",
        "garbage",
    ],
)
def test_processes_outside_pods_have_none(text: str) -> None:
    assert pod_uid_from_cgroup(text) is None


def test_reading_proc(tmp_path: Path) -> None:
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "cgroup").write_text(f"0::/kubepods/pod{UID}/c1\n")
    assert pod_uid_for_pid(4242, proc_root=tmp_path) == UID
    assert pod_uid_for_pid(4343, proc_root=tmp_path) is None  # gone
