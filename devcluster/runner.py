"""Starting the stand-in: the command line, a background thread (tests) or a child process."""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import yaml
from aiohttp import web

from devcluster.objects import Validator, accept_everything
from devcluster.resources import load_crd_documents
from devcluster.server import DevCluster

logger = logging.getLogger("devcluster")

DEFAULT_CRDS = Path(__file__).resolve().parent.parent / "quotas" / "kube" / "crds"
# Job kinds Kueue manages that the portal never writes (JobSet, PyTorchJob, RayJob): served
# beside the CRDs of ``crds_dir`` so that tenants can submit them (devcluster.kueue_jobs).
WORKLOAD_CRDS = Path(__file__).resolve().parent / "crds"
CONTEXT = "devcluster"
READY_PREFIX = "devcluster ready "
BANNER = (
    "devcluster: a local Kubernetes API stand-in for development and tests only, never for "
    "production (in memory, no scheduler, no controllers)"
)


def write_kubeconfig(
    path: Path, url: str, token: str, ca_file: Path | None = None, user: str = CONTEXT
) -> None:
    """A kubeconfig for ``url`` with ``token`` (and the CA of ``ca_file``)."""
    cluster: dict[str, Any] = {"server": url}
    if ca_file is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_file.read_bytes()).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": cluster}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": user}}],
        "current-context": CONTEXT,
        "preferences": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    temporary.chmod(0o600)
    os.replace(temporary, path)


def _state_token(state_dir: Path | None) -> str:
    """A token kept in the state directory, so a restart does not invalidate kubeconfigs."""
    if state_dir is None:
        return secrets.token_urlsafe(24)
    path = state_dir / "token"
    if path.exists():
        return path.read_text(encoding="utf-8").strip()
    token = secrets.token_urlsafe(24)
    path.write_text(token + "\n", encoding="utf-8")
    path.chmod(0o600)
    return token


