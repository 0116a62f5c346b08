"""The node agent as a GPU node runs it: ``deploy/kubernetes/node-agent/`` rendered with the real
``kubectl kustomize`` and checked against what NVIDIA's container runtime requires of a container
that asks for the MIG capability devices, the one agent DaemonSet of the repository, and the
agent's image (``node_agent/Dockerfile``) built from its own distributions with every import
they make declared.

What the runtime requires, from the NVIDIA Container Toolkit (nvidia-container-runtime-hook,
``getNvidiaConfig`` and ``IsPrivileged``; the JIT-CDI mode since toolkit 1.20.1 the same): a GPU
container (``NVIDIA_VISIBLE_DEVICES`` set) that sets ``NVIDIA_MIG_CONFIG_DEVICES`` or
``NVIDIA_MIG_MONITOR_DEVICES`` is refused unless CAP_SYS_ADMIN is in its bounding capability
set. In CDI mode, older toolkits do not inject those devices at all; a privileged container gets
every host device from the container runtime, whichever the mode, which is why NVIDIA's MIG
manager and DCGM exporter run privileged, and so does the agent.
"""

from __future__ import annotations

import ast
import copy
import importlib.metadata
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_node_agent import runner
from tests.deploy.manifests import DEPLOY, ROOT, Obj, find, overlay, pod_spec, render

NODE_AGENT = DEPLOY / "node-agent"
OVERLAYS_WITH_AGENTS = ["in-cluster", "outside/managed-cluster"]
MIG_VARIABLES = ("NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES")
# containerd's and CRI-O's default capabilities for a container that is not privileged (no
# CAP_SYS_ADMIN among them).
RUNTIME_DEFAULT_CAPABILITIES = frozenset(
    {
        "CHOWN",
        "DAC_OVERRIDE",
        "FSETID",
        "FOWNER",
        "MKNOD",
        "NET_RAW",
        "SETGID",
        "SETUID",
        "SETFCAP",
        "SETPCAP",
        "NET_BIND_SERVICE",
        "SYS_CHROOT",
        "KILL",
        "AUDIT_WRITE",
    }
)
# The contract with the portal's ServiceAccount-token join (issue 32, item 2).
PORTAL_TOKEN_DIR = "/var/run/secrets/gpu-portal"
PORTAL_TOKEN_FLAG = "--service-account-token-file"


def bounding_capabilities(container: Obj) -> set[str]:
    """The container's bounding capability set as the container runtime builds it from the
    securityContext: every capability when privileged, else the runtime's defaults less
    ``drop`` (``ALL``: every one) plus ``add``."""
    context = container.get("securityContext") or {}
    if context.get("privileged"):
        return {"SYS_ADMIN", *RUNTIME_DEFAULT_CAPABILITIES}  # all of them; these matter here
    capabilities = context.get("capabilities") or {}
    dropped = set(capabilities.get("drop", []))
    kept = set() if "ALL" in dropped else set(RUNTIME_DEFAULT_CAPABILITIES) - dropped
    return kept | set(capabilities.get("add", []))


def nvidia_runtime_refusal(container: Obj) -> str | None:
    """What NVIDIA's runtime hook says when it refuses to start ``container``, else None."""
    env = {e["name"]: e.get("value", "") for e in container.get("env", [])}
    if not env.get("NVIDIA_VISIBLE_DEVICES") or env["NVIDIA_VISIBLE_DEVICES"] == "void":
        return None  # not a GPU container: the MIG variables are not looked at
    privileged = "SYS_ADMIN" in bounding_capabilities(container)
    for variable in MIG_VARIABLES:
        if env.get(variable) and not privileged:
            name = variable.removeprefix("NVIDIA_")
            return f"cannot set {name} in non privileged container"
    return None


def agent_pod(name: str) -> Obj:
    return pod_spec(find(overlay(name), "DaemonSet", "gpu-agent"))


