"""The aiohttp application: authentication, routing, discovery, OpenAPI, watch, faults and
stats around :class:`devcluster.objects.Objects`.

Development and test infrastructure only; see ``devcluster/README.md`` for what it implements.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from devcluster import auth, discovery, protobuf, rbac, tables
from devcluster.admission import Attributes
from devcluster.errors import ApiError, bad_request, forbidden, invalid
from devcluster.events import Events
from devcluster.faults import FaultRule, Faults, Stats, fault_error
from devcluster.gc import GarbageCollector
from devcluster.objects import (
    JSON_PATCH,
    Objects,
    Target,
    Validator,
    quotas_validator,
    read_only_error,
)
from devcluster.resources import Registry
from devcluster.reviews import Reviews
from devcluster.selectors import labels_match, parse_field_selector, parse_label_selector
from devcluster.store import Store

logger = logging.getLogger("devcluster")

JSON = "application/json"
APPLY_PATCH = "application/apply-patch+yaml"
NOT_FOUND = "the server could not find the requested resource"
# A kubeconfig of kubeconfig_for over plain http names its token in the server URL
# (kubectl sends no Authorization header over http): http://127.0.0.1:PORT/_token/TOKEN
TOKEN_PATH_PREFIX = "/_token/"  # noqa: S105 - a URL prefix, not a secret
NOT_ALLOWED = "the server does not allow this method on the requested resource"


class DevCluster:
    """One stand-in API server: its objects, faults, stats and request handling."""

    def __init__(
        self,
        *,
        crds: list[dict[str, Any]],
        token: str,
        kubernetes_version: str = "1.33",
        validator: Validator | None = None,
        state_file: Path | None = None,
        allow_anonymous: bool = False,
        tokens_file: Path | None = None,
    ) -> None:
        self.token = token
        self.allow_anonymous = allow_anonymous
        self.git_version = _git_version(kubernetes_version)
        self.registry = Registry.with_crds(crds)
        self.store = Store(state_file)
        self.store.load({t.key for t in self.registry.types})
        self.tokens = auth.Tokens(tokens_file)
        self.authorizer = rbac.Authorizer(self.store)
        self.reviews = Reviews(self.store, self.authorizer, self.tokens, token)
        self.reviews.admin_user = auth.ADMIN
        self.objects = Objects(
            self.registry, self.store, validator or quotas_validator(kubernetes_version), crds
        )
        self.objects.admission.rbac_check = self._rbac_check
        self.objects.seed()
        self.events = Events(self.store)
        self.gc = GarbageCollector(
            self.objects, self.registry, self.store, self.events, self._schedule_save
        )
        self.faults = Faults()
        self.stats = Stats()
        self.server_address = "127.0.0.1:0"
        self._save_handle: asyncio.TimerHandle | None = None

    def reset(self) -> None:
        """Wipe every object (the default namespaces and the CRDs come back)."""
        self.objects.reset()
        self.authorizer.invalidate()
        self.gc.rebuild()
        self.gc.kick()
        self._schedule_save()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        app.on_startup.append(self._on_startup)
        app.on_shutdown.append(self._on_shutdown)
        return app

    async def _on_startup(self, _app: web.Application) -> None:
        self.gc.kick()  # what was loaded from the state file, checked once serving

    async def _on_shutdown(self, _app: web.Application) -> None:
        self.store.save()

    def _schedule_save(self) -> None:
        """Save the state file shortly after a write (writes in a burst share one save)."""
        if self.store.state_file is None or self._save_handle is not None:
            return

        def save() -> None:
            self._save_handle = None
            try:
                self.store.save()
            except OSError:
                logger.exception("devcluster: could not save state")

        self._save_handle = asyncio.get_running_loop().call_later(0.2, save)

    # Entry point -----------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._dispatch(request)
        except ApiError as error:
            return _json_response(error.status(), status=error.code, headers=_retry_after(error))
        except Exception as error:  # every failure is answered as a Status, as a server does
            logger.exception("devcluster: %s %s failed", request.method, request.path_qs)
            failure = ApiError(500, f"Internal error occurred: {error}")
            return _json_response(failure.status(), status=500)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        raw_path, token_in_path = _token_in_path(request.path)
        path = raw_path.rstrip("/") or "/"
        if path.startswith("/_devcluster") and token_in_path is None:
            return await self._admin(request, path)
        if path in ("/healthz", "/livez", "/readyz"):
            return web.Response(text="ok")
        user = self._impersonate(request, self._authenticate(request, token_in_path))
        self.objects.admission.user = user
        if request.method not in ("GET", "POST", "PUT", "PATCH", "DELETE"):
            raise ApiError(405, NOT_ALLOWED)
        segments = [s for s in path.split("/") if s]
        if not _names_a_resource(segments):
            # Not a resource: discovery, /version, /openapi/..., anything else.
            self._authorize(
                user, rbac.RequestAttributes(request.method.lower(), False, path=raw_path)
            )
        if path == "/version":
            return _json_response(discovery.version_document(self.git_version))
        if segments and segments[0] == "openapi":
            return self._openapi(segments)
        if not segments or segments[0] not in ("api", "apis"):
            raise ApiError(404, NOT_FOUND)
        discovered = self._discovery(request, segments)
        if discovered is not None:
            return discovered
        return await self._resource(request, user, segments, raw_path)

    async def _resource(
        self, request: web.Request, user: auth.UserInfo, segments: list[str], raw_path: str
    ) -> web.StreamResponse:
        """A request on a resource: authorized, counted, faulted where a rule says so, served."""
        target = self._target(segments)
        verb = self._verb(request, target)
        self._authorize_resource(request, user, target, verb, raw_path)
        await self._inject_fault(request, target, verb)
        if verb == "watch":
            return await self._watch(request, target)
        if target.subresource == "token" or target.resource_type.create_only:
            return self._create_only(request, target, user, await request.read())
        response = self._serve(request, target, verb, await request.read())
        if request.method != "GET":
            self._schedule_save()
        return response

    def _authorize_resource(
        self, request: web.Request, user: auth.UserInfo, target: Target, verb: str, raw_path: str
    ) -> None:
        attributes = self._request_attributes(request, target, verb, raw_path)
        self._authorize(user, attributes)
        if (
            verb == "apply"
            and self.store.get(target.resource_type.key, target.namespace or "", target.name or "")
            is None
        ):
            # Server-side apply that creates: the user must be allowed to create too.
            self._authorize(user, replace(attributes, verb="create"))

    async def _inject_fault(self, request: web.Request, target: Target, verb: str) -> None:
        """Count the request; delay it or answer it with an error where a fault rule says so."""
        fault = self.faults.take(request.method, verb, request.path_qs)
        self.stats.count(
            verb,
            target.resource_type.kind + (f"/{target.subresource}" if target.subresource else ""),
        )
        if fault is None:
            return
        self.stats.faults_injected += 1
        if fault.delay_s:
            await asyncio.sleep(fault.delay_s)
        if fault.status is not None:
            raise fault_error(fault.status, fault.retry_after_s)

    def _authenticate(self, request: web.Request, token_in_path: str | None) -> auth.UserInfo:
        """The static token, an issued token (in the Authorization header, or in the URL of a
        ``kubeconfig_for`` kubeconfig over http); without any credentials, the anonymous user
        of the old insecure port if allowed (kubectl and client-go never send credentials over
        plain http)."""
        header = request.headers.get("Authorization", "")
        if not header and token_in_path is None:
            if self.allow_anonymous:
                return auth.INSECURE_ANONYMOUS
            raise ApiError(401, "Unauthorized")
        if header:
            scheme, _, presented = header.partition(" ")
            if scheme.lower() != "bearer":
                raise ApiError(401, "Unauthorized")
            presented = presented.strip()
        else:
            presented = token_in_path or ""
        if secrets.compare_digest(presented.encode(), self.token.encode()):
            return auth.ADMIN
        user = self.tokens.lookup(presented, self.reviews.uid_of)
        if user is None:
            raise ApiError(401, "Unauthorized")
        return user

    def _impersonate(self, request: web.Request, user: auth.UserInfo) -> auth.UserInfo:
        """The identity of ``Impersonate-*`` headers, when the requester may act as it."""
        try:
            asked = auth.impersonation(request.headers)
        except auth.ImpersonationError as error:
            raise ApiError(500, f"Internal error occurred: {error}") from None
        if asked is None:
            return user
        impersonated, checks = asked
        for check in checks:
            group = (
                ""
                if check.resource in ("users", "groups", "serviceaccounts")
                else ("authentication.k8s.io")
            )
            self._authorize(
                user,
                rbac.RequestAttributes(
                    "impersonate",
                    True,
                    check.namespace,
                    group,
                    check.resource,
                    check.subresource,
                    check.name,
                ),
            )
        return impersonated

    def _authorize(self, user: auth.UserInfo, attributes: rbac.RequestAttributes) -> None:
        allowed, reason = self.authorizer.authorize(user, attributes)
        if allowed:
            return
        details: dict[str, Any] = {}
        if attributes.resource_request:
            if attributes.name:
                details["name"] = attributes.name
            if attributes.api_group:
                details["group"] = attributes.api_group
            details["kind"] = attributes.resource
        raise ApiError(
            403,
            rbac.forbidden_status_message(user, attributes, reason),
            reason="Forbidden",
            details=details or None,
        )

    def _request_attributes(
        self, request: web.Request, target: Target, verb: str, path: str
    ) -> rbac.RequestAttributes:
        """What RBAC is asked about a resource request, as the API server's RequestInfo."""
        resource_type = target.resource_type
        namespace, name = target.namespace or "", target.name or ""
        if resource_type.key == "namespaces" and name:
            namespace = name  # GET /api/v1/namespaces/x is in the namespace x
        if verb in ("list", "watch") and not name:
            selector = request.query.get("fieldSelector", "")
            for operator in ("==", "="):
                key, found, value = selector.partition(operator)
                if found and key.strip() == "metadata.name" and "," not in value:
                    name = value.strip()
                    break
        return rbac.RequestAttributes(
            verb="patch" if verb == "apply" else verb,
            resource_request=True,
            namespace=namespace,
            api_group=resource_type.group,
            resource=resource_type.plural,
            subresource=target.subresource,
            name=name,
            path=path,
        )

    def _rbac_check(self, user: auth.UserInfo, attributes: Attributes) -> None:
        """RBAC's own checks on writing a role or a binding (escalate / bind)."""
        assert attributes.obj is not None
        resource_type = attributes.resource_type
        reason = self.authorizer.check_write(
            user, resource_type.plural, attributes.namespace, attributes.obj, attributes.old
        )
        if reason is not None:
            raise forbidden(resource_type.plural, resource_type.group, attributes.name, reason)

    def _create_only(
        self, request: web.Request, target: Target, user: auth.UserInfo, raw: bytes
    ) -> web.Response:
        """TokenRequest and the reviews: answered, never stored."""
        kind = "TokenRequest" if target.subresource == "token" else target.resource_type.kind
        if _media_type(request) == protobuf.MEDIA_TYPE:
            body = protobuf.decode(raw, kind)
        else:
            body = _parse_body(request, raw)
        if target.subresource == "token":
            assert target.namespace is not None and target.name is not None
            answer = self.reviews.token_request(target.namespace, target.name, body)
        else:
            answer = self.reviews.create(kind, body, user, target.namespace or "")
        return _json_response(answer, status=201)

    # Discovery and OpenAPI -------------------------------------------------------------------

    def _discovery(self, request: web.Request, segments: list[str]) -> web.Response | None:
        accept = request.headers.get("Accept", "")
        if request.method != "GET":
            if len(segments) <= 3 - (segments[0] == "api"):
                raise ApiError(405, NOT_ALLOWED)
            return None
        document: dict[str, Any] | None
        if segments in (["api"], ["apis"]):
            self.stats.discovery += 1
            if discovery.wants_aggregated(accept):
                document = discovery.aggregated_discovery(self.registry, core=segments == ["api"])
                return _json_response(document, content_type=discovery.AGGREGATED_V2)
            if segments == ["api"]:
                return _json_response(discovery.api_versions(self.server_address))
            return _json_response(discovery.api_group_list(self.registry))
        if segments[0] == "api" and len(segments) == 2:
            document = discovery.api_resource_list(self.registry, "", segments[1])
        elif segments[0] == "apis" and len(segments) == 2:
            document = discovery.api_group(self.registry, segments[1])
        elif segments[0] == "apis" and len(segments) == 3:
            document = discovery.api_resource_list(self.registry, segments[1], segments[2])
        else:
            return None
        self.stats.discovery += 1
        if document is None:
            raise ApiError(404, NOT_FOUND)
        return _json_response(document)

    def _openapi(self, segments: list[str]) -> web.Response:
        self.stats.discovery += 1
        if segments == ["openapi", "v3"]:
            return _json_response(discovery.openapi_v3_root(self.registry, self.git_version))
        if len(segments) >= 4 and segments[1] == "v3":
            group, version = (
                ("", segments[3])
                if segments[2] == "api"
                else (segments[3], segments[4] if len(segments) > 4 else "")
            )
            document = discovery.openapi_v3_group_version(
                self.registry, group, version, self.git_version
            )
            if document is not None:
                return _json_response(document)
        # /openapi/v2 is protobuf-only for kubectl; the v3 documents answer what it needs.
        raise ApiError(404, NOT_FOUND)

    # Routing ---------------------------------------------------------------------------------

    def _target(self, segments: list[str]) -> Target:
        if segments[0] == "api":
            group, version, rest = "", segments[1], segments[2:]
        else:
            group, version, rest = segments[1], segments[2], segments[3:]
        namespace: str | None = None
        if (
            len(rest) >= 3
            and rest[0] == "namespaces"
            and not (len(rest) == 3 and rest[2] in ("status", "finalize"))
        ):
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise ApiError(404, NOT_FOUND)
        plural, name = rest[0], rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else ""
        resource_type = self.registry.lookup(group, version, plural)
        if (
            resource_type is None
            or (namespace is not None and not resource_type.namespaced)
            or (resource_type.namespaced and name is not None and namespace is None)
            or (
                subresource
                and not (subresource == "status" and resource_type.has_status)
                and not (subresource == "token" and resource_type.key == "serviceaccounts")
            )
        ):
            raise ApiError(404, NOT_FOUND)
        return Target(resource_type, version, namespace, name, subresource)

    def _verb(self, request: web.Request, target: Target) -> str:
        method, named = request.method, target.name is not None
        if target.subresource == "token" or target.resource_type.create_only:
            if method != "POST" or named != (target.subresource == "token"):
                raise ApiError(405, NOT_ALLOWED)
            return "create"
        verb = {
            ("GET", True): "get",
            ("GET", False): "watch" if _truthy(request.query.get("watch")) else "list",
            ("POST", False): "create",
            ("PUT", True): "update",
            ("PATCH", True): "apply" if _media_type(request) == APPLY_PATCH else "patch",
            ("DELETE", True): "delete",
            ("DELETE", False): "deletecollection",
        }.get((method, named))
        if verb is None or (target.subresource and verb not in ("get", "update", "patch", "apply")):
            raise ApiError(405, NOT_ALLOWED)
        if target.resource_type.read_only and verb not in ("get", "list", "watch"):
            raise read_only_error(target.resource_type)
        return verb

    def _serve(self, request: web.Request, target: Target, verb: str, raw: bytes) -> web.Response:
        query = request.query
        objects = self.objects
        dry_run = _dry_run(query)
        _field_validation(query)
        deprecation = target.resource_type.deprecated_versions.get(target.version)
        warnings = [deprecation] if deprecation else []
        objects.admission.warnings = warnings  # admission policies add theirs (Warn)
        manager = query.get("fieldManager") or _manager_from_user_agent(request)
        if len(manager) > 128:
            raise bad_request("fieldManager: Too long: may not be more than 128 bytes")
        table = tables.wants_table(request.headers.get("Accept", ""))
        body: dict[str, Any]
        status = 200
        if verb == "get":
            body = objects.get(target)
            if table:
                list_meta = {"resourceVersion": body["metadata"]["resourceVersion"]}
                body = tables.table(target.resource_type, target.version, [body], list_meta)
        elif verb == "list":
            label_selector, field_selector = query.get("labelSelector"), query.get("fieldSelector")
            limit = _positive_int(query.get("limit"), "limit")
            continue_token = query.get("continue")
            if not table:
                items_json, list_meta = objects.select_encoded(
                    target,
                    label_selector=label_selector,
                    field_selector=field_selector,
                    limit=limit,
                    continue_token=continue_token,
                )
                return _list_response(_list_body(target, [], list_meta), items_json, warnings)
            items, list_meta = objects.select(
                target,
                label_selector=label_selector,
                field_selector=field_selector,
                limit=limit,
                continue_token=continue_token,
            )
            body = tables.table(target.resource_type, target.version, items, list_meta)
        elif verb == "create":
            body = objects.create(
                target, _parse_body(request, raw), manager=manager, dry_run=dry_run
            )
            status = 201
        elif verb == "update":
            body = objects.update(
                target, _parse_body(request, raw), manager=manager, dry_run=dry_run
            )
        elif verb == "patch":
            body = objects.patch(
                target,
                _media_type(request),
                _parse_body(request, raw),
                manager=manager,
                dry_run=dry_run,
            )
        elif verb == "apply":
            if not query.get("fieldManager"):
                raise bad_request("PATCH, application/apply-patch+yaml, requires fieldManager")
            body, created = objects.apply(
                target,
                _parse_body(request, raw, yaml_ok=True),
                manager=manager,
                force=_truthy(query.get("force")),
                dry_run=dry_run,
            )
            status = 201 if created else 200
        elif verb == "delete":
            options = _parse_body(request, raw) if raw.strip() else {}
            dry = dry_run or _dry_run_options(options)
            if not dry and self._propagation(target, query, options, warnings) == "Orphan":
                self.gc.orphan(objects.existing(target))
            body = objects.delete(target, options, dry_run=dry)
        else:  # deletecollection
            options = _parse_body(request, raw) if raw.strip() else {}
            if not (dry_run or _dry_run_options(options)) and (
                self._propagation(target, query, options, warnings) == "Orphan"
            ):
                for item in objects.select(
                    target,
                    label_selector=query.get("labelSelector"),
                    field_selector=query.get("fieldSelector"),
                )[0]:
                    self.gc.orphan(item)
            items, list_meta = objects.delete_collection(
                target,
                label_selector=query.get("labelSelector"),
                field_selector=query.get("fieldSelector"),
                dry_run=dry_run or _dry_run_options(options),
            )
            body = _list_body(target, items, list_meta)
        kept = None if table else objects.encoded_if_stored(target, body)
        if kept is not None:
            # The stored object as it is: its JSON, made once and kept for LIST answers too.
            return _json_response(None, status=status, warnings=warnings, encoded=kept)
        return _json_response(body, status=status, warnings=warnings)

    def _propagation(
        self, target: Target, query: Any, options: dict[str, Any], warnings: list[str]
    ) -> str:
        """The deletion's propagation policy: asked for (options or query), else the kind's
        default (Orphan for batch/v1 Jobs, with upstream's warning; Background otherwise)."""
        policy = options.get("propagationPolicy") or query.get("propagationPolicy")
        orphan = options.get("orphanDependents")
        if orphan is None and query.get("orphanDependents") is not None:
            orphan = _truthy(query.get("orphanDependents"))
        if policy and orphan is not None:
            raise ApiError(
                422,
                "DeleteOptions is invalid: propagationPolicy: Invalid value: "
                f'"{policy}": orphanDependents and deletionPropagation cannot be both set',
            )
        if orphan is not None:
            return "Orphan" if orphan else "Background"
        if policy:
            if policy not in ("Orphan", "Background", "Foreground"):
                raise ApiError(
                    422,
                    f'DeleteOptions is invalid: propagationPolicy: Unsupported value: "{policy}": '
                    'supported values: "Foreground", "Background", "Orphan"',
                )
            return str(policy)
        if target.resource_type.key == "jobs.batch":
            warnings.append(
                "child pods are preserved by default when jobs are deleted; set "
                "propagationPolicy=Background to remove them or set propagationPolicy=Orphan to "
                "suppress this warning"
            )
            return "Orphan"
        return "Background"

    async def _watch(self, request: web.Request, target: Target) -> web.StreamResponse:
        """A minimal watch: the current objects as ADDED (unless a resourceVersion is given),
        then changes as they happen, until ``timeoutSeconds`` (default 30 min) or disconnect.

        With ``sendInitialEvents=true`` (a streaming list, as kubectl wait and client-go's
        informers ask: ``resourceVersionMatch=NotOlderThan`` and ``allowWatchBookmarks=true``
        required) the current objects come first in any case, then a BOOKMARK annotated
        ``k8s.io/initial-events-end: "true"`` at the current resourceVersion."""
        send_initial = _watch_list_options(request.query)
        requirements = parse_label_selector(request.query.get("labelSelector"))
        fields = parse_field_selector(request.query.get("fieldSelector"), target.resource_type.kind)
        timeout = _positive_int(request.query.get("timeoutSeconds"), "timeoutSeconds") or 1800
        queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        table = tables.wants_table(request.headers.get("Accept", ""))

        def matches(obj: dict[str, Any]) -> bool:
            namespace = obj["metadata"].get("namespace", "")
            return (
                (target.namespace is None or namespace == target.namespace)
                and labels_match(requirements, obj)
                and fields(obj)
            )

        def listener(type_key: str, event: str, obj: dict[str, Any]) -> None:
            if type_key == target.resource_type.key and matches(obj):
                queue.put_nowait((event, obj))

        response = web.StreamResponse(headers={"Content-Type": JSON})
        await response.prepare(request)
        self.store.listeners.append(listener)
        try:
            if send_initial is None:
                send_initial = request.query.get("resourceVersion", "0") in ("", "0")
            if send_initial:
                for obj in self.store.list(target.resource_type.key, target.namespace):
                    if matches(obj):
                        queue.put_nowait(("ADDED", obj))
            if _truthy(request.query.get("sendInitialEvents")):
                queue.put_nowait(("BOOKMARK", {"metadata": {}}))
            deadline = asyncio.get_running_loop().time() + timeout
            while True:
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    break
                try:
                    event, obj = await asyncio.wait_for(queue.get(), timeout=left)
                except TimeoutError:
                    break
                if event == "BOOKMARK":
                    shown = self._initial_events_end(target)
                else:
                    shown = self.objects.present(target, obj)
                if table and event == "BOOKMARK":
                    shown = tables.table(target.resource_type, target.version, [], {})
                    shown["metadata"] = self._initial_events_end(target)["metadata"]
                elif table:
                    list_meta = {"resourceVersion": obj["metadata"]["resourceVersion"]}
                    shown = tables.table(target.resource_type, target.version, [shown], list_meta)
                line = json.dumps({"type": event, "object": shown}) + "\n"
                await response.write(line.encode())
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.store.listeners.remove(listener)
        return response

    def _initial_events_end(self, target: Target) -> dict[str, Any]:
        """The BOOKMARK that ends a watch's initial events: the kind, the current
        resourceVersion and the ``k8s.io/initial-events-end`` annotation, nothing else."""
        return {
            "kind": target.resource_type.kind,
            "apiVersion": target.resource_type.api_version(target.version),
            "metadata": {
                "resourceVersion": str(self.store.resource_version),
                "creationTimestamp": None,
                "annotations": {"k8s.io/initial-events-end": "true"},
            },
        }

    # Admin API (not Kubernetes) --------------------------------------------------------------

    async def _admin(self, request: web.Request, path: str) -> web.Response:
        method = request.method
        if path == "/_devcluster/faults":
            if method == "POST":
                rules = await _admin_json(request)
                for data in rules if isinstance(rules, list) else [rules]:
                    self.faults.add(FaultRule.from_json(data))
                return _json_response(
                    {"faults": [r.describe() for r in self.faults.rules]}, status=201
                )
            if method == "DELETE":
                self.faults.clear()
                return _json_response({"faults": []})
            if method == "GET":
                return _json_response({"faults": [r.describe() for r in self.faults.rules]})
        elif path == "/_devcluster/stats" and method == "GET":
            return _json_response(self.stats.snapshot())
        elif path == "/_devcluster/stats/reset" and method == "POST":
            self.stats.reset()
            return _json_response(self.stats.snapshot())
        elif path == "/_devcluster/reset" and method == "POST":
            self.reset()
            self.faults.clear()
            self.stats.reset()
            return _json_response({"reset": True})
        elif path == "/_devcluster/tokens" and method == "POST":
            data = await _admin_json(request)
            if not isinstance(data, dict) or not isinstance(data.get("user"), str):
                raise bad_request('a token needs {"user": "name", "groups": [...]}')
            groups = data.get("groups") or []
            if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
                raise bad_request("groups must be a list of strings")
            try:
                token = self.tokens.issue_user(
                    data["user"], groups, uid=str(data.get("uid") or ""), extra=data.get("extra")
                )
            except ValueError as error:
                raise bad_request(str(error)) from None
            user = self.tokens.lookup(token, self.reviews.uid_of)
            assert user is not None
            return _json_response({"token": token, "user": user.as_json()}, status=201)
        elif path == "/_devcluster/objects" and method == "GET":
            return _json_response(
                {
                    key: self.store.list(key)
                    for key in self.store.type_keys()
                    if self.store.list(key)
                }
            )
        raise ApiError(404, f"no admin endpoint {method} {path}")