def make_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost (kept in ``directory``), made with
    the openssl command: kubectl sends a bearer token only over https."""
    certificate, key = directory / "tls.crt", directory / "tls.key"
    if certificate.exists() and key.exists():
        return certificate, key
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("--tls needs the openssl command")
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(  # noqa: S603 - fixed arguments, no shell
        [
            openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-days", "3650", "-subj", "/CN=devcluster",
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout", str(key), "-out", str(certificate),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    key.chmod(0o600)
    return certificate, key


def server_ssl_context(certificate: Path, key: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificate, key)
    return context


def build_cluster(
    *,
    crds_dir: Path | None = DEFAULT_CRDS,
    state_dir: Path | None = None,
    token: str | None = None,
    kubernetes_version: str = "1.33",
    validator: Validator | None = None,
    allow_anonymous: bool = False,
    persist: bool = True,
) -> DevCluster:
    """A stand-in over the CRDs of ``crds_dir``; with ``state_dir`` its token is kept there,
    and its objects too unless ``persist`` is false."""
    if state_dir is not None:
        state_dir.mkdir(parents=True, exist_ok=True)
    crds = [*load_crd_documents(crds_dir), *load_crd_documents(WORKLOAD_CRDS)] if crds_dir else []
    return DevCluster(
        crds=crds,
        token=token or _state_token(state_dir),
        kubernetes_version=kubernetes_version,
        validator=validator,
        state_file=state_dir / "objects.json" if state_dir is not None and persist else None,
        allow_anonymous=allow_anonymous,
        tokens_file=state_dir / "tokens.json" if state_dir is not None else None,
    )


async def _serve(
    cluster: DevCluster,
    host: str,
    port: int,
    *,
    access_log: bool = False,
    ssl_context: ssl.SSLContext | None = None,
) -> tuple[web.AppRunner, int]:
    # Idle keep-alive connections (the Python client pools them) must not hold a stop up.
    runner = web.AppRunner(
        cluster.app(), access_log=logger if access_log else None, shutdown_timeout=1.0
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    await site.start()
    bound = int(runner.addresses[0][1])  # the port picked when 0 was asked for
    cluster.server_address = f"{host}:{bound}"
    return runner, bound


class _AdminClient:
    """The ``/_devcluster/`` admin API, shared by both kinds of handle (each a context manager
    that stops its stand-in)."""

    url: str
    ca_file: Path | None = None

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    kubeconfig_path: Path

    def _admin(self, method: str, path: str, body: Any = None, token: str | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(  # noqa: S310 - the stand-in's own 127.0.0.1 URL
            self.url + path, data=data, method=method, headers=headers
        )
        context = ssl.create_default_context(cafile=self.ca_file) if self.ca_file else None
        with urllib.request.urlopen(request, timeout=10, context=context) as response:  # noqa: S310 - as above
            return json.loads(response.read().decode() or "null")

    def fail_next(
        self,
        count: int | None = 1,
        status: int | None = 500,
        *,
        delay_s: float = 0.0,
        methods: list[str] | None = None,
        verbs: list[str] | None = None,
        path_contains: str | None = None,
        probability: float | None = None,
        seed: int | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        """Answer the next ``count`` matching API requests with ``status`` (after ``delay_s``
        seconds; ``status=None`` only delays). ``probability`` fails matching requests at
        random (seeded by ``seed``), ``count=None`` until :meth:`clear_faults`.
        ``retry_after_s`` sends ``Retry-After`` (clients then retry GETs by themselves)."""
        rule: dict[str, Any] = {"count": count, "status": status, "delay_s": delay_s}
        for key, value in (
            ("methods", methods),
            ("verbs", verbs),
            ("path_contains", path_contains),
            ("probability", probability),
            ("seed", seed),
            ("retry_after_s", retry_after_s),
        ):
            if value is not None:
                rule[key] = value
        self._admin("POST", "/_devcluster/faults", rule)

    def clear_faults(self) -> None:
        self._admin("DELETE", "/_devcluster/faults")

    def stats(self) -> dict[str, Any]:
        """``{"total", "verbs", "kinds", "verb_kinds" ("list ClusterQueue": n), "discovery",
        "faults_injected"}`` since the last reset."""
        result: dict[str, Any] = self._admin("GET", "/_devcluster/stats")
        return result

    def reset_stats(self) -> None:
        self._admin("POST", "/_devcluster/stats/reset")

    def reset(self) -> None:
        """Wipe every object (the default namespaces and bootstrap RBAC come back), faults and
        stats. Issued user tokens stay valid."""
        self._admin("POST", "/_devcluster/reset")

    def service_account_token(
        self,
        namespace: str,
        name: str,
        *,
        expiration_seconds: int = 3600,
        audiences: list[str] | None = None,
        pod: str | None = None,
    ) -> str:
        """A token of the ServiceAccount (a TokenRequest made as the cluster admin), as
        ``kubectl create token NAME -n NAMESPACE [--audience A] [--bound-object-kind Pod
        --bound-object-name POD]`` gives; bound to ``pod``, as the kubelet's projected tokens."""
        config = yaml.safe_load(Path(self.kubeconfig_path).read_text(encoding="utf-8"))
        admin_token = config["users"][0]["user"]["token"]
        spec: dict[str, Any] = {"expirationSeconds": expiration_seconds}
        if audiences:
            spec["audiences"] = list(audiences)
        if pod:
            spec["boundObjectRef"] = {"kind": "Pod", "apiVersion": "v1", "name": pod}
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
        answer = self._admin("POST", path, body, token=admin_token)
        return str(answer["status"]["token"])

    def token_for(
        self,
        user: str,
        groups: list[str] | tuple[str, ...] = (),
        *,
        uid: str = "",
        extra: dict[str, list[str]] | None = None,
    ) -> str:
        """A bearer token authenticating as ``user`` in ``groups`` (plus
        ``system:authenticated``), kept in the state directory when there is one."""
        body: dict[str, Any] = {"user": user, "groups": list(groups)}
        if uid:
            body["uid"] = uid
        if extra:
            body["extra"] = extra
        return str(self._admin("POST", "/_devcluster/tokens", body)["token"])

    def kubeconfig_for(
        self,
        user: str,
        path: Path,
        groups: list[str] | tuple[str, ...] = (),
        *,
        token: str | None = None,
    ) -> Path:
        """Write a kubeconfig that acts as ``user`` (a new :meth:`token_for` token, or
        ``token``, e.g. a ServiceAccount's) for kubectl and the Python client; returns
        ``path``. Over plain http the token is carried in the server URL (kubectl sends no
        Authorization header over http)."""
        token = token or self.token_for(user, groups)
        url = self.url
        if url.startswith("http://"):
            url = f"{url}/_token/{token}"
        write_kubeconfig(Path(path), url, token, self.ca_file, user=user)
        return Path(path)