# --- the DaemonSet ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", OVERLAYS_WITH_AGENTS)
def test_the_nvidia_runtime_starts_the_agent_with_the_mig_devices_it_asks_for(name: str):
    spec = agent_pod(name)
    assert spec["runtimeClassName"] == "nvidia"
    [container] = spec["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    # utility: NVML; compute: the isolation probe's kernels.
    assert set(env["NVIDIA_DRIVER_CAPABILITIES"].split(",")) == {"compute", "utility"}
    assert {env[v] for v in MIG_VARIABLES} == {"all"}
    assert nvidia_runtime_refusal(container) is None
    context = container["securityContext"]
    # Privileged, not only CAP_SYS_ADMIN: in CDI mode the capability devices come from the
    # container runtime's host devices. Kubernetes refuses allowPrivilegeEscalation: false
    # beside privileged: true (the schema check does not see it).
    assert context["privileged"] is True
    assert context.get("allowPrivilegeEscalation", True) is True
    assert "capabilities" not in context
    # Root: NVML opens the root-owned capability devices.
    assert spec["securityContext"]["runAsUser"] == 0


def test_the_runtime_check_refuses_what_the_previous_manifest_did():
    """The hook as modelled above refuses the DaemonSet this repository shipped before (not
    privileged, every capability dropped) for either MIG variable, and lets CAP_SYS_ADMIN
    alone, or a container that asks for no MIG device, through."""
    [container] = agent_pod("in-cluster")["containers"]
    unprivileged = copy.deepcopy(container)
    unprivileged["securityContext"] = {
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert nvidia_runtime_refusal(unprivileged) == (
        "cannot set MIG_CONFIG_DEVICES in non privileged container"
    )
    monitor_only = copy.deepcopy(unprivileged)
    monitor_only["env"] = [e for e in monitor_only["env"] if e["name"] != MIG_VARIABLES[0]]
    assert nvidia_runtime_refusal(monitor_only) == (
        "cannot set MIG_MONITOR_DEVICES in non privileged container"
    )
    # CAP_SYS_ADMIN is what the hook looks at; without the MIG variables it asks nothing.
    with_sys_admin = copy.deepcopy(unprivileged)
    with_sys_admin["securityContext"]["capabilities"] = {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    assert nvidia_runtime_refusal(with_sys_admin) is None
    no_mig = copy.deepcopy(unprivileged)
    no_mig["env"] = [e for e in no_mig["env"] if e["name"] not in MIG_VARIABLES]
    assert nvidia_runtime_refusal(no_mig) is None


@pytest.mark.parametrize("name", OVERLAYS_WITH_AGENTS)
def test_the_agent_runs_on_gpu_nodes_with_its_state_on_the_host(name: str):
    spec = agent_pod(name)
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    assert spec["hostPID"] is True  # /proc/PID/cgroup of GPU processes names their pods
    assert not spec.get("hostNetwork") and not spec.get("hostIPC")
    [container] = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    host_paths = {
        v["hostPath"]["path"]: v["hostPath"]["type"] for v in volumes.values() if "hostPath" in v
    }
    # Its state only: the devices come with the privileged container, /proc with hostPID.
    assert host_paths == {"/var/lib/gpu-agent": "DirectoryOrCreate"}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/var/lib/gpu-agent"]["name"] == "state"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]  # noqa: S108 - a path in the pod
    assert "--state-dir=/var/lib/gpu-agent" in container["args"]
    # The namespace admits a privileged pod (Pod Security's "privileged" level).
    namespace = find(overlay(name), "Namespace", "gpu-agent")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    # --restart-device-plugin: list and delete pods in the GPU Operator's namespace only.
    role = find(overlay(name), "Role", "gpu-agent-device-plugin-restart")
    assert role["metadata"]["namespace"] == "gpu-operator"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "delete"]}
    ]