# Helpers -----------------------------------------------------------------------------------------


def _token_in_path(raw_path: str) -> tuple[str, str | None]:
    """The path without a ``/_token/<token>`` prefix (``kubeconfig_for`` over http), and
    the token (None without one)."""
    if not raw_path.startswith(TOKEN_PATH_PREFIX):
        return raw_path, None
    token, _, rest = raw_path[len(TOKEN_PATH_PREFIX) :].partition("/")
    return "/" + rest, token


def _names_a_resource(segments: list[str]) -> bool:
    """Whether the path names a resource (``/api/v1/<resource>...``,
    ``/apis/<group>/<version>/<resource>...``) rather than discovery or anything else."""
    if not segments or segments[0] not in ("api", "apis"):
        return False
    return len(segments) > (2 if segments[0] == "api" else 3)


def _git_version(kubernetes_version: str) -> str:
    parts = kubernetes_version.lstrip("v").split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts):
        raise ValueError(
            f"kubernetes version must look like 1.33 or 1.33.2, not {kubernetes_version!r}"
        )
    return "v" + ".".join([*parts, "0"][:3])


def _json_response(
    body: Any,
    *,
    status: int = 200,
    content_type: str = JSON,
    headers: dict[str, str] | None = None,
    warnings: list[str] | None = None,
    encoded: bytes | None = None,
) -> web.Response:
    """``body`` as compact JSON (or ``encoded``, that JSON made already)."""
    response = web.Response(
        body=encoded if encoded is not None else json.dumps(body, separators=(",", ":")).encode(),
        status=status,
        headers={"Content-Type": content_type, **(headers or {})},
    )
    for warning in warnings or []:
        response.headers.add("Warning", f'299 - "{warning}"')
    return response


