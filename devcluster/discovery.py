"""Discovery documents (plain and aggregated) and the OpenAPI v3 documents kubectl reads."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from devcluster import upstream_openapi
from devcluster.resources import Registry, ResourceType

AGGREGATED_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
STATUS_VERBS = ["get", "patch", "update"]


def wants_aggregated(accept: str) -> bool:
    """kubectl asks for ``as=APIGroupDiscoveryList`` at v2 (and v2beta1 as a second choice)."""
    for media_range in accept.split(","):
        params = {
            part.split("=", 1)[0].strip(): part.split("=", 1)[1].strip()
            for part in media_range.split(";")[1:]
            if "=" in part
        }
        if (
            params.get("g") == "apidiscovery.k8s.io"
            and params.get("v") == "v2"
            and params.get("as") == "APIGroupDiscoveryList"
        ):
            return True
    return False


def version_document(git_version: str) -> dict[str, Any]:
    major, minor = git_version.lstrip("v").split(".")[:2]
    return {
        "major": major,
        "minor": minor,
        "gitVersion": git_version,
        "gitCommit": "devcluster",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _group_entry(group: str, versions: list[str]) -> dict[str, Any]:
    listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": listed, "preferredVersion": listed[0]}


def api_group_list(registry: Registry) -> dict[str, Any]:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group_entry(group, versions) for group, versions in registry.groups()],
    }


def api_group(registry: Registry, group: str) -> dict[str, Any] | None:
    for name, versions in registry.groups():
        if name == group:
            return {"kind": "APIGroup", "apiVersion": "v1", **_group_entry(group, versions)}
    return None


def api_resource_list(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    types = registry.in_group_version(group, version)
    if not types:
        return None
    resources: list[dict[str, Any]] = []
    for t in types:
        entry: dict[str, Any] = {
            "name": t.plural,
            "singularName": t.singular,
            "namespaced": t.namespaced,
            "kind": t.kind,
            "verbs": list(t.verbs),
            "storageVersionHash": _hash(t.key)[:12],
        }
        if t.short_names:
            entry["shortNames"] = list(t.short_names)
        if t.categories:
            entry["categories"] = list(t.categories)
        resources.append(entry)
        if t.key == "serviceaccounts":
            resources.append(
                {
                    "name": "serviceaccounts/token",
                    "singularName": "",
                    "namespaced": True,
                    "group": "authentication.k8s.io",
                    "version": "v1",
                    "kind": "TokenRequest",
                    "verbs": ["create"],
                }
            )
        if t.has_status:
            resources.append(
                {
                    "name": f"{t.plural}/status",
                    "singularName": "",
                    "namespaced": t.namespaced,
                    "kind": t.kind,
                    "verbs": ["get"] if t.read_only else STATUS_VERBS,
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


def _aggregated_resource(t: ResourceType, version: str) -> dict[str, Any]:
    response_kind = {"group": t.group, "version": version, "kind": t.kind}
    entry: dict[str, Any] = {
        "resource": t.plural,
        "responseKind": response_kind,
        "scope": "Namespaced" if t.namespaced else "Cluster",
        "singularResource": t.singular,
        "verbs": list(t.verbs),
    }
    if t.short_names:
        entry["shortNames"] = list(t.short_names)
    if t.categories:
        entry["categories"] = list(t.categories)
    if t.has_status:
        entry["subresources"] = [
            {
                "subresource": "status",
                "responseKind": response_kind,
                "verbs": ["get"] if t.read_only else STATUS_VERBS,
            }
        ]
    if t.key == "serviceaccounts":
        entry["subresources"] = [
            {
                "subresource": "token",
                "responseKind": {
                    "group": "authentication.k8s.io",
                    "version": "v1",
                    "kind": "TokenRequest",
                },
                "verbs": ["create"],
            }
        ]
    return entry


def aggregated_discovery(registry: Registry, *, core: bool) -> dict[str, Any]:
    """``APIGroupDiscoveryList`` for ``/api`` (``core=True``) or ``/apis``."""
    groups = [("", ["v1"])] if core else registry.groups()
    items = []
    for group, versions in groups:
        items.append(
            {
                "metadata": {"name": group, "creationTimestamp": None},
                "versions": [
                    {
                        "version": version,
                        "resources": [
                            _aggregated_resource(t, version)
                            for t in registry.in_group_version(group, version)
                        ],
                        "freshness": "Current",
                    }
                    for version in versions
                ],
            }
        )
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    }


# OpenAPI v3 ------------------------------------------------------------------------------------
#
# kubectl (apply, create, replace, edit) checks in /openapi/v3 that the PATCH operation of each
# kind accepts the ``fieldValidation`` query parameter; if it does, kubectl leaves validation to
# the server (and sends ``fieldValidation=Strict``). Without that it would fall back to
# /openapi/v2 in protobuf. So each group-version document lists, per kind, the item path with
# its PATCH operation and the write parameters, and (for CRDs) the schema, which is enough for
# ``kubectl explain`` as well.

_WRITE_PARAMETERS = ["dryRun", "fieldManager", "fieldValidation", "force", "pretty"]


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def openapi_v3_root(registry: Registry, git_version: str) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for group, versions in [("", ["v1"]), *registry.groups()]:
        for version in versions:
            path = _gv_path(group, version)
            document = openapi_v3_group_version(registry, group, version, git_version)
            digest = _hash(json.dumps(document, sort_keys=True)).upper()[:32]
            paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": paths}


def _schema_name(t: ResourceType, version: str) -> str:
    reversed_group = ".".join(reversed(t.group.split("."))) if t.group else "io.k8s.api.core"
    return f"{reversed_group}.{version}.{t.kind}"


def openapi_v3_group_version(
    registry: Registry, group: str, version: str, git_version: str
) -> dict[str, Any] | None:
    types = registry.in_group_version(group, version)
    if not types:
        return None
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for t in types:
        if t.create_only:
            continue
        gvk = {"group": t.group, "version": version, "kind": t.kind}
        prefix = f"/{_gv_path(group, version)}"
        if t.namespaced:
            prefix += "/namespaces/{namespace}"
        item_path = f"{prefix}/{t.plural}/{{name}}"
        upstream = (
            {} if t.is_custom else upstream_openapi.schemas_for(git_version, group, version, t.kind)
        )
        schema_name = upstream_openapi.root_name(upstream) if upstream else _schema_name(t, version)
        ref = {"$ref": f"#/components/schemas/{schema_name}"}
        content = {"application/json": {"schema": ref}}
        operation = {
            "x-kubernetes-group-version-kind": gvk,
            "x-kubernetes-action": "patch",
            "operationId": f"patch{t.kind}",
            "parameters": [
                {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
                for name in _WRITE_PARAMETERS
            ],
            "requestBody": {
                "content": {"application/merge-patch+json": {"schema": {"type": "object"}}}
            },
            "responses": {"200": {"description": "OK", "content": content}},
        }
        read = {
            "x-kubernetes-group-version-kind": gvk,
            "x-kubernetes-action": "get",
            "operationId": f"read{t.kind}",
            "responses": {"200": {"description": "OK", "content": content}},
        }
        paths[item_path] = {"get": read} if t.read_only else {"get": read, "patch": operation}
        if upstream:
            # The built-in kinds: Kubernetes' own schemas (kubectl explain reads them).
            schemas.update(upstream)
            continue
        schema = dict(t.schemas.get(version) or {"type": "object"})
        schema["x-kubernetes-group-version-kind"] = [gvk]
        schemas[_schema_name(t, version)] = schema
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (devcluster stand-in)", "version": git_version},
        "paths": paths,
        "components": {"schemas": schemas},
    }
