"""The agent's loop against a small portal speaking PROTOCOL.md over HTTP (stdlib server in a
thread), with the fake backend (NVML backend over the simulated NVML) as the node: reports,
applies, results, backoff (the sleep and the jitter are injected, nothing sleeps), the state
file across restarts, dry runs, and the join-token flow of the command line."""

from __future__ import annotations

import io
import json
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_node_agent.runner import (
    STATE_FILE,
    TOKEN_FILE,
    AgentState,
    PortalClient,
    ReportInvalid,
    main,
)
from gpu_node_agent.testing.fake import build_fake_node
from gpu_node_agent.testing.portal import (
    A100,
    NODE,
    TOKEN,
    Clock,
    FakePortal,
    _shape_errors,
    fake_node,
    make_agent,
)
from gpu_spec.simulated import FakeSpecError, parse_fake_gpus


@pytest.fixture
def portal() -> Iterator[FakePortal]:
    server = FakePortal()
    yield server
    server.close()


def results(portal: FakePortal) -> list[tuple[int, str, str]]:
    return [(r["generation"], r["state"], r["message"]) for r in portal.results]


# -- a cycle --------------------------------------------------------------------------------------


def test_a_cycle_reports_applies_and_posts_the_result(portal: FakePortal, tmp_path: Path) -> None:
    node = fake_node(tmp_path)
    uuid = node.nvml.gpu_uuids()[0]
    portal.add_layout(uuid, 1, ("3g.40gb", 0), ("1g.10gb", 4))
    agent, _ = make_agent(portal.url, tmp_path, node)
    assert agent.run(once=True) == 0
    assert portal.paths() == [
        "POST report/",
        "GET desired/",
        "POST result/",
        "POST result/",
        "POST report/",
    ]
    assert results(portal) == [
        (1, "applying", ""),
        (1, "success", "created 2, destroyed 0, kept 0 GPU instances"),
    ]
    first, second = portal.reports
    assert first["node"] == NODE and first["driver_version"]
    assert [g["applied_generation"] for g in first["gpus"]] == [0, 0]
    gpu = second["gpus"][0]
    assert gpu["applied_generation"] == 1
    assert gpu["utilization_pct"] is None  # MIG mode
    assert [(i["profile"], i["start"], i["size"], len(i["ci_ids"])) for i in gpu["instances"]] == [
        ("3g.40gb", 0, 4, 1),
        ("1g.10gb", 4, 1, 1),
    ]
    assert portal.layouts == {}


def test_the_report_names_processes_and_their_pods(portal: FakePortal, tmp_path: Path) -> None:
    node = fake_node(tmp_path, f"{A100}:1,NVIDIA H100 80GB HBM3:1:nomig")
    created = node.backend.create_gpu_instance(0, "7g.80gb", 0)
    node.backend.create_compute_instance(0, created.gi_id)
    in_pod = node.nvml.start_process(0, gi_id=created.gi_id, used_memory_mib=512, pod_uid="u-1")
    bare = node.nvml.start_process(1, used_memory_mib=100)
    agent, _ = make_agent(portal.url, tmp_path, node)
    report = agent.inventory()
    assert _shape_errors(report) == []
    mig, plain = report["gpus"]
    (instance,) = mig["instances"]
    assert (instance["gi_id"], instance["memory_used_mib"], instance["utilization_pct"]) == (
        created.gi_id,
        512,
        None,
    )
    assert instance["processes"] == [{"pid": in_pod, "used_memory_mib": 512, "pod_uid": "u-1"}]
    assert mig["processes"] == []
    assert plain["instances"] == []
    # Outside MIG each process also has its SM use (nvmlDeviceGetProcessUtilization): none
    # per MIG instance, as NVML has none.
    assert plain["processes"] == [
        {"pid": bare, "used_memory_mib": 100, "pod_uid": None, "sm_util_pct": 0}
    ]
    assert plain["utilization_pct"] == 0
    node.nvml.set_utilization(1, 60)
    busy = agent.inventory()["gpus"][1]
    assert busy["processes"][0]["sm_util_pct"] == 60 and _shape_errors(agent.inventory()) == []