@pytest.mark.parametrize("name", OVERLAYS_WITH_AGENTS)
def test_the_agent_shows_the_portal_its_projected_token_and_join_tokens_stay_optional(name: str):
    spec = agent_pod(name)
    [container] = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["portal-token"]["projected"]["sources"] == [
        {
            "serviceAccountToken": {
                "audience": "gpu-quota-portal",
                "expirationSeconds": 3600,
                "path": "token",
            }
        }
    ]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["portal-token"] == {
        "name": "portal-token",
        "mountPath": PORTAL_TOKEN_DIR,
        "readOnly": True,
    }
    assert f"{PORTAL_TOKEN_FLAG}={PORTAL_TOKEN_DIR}/token" in container["args"]
    # Agents that predate the token, and nodes registered before it, keep their join tokens;
    # a cluster without the Secret still starts its agents.
    assert volumes["join-tokens"]["secret"] == {
        "secretName": "gpu-agent-join-tokens",
        "defaultMode": 0o400,
        "optional": True,
    }
    assert mounts["join-tokens"]["readOnly"] is True
    assert "--join-token-file=/etc/gpu-agent/join-tokens/$(NODE_NAME)" in container["args"]


def test_every_flag_the_daemonset_passes_is_one_the_agent_knows():
    [container] = agent_pod("in-cluster")["containers"]
    known = set(runner.build_parser()._option_string_actions)
    flags = {arg.split("=", 1)[0] for arg in container["args"]}
    assert flags - known == set()


def _yaml_documents(path: Path) -> Iterator[Obj]:
    import yaml

    try:
        yield from (d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict))
    except yaml.YAMLError:
        return  # a template, not a manifest


def test_there_is_one_agent_daemonset_and_one_agent_image_in_the_repository():
    # What git tracks or would add (not what it ignores: virtualenvs, caches, built sites).
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    files = [ROOT / name for name in listed.split("\0") if name and (ROOT / name).is_file()]
    daemonsets = sorted(
        str(p.relative_to(ROOT))
        for p in files
        if p.suffix in {".yaml", ".yml"} and "DaemonSet" in p.read_text(errors="replace")
        for doc in _yaml_documents(p)
        if doc.get("kind") == "DaemonSet"
    )
    assert daemonsets == ["deploy/kubernetes/node-agent/daemonset.yaml"]
    # The rendered overlays carry it as it is.
    assert [o["metadata"]["name"] for o in render(NODE_AGENT) if o["kind"] == "DaemonSet"] == [
        "gpu-agent"
    ]
    dockerfiles = sorted(str(p.relative_to(ROOT)) for p in files if p.name == "Dockerfile")
    assert dockerfiles == ["Dockerfile", "node_agent/Dockerfile"]


# --- the image -----------------------------------------------------------------------------------