class Handle(_AdminClient):
    """A stand-in running in a background thread of this process (its own event loop)."""

    def __init__(
        self,
        cluster: DevCluster,
        url: str,
        kubeconfig_path: Path,
        loop: asyncio.AbstractEventLoop,
        thread: threading.Thread,
        runner: web.AppRunner,
        ca_file: Path | None,
    ) -> None:
        self.cluster = cluster
        self.url = url
        self.kubeconfig_path = kubeconfig_path
        self.ca_file = ca_file
        self.token = cluster.token
        self._loop = loop
        self._thread = thread
        self._runner = runner

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        future = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
        with contextlib.suppress(Exception):
            future.result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


def start_in_thread(
    *,
    kubeconfig_path: Path,
    crds_dir: Path | None = DEFAULT_CRDS,
    state_dir: Path | None = None,
    kubernetes_version: str = "1.33",
    validator: Validator | None = None,
    token: str | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    tls: bool = False,
    require_token: bool = False,
) -> Handle:
    """Start a stand-in on a free port in a daemon thread and write its kubeconfig.

    ``validator`` defaults to ``quotas.kube.validate.validate_object``; pass
    ``devcluster.accept_everything`` to test the API without it. Over plain http requests
    without credentials are let in (kubectl sends none there) unless ``require_token``; with
    ``tls`` (a self-signed certificate, in the kubeconfig) the token is always required."""
    cluster = build_cluster(
        crds_dir=crds_dir,
        state_dir=state_dir,
        token=token,
        kubernetes_version=kubernetes_version,
        validator=validator,
        allow_anonymous=not (tls or require_token),
    )
    ca_file, ssl_context = None, None
    if tls:
        ca_file, key = make_certificate(state_dir or kubeconfig_path.parent / "devcluster-tls")
        ssl_context = server_ssl_context(ca_file, key)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    result: dict[str, Any] = {}

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            result["runner"], result["port"] = loop.run_until_complete(
                _serve(cluster, host, port, ssl_context=ssl_context)
            )
        except BaseException as error:
            result["error"] = error
            started.set()
            return
        started.set()
        loop.run_forever()
        loop.close()

    thread = threading.Thread(target=run, name="devcluster", daemon=True)
    thread.start()
    started.wait(timeout=30)
    if "error" in result:
        raise RuntimeError("devcluster did not start") from result["error"]
    url = f"{'https' if tls else 'http'}://{host}:{result['port']}"
    write_kubeconfig(kubeconfig_path, url, cluster.token, ca_file)
    return Handle(cluster, url, kubeconfig_path, loop, thread, result["runner"], ca_file)