def test_a_busy_instance_is_refused_and_reported(portal: FakePortal, tmp_path: Path) -> None:
    node = fake_node(tmp_path)
    uuid = node.nvml.gpu_uuids()[0]
    created = node.backend.create_gpu_instance(0, "3g.40gb", 4)
    node.backend.create_compute_instance(0, created.gi_id)
    pid = node.nvml.start_process(0, gi_id=created.gi_id, pod_uid="6b1c-pod")
    portal.add_layout(uuid, 2, ("7g.80gb", 0))
    agent, _ = make_agent(portal.url, tmp_path, node)
    assert agent.run(once=True) == 0
    assert results(portal) == [
        (
            2,
            "failed",
            f"busy: pid {pid} (pod 6b1c-pod) on GPU instance {created.gi_id} (3g.40gb at slice 4)",
        )
    ]
    assert [(i.gi_id, i.profile) for i in node.backend.list_gpu_instances(0)] == [
        (created.gi_id, "3g.40gb")
    ]


def test_a_mig_mode_change_reports_reboot_required_once(portal: FakePortal, tmp_path: Path) -> None:
    node = fake_node(tmp_path, f"{A100}:1:nomig")
    uuid = node.nvml.gpu_uuids()[0]
    portal.add_layout(uuid, 1, ("7g.80gb", 0))
    agent, _ = make_agent(portal.url, tmp_path, node)
    assert agent.run(max_cycles=3) == 0
    assert [state for _, state, _ in results(portal)] == ["applying", "reboot-required"]
    # After the reset the portal lists the layout again and the agent applies it.
    node.nvml.reset_gpu(0)
    portal.add_layout(uuid, 1, ("7g.80gb", 0))
    assert agent.run(once=True) == 0
    assert [state for _, state, _ in results(portal)][2:] == ["applying", "success"]
    assert [(i.profile, i.start) for i in node.backend.list_gpu_instances(0)] == [("7g.80gb", 0)]


# -- backoff ---------------------------------------------------------------------------------------


def test_a_refused_token_backs_off_exponentially(portal: FakePortal, tmp_path: Path) -> None:
    agent, clock = make_agent(
        portal.url, tmp_path, fake_node(tmp_path), token="revoked", random=lambda: 1.0
    )
    assert agent.run(max_cycles=5) == 1
    assert clock.waits == [20.0, 40.0, 80.0, 160.0]
    assert agent.failures == 5
    assert set(portal.paths()) == {"POST report/"}  # never went further


def test_a_portal_that_is_down_is_retried_with_capped_jittered_backoff(tmp_path: Path) -> None:
    closed = FakePortal()
    url = closed.url
    closed.close()  # nothing listens there now: connection refused
    draws = iter([0.0, 1.0, 0.0, 1.0, 0.5])
    agent, clock = make_agent(
        url, tmp_path, fake_node(tmp_path), random=lambda: next(draws), max_backoff=60.0
    )
    assert agent.run(max_cycles=6) == 1
    # interval 10: ceilings 20, 40, 60 (capped), 60, 60; full jitter in [ceiling/2, ceiling].
    assert clock.waits == [10.0, 40.0, 30.0, 60.0, 45.0]


def test_after_an_outage_the_interval_is_back_with_its_jitter(
    portal: FakePortal, tmp_path: Path
) -> None:
    draws = iter([1.0, 0.0, 1.0])
    agent, clock = make_agent(portal.url, tmp_path, fake_node(tmp_path), random=lambda: next(draws))
    portal.down_with = 503
    assert agent.run_cycle() is False
    assert agent.run_cycle() is False
    assert [agent.delay(False)] == [40.0]
    portal.down_with = None
    assert agent.run_cycle() is True
    assert agent.failures == 0
    assert agent.delay(True) == pytest.approx(8.0)  # interval -20%
    assert agent.delay(True) == pytest.approx(12.0)  # interval +20%
    assert clock.waits == []


# -- restarts ---------------------------------------------------------------------------------------