def _list_response(
    envelope: dict[str, Any], items: list[bytes], warnings: list[str]
) -> web.Response:
    """A list answer from its envelope (``items`` last and empty) and its items' JSON: the
    bytes ``_json_response`` would write for the whole body, without encoding every object
    again."""
    head = json.dumps(envelope, separators=(",", ":")).encode()
    assert head.endswith(b"[]}"), "items must come last in a list body"
    body = b"".join((head[:-2], b",".join(items), b"]}"))
    return _json_response(None, warnings=warnings, encoded=body)


def _retry_after(error: ApiError) -> dict[str, str] | None:
    seconds = (error.details or {}).get("retryAfterSeconds")
    return {"Retry-After": str(seconds)} if seconds is not None else None


def _media_type(request: web.Request) -> str:
    return request.headers.get("Content-Type", "").split(";")[0].strip().lower()


# libyaml's parser where PyYAML was built with it (about 10x the pure-Python one).
_YamlLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load_yaml(text: str) -> Any:
    """A YAML body. Clients (the kubernetes client, kubectl's server-side apply) mostly send
    JSON as ``apply-patch+yaml``: JSON is read as JSON, which is what YAML would make of it,
    without YAML's cost (it was most of the stand-in's time per apply)."""
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except ValueError:
            pass  # YAML's flow style, not JSON: YAML reads it
    return yaml.load(text, Loader=_YamlLoader)  # noqa: S506 - a safe loader (C or Python)


