"""Making the NVIDIA device plugin re-advertise MIG devices after the agent changed them.

The device plugin lists the node's devices when it starts: after GPU instances are created or
destroyed, the kubelet keeps seeing the old ``nvidia.com/mig-*`` resources until the plugin
restarts. The agent always reports that (``device_plugin: restart-needed`` in its result);
started with ``--restart-device-plugin`` it restarts it the way the GPU Operator's own MIG
manager does: it deletes the device plugin's pod on this node and its DaemonSet starts a new
one, which lists the new devices.

It talks to the Kubernetes API with the pod's in-cluster credentials (the service account
token and CA under ``/var/run/secrets/kubernetes.io/serviceaccount``, the API server from
``KUBERNETES_SERVICE_HOST`` / ``_PORT``); the service account needs ``list`` and ``delete`` on
pods in the device plugin's namespace (``deploy/kubernetes/node-agent/``). Two calls:
``GET /api/v1/namespaces/NS/pods?labelSelector=SEL&fieldSelector=spec.nodeName=NODE`` and a
``DELETE`` of each pod found. Standard library only; nothing here imports Django.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_spec.device_plugin import DEFAULT_NAMESPACE, DEFAULT_SELECTOR

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")

NOT_NEEDED = "not-needed"
RESTART_NEEDED = "restart-needed"
RESTARTED = "restarted"
RESTART_FAILED = "restart-failed"


class DevicePluginError(Exception):
    """The restart could not be done; the message says why, for the portal."""


@dataclass(frozen=True)
class RestartOutcome:
    state: str  # RESTARTED or RESTART_FAILED
    message: str


class DevicePluginRestarter:
    """Deletes the device plugin's pods on ``node`` through the Kubernetes API."""

    def __init__(
        self,
        *,
        node: str,
        api_server: str,
        token: str,
        ca_file: str | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        selector: str = DEFAULT_SELECTOR,
        timeout: float = 15.0,
    ) -> None:
        self.node = node
        self.api_server = api_server.rstrip("/")
        self.token = token
        self.namespace = namespace
        self.selector = selector
        self.timeout = timeout
        self._context = ssl.create_default_context(cafile=ca_file) if ca_file else None

    @classmethod
    def in_cluster(
        cls,
        *,
        node: str,
        namespace: str = DEFAULT_NAMESPACE,
        selector: str = DEFAULT_SELECTOR,
        service_account: Path = SERVICE_ACCOUNT,
    ) -> DevicePluginRestarter:
        """From the pod's service account; ``DevicePluginError`` outside a pod."""
        host = os.environ.get("KUBERNETES_SERVICE_HOST")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        token_path = service_account / "token"
        if not host or not token_path.exists():
            raise DevicePluginError(
                "--restart-device-plugin needs in-cluster credentials (KUBERNETES_SERVICE_HOST "
                f"and {token_path}): run the agent as the DaemonSet in docs/agent/"
            )
        if ":" in host:
            host = f"[{host}]"  # IPv6
        ca = service_account / "ca.crt"
        return cls(
            node=node,
            api_server=f"https://{host}:{port}",
            token=token_path.read_text(encoding="utf-8").strip(),
            ca_file=str(ca) if ca.exists() else None,
            namespace=namespace,
            selector=selector,
        )

    def _call(self, method: str, path: str) -> Any:
        url = self.api_server + path
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        request = urllib.request.Request(url, headers=headers, method=method)  # noqa: S310 - http(s) only
        try:
            with urllib.request.urlopen(  # noqa: S310 - http(s) only
                request, timeout=self.timeout, context=self._context
            ) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            body = error.read()[:300].decode(errors="replace")
            error.close()
            raise DevicePluginError(f"{method} {path}: HTTP {error.code}: {body}") from error
        except (urllib.error.URLError, OSError, ValueError) as error:
            raise DevicePluginError(f"{method} {path}: {error}") from error

    def pods(self) -> list[str]:
        """The names of the device plugin's pods on this node."""
        query = urllib.parse.urlencode(
            {"labelSelector": self.selector, "fieldSelector": f"spec.nodeName={self.node}"}
        )
        answer = self._call("GET", f"/api/v1/namespaces/{self.namespace}/pods?{query}")
        items = answer.get("items") if isinstance(answer, dict) else None
        return [str(item["metadata"]["name"]) for item in items or []]

    def restart(self) -> RestartOutcome:
        """Delete the plugin's pods on the node; the DaemonSet re-creates them."""
        try:
            names = self.pods()
            if not names:
                return RestartOutcome(
                    RESTART_FAILED,
                    f"no pod matching {self.selector} in namespace {self.namespace} runs on "
                    f"node {self.node}: is the device plugin deployed there?",
                )
            for name in names:
                quoted = urllib.parse.quote(name)
                self._call("DELETE", f"/api/v1/namespaces/{self.namespace}/pods/{quoted}")
        except DevicePluginError as error:
            return RestartOutcome(RESTART_FAILED, str(error))
        return RestartOutcome(
            RESTARTED,
            f"deleted {', '.join(names)} in {self.namespace}; its DaemonSet starts a new one "
            "that advertises the new MIG devices",
        )