def test_a_restart_does_not_redo_the_work(portal: FakePortal, tmp_path: Path) -> None:
    node = fake_node(tmp_path)
    uuid = node.nvml.gpu_uuids()[0]
    portal.add_layout(uuid, 3, ("4g.40gb", 0), ("3g.40gb", 4))
    agent, _ = make_agent(portal.url, tmp_path, node)
    assert agent.run(once=True) == 0
    ids = [i.gi_id for i in node.backend.list_gpu_instances(0)]
    saved = json.loads((tmp_path / STATE_FILE).read_text())
    assert saved["gpus"][uuid]["applied_generation"] == 3
    assert saved["gpus"][uuid]["last_result"]["posted"] is True

    # A new process: the simulated GPUs come back from their file, the agent from its state.
    # The portal lists generation 3 again (say its answer to the result was lost).
    portal.add_layout(uuid, 3, ("4g.40gb", 0), ("3g.40gb", 4))
    portal.results.clear()
    again = fake_node(tmp_path)
    restarted, _ = make_agent(portal.url, tmp_path, again)
    assert restarted.run(once=True) == 0
    assert results(portal) == [(3, "success", "already applied (2 GPU instances)")]
    assert [i.gi_id for i in again.backend.list_gpu_instances(0)] == ids
    assert portal.reports[-1]["gpus"][0]["applied_generation"] == 3


def test_a_layout_lost_to_a_reboot_is_restored_at_start(portal: FakePortal, tmp_path: Path) -> None:
    node = fake_node(tmp_path)
    uuid = node.nvml.gpu_uuids()[1]
    portal.add_layout(uuid, 1, ("2g.20gb", 0), ("2g.20gb", 2), ("3g.40gb", 4))
    agent, _ = make_agent(portal.url, tmp_path, node)
    assert agent.run(once=True) == 0
    node.nvml.reboot()  # GPU instances do not survive it
    again = fake_node(tmp_path)
    assert again.backend.list_gpu_instances(1) == []
    restarted, _ = make_agent(portal.url, tmp_path, again)
    assert restarted.run(once=True) == 0
    restored = [(i.profile, i.start, len(i.ci_ids)) for i in again.backend.list_gpu_instances(1)]
    assert restored == [("2g.20gb", 0, 1), ("2g.20gb", 2, 1), ("3g.40gb", 4, 1)]
    assert len(portal.reports[-1]["gpus"][1]["instances"]) == 3


# -- dry run ----------------------------------------------------------------------------------------


def test_a_dry_run_prints_the_steps_and_changes_nothing(portal: FakePortal, tmp_path: Path) -> None:
    node = fake_node(tmp_path)
    uuid = node.nvml.gpu_uuids()[0]
    created = node.backend.create_gpu_instance(0, "3g.40gb", 4)
    node.backend.create_compute_instance(0, created.gi_id)
    portal.add_layout(uuid, 5, ("7g.80gb", 0))
    before = node.nvml.to_dict()
    out = io.StringIO()
    agent, _ = make_agent(portal.url, tmp_path, node, dry_run=True, out=out)
    assert agent.run(once=True) == 0
    printed = out.getvalue()
    assert f"GPU 0 ({A100}) {uuid}, generation 5:" in printed
    assert (
        f"1. destroy compute instance 0 of GPU instance {created.gi_id} (3g.40gb at slice 4)"
        in printed
    )
    assert "3. create GPU instance 7g.80gb at slice 0" in printed
    assert "4. create a full compute instance in the new 7g.80gb at slice 0" in printed
    assert node.nvml.to_dict() == before
    assert portal.paths() == ["GET desired/"]
    assert (
        not (tmp_path / STATE_FILE).exists()
        or "last_result" not in (tmp_path / STATE_FILE).read_text()
    )


# -- command line -----------------------------------------------------------------------------------


def _main(argv: list[str]) -> int:
    return main(argv, sleep=Clock())