def _parse_body(request: web.Request, raw: bytes, *, yaml_ok: bool = False) -> Any:
    media_type = _media_type(request)
    if media_type.startswith("application/vnd.kubernetes.protobuf"):
        raise ApiError(
            415,
            "devcluster speaks JSON (and YAML for apply), not protobuf: kubectl's generator "
            "commands (kubectl create namespace, ...) send protobuf; use kubectl create -f or "
            "kubectl apply -f",
        )
    try:
        if yaml_ok or media_type in ("application/yaml", "application/x-yaml"):
            body = _load_yaml(raw.decode() or "null")
        else:
            body = json.loads(raw.decode() or "null")
    except (ValueError, yaml.YAMLError) as error:
        raise bad_request(f"the request body could not be decoded: {error}") from error
    if media_type == JSON_PATCH:
        return body
    if not isinstance(body, dict):
        raise bad_request("the request body must be an object")
    return body


async def _admin_json(request: web.Request) -> Any:
    raw = await request.read()
    try:
        return json.loads(raw.decode() or "{}")
    except ValueError as error:
        raise bad_request(f"invalid JSON: {error}") from error


def _list_body(
    target: Target, items: list[dict[str, Any]], list_meta: dict[str, Any]
) -> dict[str, Any]:
    return {
        "apiVersion": target.api_version,
        "kind": f"{target.resource_type.kind}List",
        "metadata": list_meta,
        "items": items,
    }


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