PYPROJECTS = {
    "gpu_node_agent": ROOT / "node_agent" / "pyproject.toml",
    "gpu_spec": ROOT / "gpu_spec" / "pyproject.toml",
}
LOCAL = {"gpu_node_agent": "gpu-node-agent", "gpu_spec": "gpu-spec"}
# Modules of distributions the development virtualenv does not hold.
NOT_INSTALLED_HERE = {"cupy": {"cupy-cuda12x", "cupy-cuda13x", "cupy"}, "torch": {"torch"}}
# The isolation probe's kernel runs with whichever of these imports: one is enough.
PROBE_LIBRARIES = {"cupy", "torch"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(requirements: list[str]) -> set[str]:
    return {canonical(re.split(r"[\s\[<>=!~;]", r.strip(), maxsplit=1)[0]) for r in requirements}


def declared(package: str, extra: str | None = None) -> set[str]:
    """The distributions ``package``'s pyproject.toml declares (an extra's, with ``extra``)."""
    meta = tomllib.loads(PYPROJECTS[package].read_text())["project"]
    requirements = meta["dependencies"] if extra is None else meta["optional-dependencies"][extra]
    return requirement_names(list(requirements))


def imports(file: Path) -> set[str]:
    """Top-level modules ``file`` imports: import statements (lazy ones too) and
    ``importlib.import_module("name")`` with a literal name."""
    found = set()
    for node in ast.walk(ast.parse(file.read_text(), str(file))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.add(node.args[0].value.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"__future__"}


def distributions(module: str) -> set[str]:
    if module in LOCAL:
        return {LOCAL[module]}
    if module in NOT_INSTALLED_HERE:
        return NOT_INSTALLED_HERE[module]
    return {canonical(d) for d in importlib.metadata.packages_distributions().get(module, [])}


def test_the_image_distributions_declare_every_import_they_make():
    problems = []
    seen: set[str] = set()
    for package, pyproject in PYPROJECTS.items():
        source = pyproject.parent / "src" / package
        runtime = declared(package) | {LOCAL[package]}
        for file in sorted(source.rglob("*.py")):
            where = file.relative_to(source)
            modules = imports(file)
            seen |= modules
            allowed = runtime
            if where.parts[0] == "testing":  # the simulation and the demo, not the node's agent
                allowed = runtime | declared(package, "demo")
            if where.name == "probe_kernel.py":
                libraries = modules & PROBE_LIBRARIES
                assert libraries, "the probe kernel imports neither CuPy nor PyTorch"
                provided = {m for m in libraries if distributions(m) & declared(package, "probe")}
                if not provided:
                    problems.append(f"{where}: the 'probe' extra provides none of {libraries}")
                modules -= PROBE_LIBRARIES
            for module in sorted(modules):
                if not distributions(module) & allowed:
                    problems.append(f"{package}/{where}: {module} ({distributions(module)})")
    assert problems == []
    # The scan sees what is imported lazily: NVML's bindings and the probe's CuPy.
    assert {"pynvml", "cupy", "yaml", "jsonschema_rs", "gpu_spec"} <= seen


def _stages(dockerfile: Path) -> dict[str, str]:
    """Stage name -> its instructions (continued lines joined)."""
    text = dockerfile.read_text().replace("\\\n", " ")
    stages: dict[str, str] = {}
    for chunk in re.split(r"^FROM\s+", text, flags=re.MULTILINE)[1:]:
        head, _, body = chunk.partition("\n")
        match = re.search(r"\bAS\s+(\S+)", head, re.IGNORECASE)
        assert match, f"an unnamed stage: FROM {head}"
        stages[match[1]] = head + "\n" + body
    return stages


def _installed(stage: str) -> set[str]:
    words = [
        w
        for line in stage.splitlines()
        for command in line.split("&&")
        if "pip install" in command
        for w in shlex.split(command.split("pip install", 1)[1])
    ]
    sources = set()
    for index, word in enumerate(words):
        if word.startswith("-") or words[index - 1] in {"--constraint", "-c"}:
            continue
        assert word.startswith("/src/"), f"installed from elsewhere than the repository: {word}"
        sources.add(word.removeprefix("/src/"))
    return sources


def test_the_image_is_the_agents_own_distributions_with_the_probe_as_a_variant():
    dockerfile = ROOT / "node_agent" / "Dockerfile"
    stages = _stages(dockerfile)
    # The default target (the last stage) is the agent alone; "probe" adds the probe extra.
    assert list(stages)[-1] == "agent"
    assert _installed(stages["agent"]) == {"gpu_spec", "node_agent"}
    assert _installed(stages["probe"]) == {"gpu_spec", "node_agent[probe]"}
    assert declared("gpu_node_agent", "probe")
    for name in ("agent", "probe"):
        stage = stages[name]
        # Constraints only (the portal's tested versions), never a lock's whole list.
        assert "--constraint /src/requirements.lock" in stage
        assert not re.search(r"\s(-r|--requirement)\s", stage)
        assert "gpu-node-agent --help" in stage  # an image that cannot start does not build
        assert 'ENTRYPOINT ["gpu-node-agent"]' in stage
        assert "COPY" not in stage  # the sources are bind-mounted, never in a layer
    # The DaemonSet runs this image (kustomize's images entry names its registry path).
    [container] = agent_pod("in-cluster")["containers"]
    assert container["image"].split("/")[-1].split(":")[0] == "gpu-agent"
    assert "# node_agent/Dockerfile" in (NODE_AGENT / "daemonset.yaml").read_text()