class ProcessHandle(_AdminClient):
    """A stand-in running as ``python -m devcluster`` in a child process."""

    def __init__(self, process: subprocess.Popen[str], ready: dict[str, Any]) -> None:
        self.process = process
        self.url = str(ready["url"])
        self.kubeconfig_path = Path(ready["kubeconfig"])
        self.ca_file = Path(ready["ca_file"]) if ready.get("ca_file") else None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_in_subprocess(
    *,
    kubeconfig_path: Path,
    state_dir: Path,
    crds_dir: Path | None = DEFAULT_CRDS,
    kubernetes_version: str = "1.33",
    extra_args: list[str] | None = None,
) -> ProcessHandle:
    """Run ``python -m devcluster`` and wait for its ready line (the validator is the default,
    in that process)."""
    command = [
        sys.executable,
        "-m",
        "devcluster",
        "--port",
        "0",
        "--state-dir",
        str(state_dir),
        "--kubeconfig",
        str(kubeconfig_path),
        "--kubernetes-version",
        kubernetes_version,
        *(["--crds", str(crds_dir)] if crds_dir is not None else ["--no-crds"]),
        *(extra_args or []),
    ]
    process = subprocess.Popen(  # noqa: S603 - our own module, no shell
        command,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith(READY_PREFIX):
            return ProcessHandle(process, json.loads(line[len(READY_PREFIX) :]))
    process.wait()
    raise RuntimeError(f"devcluster exited with {process.returncode} before it was ready")


# Command line ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m devcluster",
        description="A local Kubernetes API server stand-in for development and tests "
        "(never for production).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--state-dir", type=Path, required=True,
                        help="where objects.json, token and port are kept")  # fmt: skip
    parser.add_argument("--kubeconfig", type=Path, required=True,
                        help="the kubeconfig file to write")  # fmt: skip
    parser.add_argument("--crds", type=Path, default=DEFAULT_CRDS,
                        help="directory of CustomResourceDefinition YAML files")  # fmt: skip
    parser.add_argument("--no-crds", action="store_true", help="serve the built-in kinds only")
    parser.add_argument("--kubernetes-version", default="1.33")
    parser.add_argument("--no-validation", action="store_true",
                        help="accept every object (skip quotas.kube.validate)")  # fmt: skip
    parser.add_argument("--ephemeral", action="store_true",
                        help="do not load or save objects.json")  # fmt: skip
    parser.add_argument("--tls", action="store_true",
                        help="serve https with a self-signed certificate (made with openssl, "
                        "kept in the state dir); the token is then always required")  # fmt: skip
    parser.add_argument("--require-token", action="store_true",
                        help="refuse requests without the token even over http")  # fmt: skip
    parser.add_argument("--access-log", action="store_true")
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(message)s"
    )

    state_dir: Path = args.state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    cluster = build_cluster(
        crds_dir=None if args.no_crds else args.crds,
        state_dir=state_dir,
        kubernetes_version=args.kubernetes_version,
        validator=accept_everything if args.no_validation else None,
        allow_anonymous=not (args.tls or args.require_token),
        persist=not args.ephemeral,
    )
    ca_file, ssl_context = None, None
    if args.tls:
        ca_file, key = make_certificate(state_dir)
        ssl_context = server_ssl_context(ca_file, key)
    port_file = state_dir / "port"
    port_file.unlink(missing_ok=True)

    async def run() -> None:
        runner, port = await _serve(
            cluster, args.host, args.port, access_log=args.access_log, ssl_context=ssl_context
        )
        url = f"{'https' if ssl_context else 'http'}://{args.host}:{port}"
        kubeconfig = args.kubeconfig.resolve()
        write_kubeconfig(kubeconfig, url, cluster.token, ca_file)
        temporary = port_file.with_name("port.tmp")
        temporary.write_text(f"{port}\n", encoding="utf-8")
        os.replace(temporary, port_file)
        # A warning, so that it shows at every log level: this is not a production server.
        logger.warning(
            "%s; serving %s (kubeconfig %s, state %s)", BANNER, url, kubeconfig, state_dir
        )
        ready = {
            "url": url,
            "port": port,
            "kubeconfig": str(kubeconfig),
            "ca_file": str(ca_file) if ca_file else None,
            "pid": os.getpid(),
        }
        print(READY_PREFIX + json.dumps(ready), flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        try:
            await stop.wait()
        finally:
            await runner.cleanup()
            cluster.store.save()
            port_file.unlink(missing_ok=True)
            logger.info("devcluster: stopped")

    asyncio.run(run())
    return 0