def _watch_list_options(query: Any) -> bool | None:
    """``sendInitialEvents`` of a watch (None when absent), after the checks of upstream's
    ``validateWatchOptions``: 422 ``ListOptions.meta.k8s.io "" is invalid`` otherwise."""
    send = query.get("sendInitialEvents")
    match = query.get("resourceVersionMatch", "")
    causes: list[dict[str, str]] = []
    if send is not None and match != "NotOlderThan":
        causes.append(
            {
                "reason": "FieldValueForbidden",
                "field": "resourceVersionMatch",
                "message": "Forbidden: sendInitialEvents requires setting resourceVersionMatch "
                "to NotOlderThan",
            }
        )
    if match:
        if send is None:
            causes.append(
                {
                    "reason": "FieldValueForbidden",
                    "field": "resourceVersionMatch",
                    "message": "Forbidden: resourceVersionMatch is forbidden for watch unless "
                    "sendInitialEvents is provided",
                }
            )
        if match != "NotOlderThan":
            causes.append(
                {
                    "reason": "FieldValueNotSupported",
                    "field": "resourceVersionMatch",
                    "message": f'Unsupported value: "{match}": supported values: "NotOlderThan"',
                }
            )
        if not _truthy(query.get("allowWatchBookmarks")):
            causes.append(
                {
                    "reason": "FieldValueForbidden",
                    "field": "allowWatchBookmarks",
                    "message": "Forbidden: allowWatchBookmarks required when sendInitialEvents "
                    "is provided",
                }
            )
    if causes:
        raise invalid("ListOptions", "meta.k8s.io", "", causes)
    return None if send is None else _truthy(send)


def _dry_run(query: Any) -> bool:
    values = query.getall("dryRun", [])
    for value in values:
        if value != "All":
            raise bad_request(f'Invalid dry run value: supported values are ["All"], got "{value}"')
    return bool(values)


def _dry_run_options(options: dict[str, Any]) -> bool:
    return "All" in (options.get("dryRun") or [])


def _field_validation(query: Any) -> None:
    value = query.get("fieldValidation")
    if value and value not in ("Strict", "Warn", "Ignore"):
        raise bad_request(f"fieldValidation {value!r} is invalid: use Ignore, Warn or Strict")


def _manager_from_user_agent(request: web.Request) -> str:
    """What a real server names a manager that gave no fieldManager: the user agent's prefix."""
    agent = request.headers.get("User-Agent", "unknown")
    return agent.split("/")[0][:128] or "unknown"


def _positive_int(value: str | None, name: str) -> int:
    if not value:
        return 0
    try:
        number = int(value)
    except ValueError as error:
        raise bad_request(f"{name} must be an integer") from error
    if number < 0:
        raise bad_request(f"{name} must not be negative")
    return number