def test_the_join_token_registers_and_saves_the_node_token(
    portal: FakePortal, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    common = ["--portal", portal.url, "--backend", "fake", "--fake-gpus", f"{A100}:1"]
    assert _main([*common, "--state-dir", str(state), "--join-token", "join-1", "--once"]) == 0
    token_file = state / TOKEN_FILE
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    token = token_file.read_text().strip()
    assert portal.tokens[token] == NODE
    assert portal.paths()[:2] == ["POST register/", "POST report/"]
    assert portal.reports[-1]["node"] == NODE
    # Restarted without the join token: the saved token does.
    assert _main([*common, "--state-dir", str(state), "--once"]) == 0
    assert portal.paths()[-1] == "POST report/"  # nothing pending: no need to ask for layouts
    assert len(portal.reports) == 2
    # A used join token is refused.
    assert (
        _main([*common, "--state-dir", str(tmp_path / "other"), "--join-token", "join-1", "--once"])
        == 2
    )


def test_registering_sends_the_agents_own_key_kept_across_restarts(
    portal: FakePortal, tmp_path: Path
) -> None:
    """The key lets the portal tell this agent's retry from another agent holding the same
    used join token: made once, private, and the same after a restart."""
    state = tmp_path / "state"
    common = ["--portal", portal.url, "--backend", "fake", "--fake-gpus", f"{A100}:1"]
    assert _main([*common, "--state-dir", str(state), "--join-token", "join-1", "--once"]) == 0
    key = portal.register_bodies[-1]["agent_key"]
    assert len(key) >= 16
    assert stat.S_IMODE((state / "agent-key").stat().st_mode) == 0o600
    assert AgentState(state).agent_key() == key  # a restarted agent sends the same one
    assert AgentState(tmp_path / "other").agent_key() != key


def test_a_portal_that_predates_the_agent_key_is_asked_without_it(
    portal: FakePortal, tmp_path: Path
) -> None:
    portal.knows_agent_key = False
    client = PortalClient(portal.url)
    node, token = client.register("join-1", NODE, AgentState(tmp_path).agent_key())
    assert (node, portal.tokens[token]) == (NODE, NODE)
    assert ["agent_key" in body for body in portal.register_bodies] == [True, False]


def test_a_revoked_token_is_replaced_by_a_new_join_token(
    portal: FakePortal, tmp_path: Path
) -> None:
    state = AgentState(tmp_path)
    state.write_token("revoked-token")
    portal.join_tokens["join-2"] = NODE
    argv = [
        "--portal",
        portal.url,
        "--backend",
        "fake",
        "--fake-gpus",
        A100,
        "--state-dir",
        str(tmp_path),
        "--report-protocol",
        "1",  # the fake portal's
    ]
    join_file = tmp_path / "join" / NODE  # as a Secret with a key per node mounts it
    join_file.parent.mkdir()
    join_file.write_text("join-2\n")
    assert _main([*argv, "--node", NODE, "--join-token-file", str(join_file), "--once"]) == 0
    assert portal.tokens[(tmp_path / TOKEN_FILE).read_text().strip()] == NODE
    assert portal.paths()[:3] == ["POST report/", "POST register/", "POST report/"]
    # The used join token is still mounted: it is not tried again, and not needed.
    assert _main([*argv, "--node", NODE, "--join-token-file", str(join_file), "--once"]) == 0
    assert portal.paths()[3:] == ["POST report/"]
    # A missing file (the Secret has no key for this node) is fine once registered.
    assert _main([*argv, "--join-token-file", str(tmp_path / "absent"), "--once"]) == 0


def test_in_a_cluster_the_pods_service_account_token_registers_instead_of_a_join_token(
    portal: FakePortal, tmp_path: Path
) -> None:
    """The token file is read at each use (the kubelet rotates it): after the portal refuses
    the node token, the token now in the file registers the node again."""
    token_file = tmp_path / "sa" / "token"
    token_file.parent.mkdir()
    token_file.write_text("sa-token-1\n")
    portal.service_account_tokens["sa-token-1"] = NODE
    argv = [
        "--portal", portal.url, "--backend", "fake", "--fake-gpus", A100,
        "--state-dir", str(tmp_path / "state"), "--report-protocol", "1",
        "--service-account-token-file", str(token_file), "--cluster", "demo-h100",
        "--kubernetes-node", NODE, "--join-token", "join-1", "--once",
    ]  # fmt: skip
    assert _main(argv) == 0
    [body] = portal.register_bodies
    assert body["service_account_token"] == "sa-token-1"
    assert (body["cluster"], body["node"]) == ("demo-h100", NODE)
    assert "join_token" not in body and "join-1" in portal.join_tokens  # not spent
    # Revoked; meanwhile the kubelet rotated the token.
    portal.tokens.clear()
    token_file.write_text("sa-token-2\n")
    portal.service_account_tokens = {"sa-token-2": NODE}
    assert _main(argv) == 0
    assert portal.register_bodies[-1]["service_account_token"] == "sa-token-2"
    assert portal.paths()[-3:] == ["POST report/", "POST register/", "POST report/"]


def test_a_refused_service_account_token_exits_2_and_without_the_file_a_join_token_is_used(
    portal: FakePortal, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("not-vouched-for")
    common = ["--portal", portal.url, "--backend", "fake", "--fake-gpus", A100, "--once"]
    refused = [*common, "--state-dir", str(tmp_path / "a"), "--service-account-token-file"]
    assert _main([*refused, str(token_file)]) == 2
    outside = [*common, "--state-dir", str(tmp_path / "b"), "--join-token", "join-1"]
    assert _main([*outside, "--service-account-token-file", str(tmp_path / "absent")]) == 0
    assert "join_token" in portal.register_bodies[-1]


def test_the_command_line_dry_run(
    portal: FakePortal, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node = fake_node(tmp_path, f"{A100}:1")
    portal.add_layout(node.nvml.gpu_uuids()[0], 1, ("7g.80gb", 0))
    argv = [
        "--portal",
        portal.url,
        "--token",
        TOKEN,
        "--node",
        NODE,
        "--backend",
        "fake",
        "--fake-gpus",
        f"{A100}:1",
        "--state-dir",
        str(tmp_path),
        "--dry-run",
    ]
    assert _main(argv) == 0
    assert "1. create GPU instance 7g.80gb at slice 0" in capsys.readouterr().out
    assert fake_node(tmp_path, f"{A100}:1").backend.list_gpu_instances(0) == []
    assert portal.paths() == ["GET desired/"]


def test_the_command_line_refuses_bad_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--state-dir", str(tmp_path), "--token", TOKEN]
    for argv, message in (
        ([*base], "--portal"),
        ([*base, "--portal", "file:///etc/passwd"], "http(s) URL"),
        (["--portal", "http://127.0.0.1:9", "--state-dir", str(tmp_path)], "no node token"),
        ([*base, "--portal", "http://127.0.0.1:9", "--interval", "0"], "greater than 0"),
        ([*base, "--portal", "http://127.0.0.1:9", "--backend", "fake"], "--fake-gpus"),
        (
            [
                *base,
                "--portal",
                "http://127.0.0.1:9",
                "--backend",
                "fake",
                "--fake-gpus",
                "NVIDIA RTX 9999",
            ],
            "not a GPU the fake backend knows",
        ),
    ):
        with pytest.raises(SystemExit) as exited:
            _main(argv)
        assert exited.value.code == 2
        assert message in capsys.readouterr().err, argv


def test_dry_run_does_not_register(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--portal", "http://127.0.0.1:9", "--state-dir", str(tmp_path), "--join-token", "J"]
    with pytest.raises(SystemExit):
        _main([*argv, "--dry-run"])
    assert "--dry-run needs a node token" in capsys.readouterr().err


def test_the_nvml_backend_without_pynvml_says_what_to_install(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # importing it fails, installed or not
    argv = ["--portal", "http://127.0.0.1:9", "--state-dir", str(tmp_path), "--token", TOKEN]
    assert _main([*argv, "--backend", "nvml", "--once"]) == 2
    assert "nvidia-ml-py==13.615.71" in caplog.text


def test_fake_gpu_specs() -> None:
    specs = parse_fake_gpus("NVIDIA A100-SXM4-80GB:2, NVIDIA H100 80GB HBM3:1:nomig,NVIDIA A30")
    assert [(s.name, s.mig) for s in specs] == [
        (A100, True),
        (A100, True),
        ("NVIDIA H100 80GB HBM3", False),
        ("NVIDIA A30", True),
    ]
    for bad in ("", f"{A100}:0", f"{A100}:x", f"{A100}:1:maybe", "NVIDIA T4"):
        with pytest.raises(FakeSpecError):
            parse_fake_gpus(bad)


def test_fake_gpu_uuids_differ_between_nodes(tmp_path: Path) -> None:
    one = build_fake_node(A100, state_path=tmp_path / "a.json", seed="node-a")
    two = build_fake_node(A100, state_path=tmp_path / "b.json", seed="node-b")
    assert one.nvml.gpu_uuids() != two.nvml.gpu_uuids()
    # Other GPUs than the saved ones: a fresh simulated node.
    other = build_fake_node(f"{A100}:2", state_path=tmp_path / "a.json", seed="node-a")
    assert len(other.nvml.gpu_uuids()) == 2


def test_an_agent_meeting_a_portal_without_protocol_2_falls_back_to_protocol_1(
    portal: FakePortal, tmp_path: Path
) -> None:
    node = fake_node(tmp_path)
    agent, _ = make_agent(portal.url, tmp_path, node, report_protocol=2)

    assert agent.run(once=True) == 0
    assert agent.run(once=True) == 0

    # The first report (protocol 2) was refused; the same inventory went whole at once, and
    # every report after it is protocol 1, whole.
    assert portal.paths() == ["POST report/"] * 3
    assert len(portal.reports) == 2
    assert all("protocol" not in r and len(r["gpus"]) == 2 for r in portal.reports)


def test_a_fake_gpu_can_start_partitioned_by_a_layout() -> None:
    spec = "NVIDIA H100 80GB HBM3:2:mig:3g.40gb/4x1g.10gb,NVIDIA H100 80GB HBM3:1"
    assert [g.instances for g in parse_fake_gpus(spec)] == [
        ("3g.40gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"),
    ] * 2 + [()]
    node = build_fake_node(spec, state_path=None)
    placed = [
        sorted((i.profile, i.start, i.ci_ids) for i in node.backend.list_gpu_instances(index))
        for index in range(3)
    ]
    assert (
        placed[0]
        == placed[1]
        == [
            ("1g.10gb", 0, (0,)),
            ("1g.10gb", 1, (0,)),
            ("1g.10gb", 2, (0,)),
            ("1g.10gb", 3, (0,)),
            ("3g.40gb", 4, (0,)),
        ]
    )
    assert placed[2] == []


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("NVIDIA H100 80GB HBM3:1:mig:3x3g.40gb", "not a layout of NVIDIA H100 80GB HBM3"),
        ("NVIDIA H100 80GB HBM3:1:nomig:1g.10gb", "only a GPU in MIG mode"),
        ("NVIDIA H100 80GB HBM3:1:mig:2x9g.99gb", "not a layout of"),
    ],
)
def test_a_fake_layout_that_breaks_the_mig_rules_is_refused(spec: str, says: str) -> None:
    with pytest.raises(FakeSpecError, match=says):
        parse_fake_gpus(spec)


def test_a_fake_node_simulates_a_gpu_without_mig_outside_the_catalogue(tmp_path: Path) -> None:
    (t4,) = parse_fake_gpus("Tesla T4:1:nomig")
    assert (t4.name, t4.mig, t4.memory_mib) == ("Tesla T4", False, 15360)
    node = fake_node(tmp_path, "Tesla T4:2:nomig")
    gpus = node.backend.list_gpus()
    assert [(g.name, g.memory_total_mib, g.mig_capable) for g in gpus] == [
        ("Tesla T4", 15360, False)
    ] * 2
    for bad, says in (
        ("Tesla T4", "write it Tesla T4:COUNT:nomig"),
        ("Tesla T4:1:mig", "has no MIG mode"),
        ("NVIDIA T4:1:nomig", "GPUs without MIG"),
    ):
        with pytest.raises(FakeSpecError, match=says):
            parse_fake_gpus(bad)


def test_a_report_the_schema_refuses_is_not_sent(portal: FakePortal) -> None:
    client = PortalClient(portal.url, token=TOKEN, timeout=5)
    with pytest.raises(ReportInvalid, match=r"not sent.*gpus\[0\]\.index: This field is required"):
        client.report(
            {
                "node": NODE,
                "sent_at": "2026-12-03T07:00:00Z",
                "gpus": [{"uuid": "nvidia0"}],
            }
        )
    assert portal.paths() == []
