"""Push desired objects into a cluster: server-side apply, one field manager, write only what
differs, prune what the portal owns and no longer wants. No Django here.

A pass is: one LIST per kind (labels select what the portal owns in the pass's scope), then an
apply for each desired object whose portal-owned fields differ from the live ones, then a
delete for each owned object no longer desired. Backends:

- ``KubernetesBackend``: the official ``kubernetes`` client over HTTP (a real cluster from a
  kubeconfig or the in-cluster service account, or the local stand-in in ``devcluster/``).
- ``ManifestsBackend``: a directory of YAML for GitOps, one file per tenant plus the
  cluster-wide objects, in a stable order so diffs stay small.

Errors: 422 and other 4xx are permanent (the object is wrong: retrying will not help); 408, 409,
429, 5xx, timeouts and connection errors are retryable (``RetryableError``), and the caller
retries the whole pass with backoff. Applies are idempotent, so a retried pass is safe.

Concurrency: a backend may say how many writes it takes at once (``concurrency``; the
Kubernetes backend's connection pool is that large, a folder of YAML takes one). The writes of a
pass then go in waves: one wave per kind in ``KINDS`` order, split where the compiler orders
objects of a kind among themselves (parent Cohorts before their children, Volcano group queues
before tenants' queues), and a wave starts only when the one before it has finished, so an
object is never written before what it refers to (its Namespace, its Cohort, its ClusterQueue).
Within a wave the writes run on a pool of threads; what each one did is recorded in the wave's
order, as a sequential pass would.

The portal's own RoleBinding of each namespace it manages (``portal_access``: what gives it its
writes there) is written right after the Namespaces, impersonating the binder, before anything
else goes into the namespace; it is pruned last, only with its namespace when that is released,
so the portal keeps the right to prune the rest.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import orjson
import yaml

from quotas.kube import compiler, portal_access
from quotas.kube.diff import GENERATION_ONLY, differences, needs_write
from quotas.kube.memo import ApplyMemo, object_digest
from quotas.kube.resources import KINDS, Kind, key_of, kind_of
from quotas.kube.spec import (
    FIELD_MANAGER,
    LABEL_CLUSTER,
    LABEL_MANAGED_BY,
    LABEL_TENANT,
    MANAGED_BY,
)
from quotas.kube.validate import transition_issues

logger = logging.getLogger(__name__)

NAMESPACE: Kind = next(kind for kind in KINDS if kind.kind == "Namespace")
ROLE_BINDING: Kind = next(kind for kind in KINDS if kind.kind == "RoleBinding")

Key = tuple[str, str, str, str]
LIST_PAGE = 500
# Kinds a pass lists at once (at most the backend's concurrency).
LIST_CONCURRENCY = 4
TIMEOUT = (5.0, 30.0)  # connect, read (seconds)
RETRYABLE_STATUSES = {408, 409, 429, 500, 502, 503, 504}
_T = TypeVar("_T")


class ApplyError(Exception):
    """The API server refused a write for good (422 Invalid, 403, ...): the message is its own."""

    def __init__(self, message: str, *, status: int | None = None, key: Key | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.key = key


class RetryableError(ApplyError):
    """The server was down, busy, conflicting or slow: try the pass again later."""


class KindNotServed(ApplyError):
    """The cluster does not serve this kind (no Kueue or Volcano installed)."""


@dataclass
class Scope:
    """What a pass owns: objects labelled as the portal's on ``cluster`` (and of ``tenant``
    for a tenant pass). ``prune`` deletes owned objects in scope that are no longer desired;
    cluster-wide objects are pruned only by a full pass."""

    cluster: str
    tenant: str | None = None
    prune: bool = True
    # The owner label value: the quota sync owns ``gpu-quota-portal``; the MIG push through the
    # GPU Operator owns its ConfigMap under a value of its own, so neither prunes the other's.
    managed_by: str = MANAGED_BY

    def selectors(self, wanted: Sequence[dict[str, Any]]) -> list[str]:
        """Label selectors of one kind's LIST: everything the portal owns on the cluster for a
        full pass; for a tenant pass, the tenant's objects and, where the pass also wants
        cluster-wide objects of the kind, those (one LIST each)."""
        base = f"{LABEL_MANAGED_BY}={self.managed_by},{LABEL_CLUSTER}={self.cluster}"
        if self.tenant is None:
            return [base]
        owners = {_tenant_owned(o) for o in wanted} or {True}
        return [
            f"{base},{LABEL_TENANT}={self.tenant}" if tenant_owned else f"{base},!{LABEL_TENANT}"
            for tenant_owned in sorted(owners, reverse=True)
        ]


@dataclass(frozen=True)
class NamespaceGuard:
    """Which namespaces a pass may write into (``apply_objects``' ``guard``): never one that
    ``reserved`` gives a reason for (a system namespace, one the cluster reserves), and never
    one that exists on the cluster without the portal's managed-by label unless it is in
    ``adopted`` (a platform admin agreed). A refused namespace is left as it is: nothing
    written, nothing pruned in it, and the reason is a failure of the pass."""

    reserved: Callable[[str], str | None]
    adopted: frozenset[str] = frozenset()
    cluster: str = ""

    def not_created_by_portal(self, name: str) -> str:
        where = f" on {self.cluster}" if self.cluster else ""
        return (
            f"namespace {name} exists{where} and the portal did not create it, so nothing is "
            "written there: a platform admin can adopt it (adopt… beside it on the tenant's "
            f"page, or POST .../namespaces/{name}/adopt/) or give the tenant another namespace"
        )


@dataclass
class Change:
    key: Key
    fields: list[str] = field(default_factory=list)
    # For a changed object: {path: {"desired": ..., "live": ...}} (the drift it repaired).
    detail: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        _api_version, kind, namespace, name = self.key
        where = f"{namespace}/{name}" if namespace else name
        return f"{kind} {where}"


@dataclass
class ApplyResult:
    created: list[Change] = field(default_factory=list)
    changed: list[Change] = field(default_factory=list)
    pruned: list[Change] = field(default_factory=list)
    # Namespaces the portal no longer wants: the portal's labels and annotations taken off
    # (never deleted: users' work lives there).
    released: list[Change] = field(default_factory=list)
    unchanged: int = 0
    # Objects as desired but for an older generation annotation, written again only to say
    # the generation the cluster now has (``diff.GENERATION_ONLY``): not a change, not drift.
    restamped: list[Change] = field(default_factory=list)
    failed: list[tuple[Key, str]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # kinds the cluster does not serve

    @property
    def writes(self) -> int:
        return (
            len(self.created)
            + len(self.changed)
            + len(self.restamped)
            + len(self.pruned)
            + len(self.released)
        )

    def summary(self) -> dict[str, Any]:
        return {
            "created": [c.describe() for c in self.created],
            "changed": [{"object": c.describe(), "fields": c.fields} for c in self.changed],
            "pruned": [c.describe() for c in self.pruned],
            "released": [c.describe() for c in self.released],
            "unchanged": self.unchanged,
            "restamped": len(self.restamped),
            "failed": [
                {"object": Change(key).describe(), "message": message}
                for key, message in self.failed
            ],
            "skipped": self.skipped,
        }


class Backend(Protocol):
    """Where a pass writes. A backend may hold connections: whoever makes one closes it
    (``quotas.backends.cluster_backend`` does, on leaving its ``with``). A backend that can
    take several writes at once (from several threads) says how many in ``concurrency``
    (read with ``getattr``: 1 where it says nothing)."""

    def list_owned(self, kind: Kind, selector: str) -> list[dict[str, Any]]: ...

    def apply(
        self,
        obj: dict[str, Any],
        *,
        dry_run: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """A server-side apply of ``obj``. ``headers``: extra request headers, for the portal's
        own RoleBinding of a namespace the impersonation of the binder
        (``portal_access.impersonation_for``); a backend that is no API server ignores them."""
        ...

    def delete(self, kind: Kind, *, namespace: str | None, name: str) -> None: ...

    def merge_patch(
        self, kind: Kind, *, namespace: str | None, name: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        """A JSON merge patch of an object that exists (one the portal may not own, such as a
        Kueue Workload); ``ApplyError`` where the backend has no live objects to patch."""
        ...

    def close(self) -> None: ...


def _tenant_owned(obj: dict[str, Any]) -> bool:
    return LABEL_TENANT in (obj.get("metadata", {}).get("labels") or {})


def sort_for_apply(objects: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(objects, key=compiler.sort_key)


def apply_objects(
    backend: Backend,
    desired: Sequence[dict[str, Any]],
    scope: Scope,
    *,
    kinds: Sequence[Kind] = KINDS,
    dry_run: bool = False,
    guard: NamespaceGuard | None = None,
    memo: ApplyMemo | None = None,
    digests: Callable[[dict[str, Any]], bytes] | None = None,
) -> ApplyResult:
    """One pass: LIST per kind, apply what differs, prune what is no longer desired.
    Raises ``RetryableError`` at the first retryable failure (nothing is lost: the next pass
    starts over); a permanent failure of one object is recorded and the others go on.
    With a ``guard``, namespaces it refuses are left alone (see ``NamespaceGuard``).

    With a ``memo`` (``quotas.kube.memo.ApplyMemo``, the cluster's full passes), a live object
    whose uid and resourceVersion are those found to hold the same desired object (by digest,
    from ``digests``) last pass is not compared field by field again; any edit in the cluster
    changes its resourceVersion, any change in the portal the digest. The caller begins and
    ends the memo's pass (``ApplyMemo.begin`` / ``end``) around every call of its pass."""
    result = ApplyResult()
    by_kind: dict[Kind, list[dict[str, Any]]] = {}
    for obj in sort_for_apply(desired):
        by_kind.setdefault(kind_of(obj), []).append(obj)

    live: dict[Key, dict[str, Any]] = {}
    served: set[Kind] = set()
    # Nothing to write, nothing to prune: no LIST (a dry run reads less).
    listed = [kind for kind in kinds if by_kind.get(kind) or scope.prune]
    concurrency = max(1, int(getattr(backend, "concurrency", 1) or 1))
    for kind, found in zip(
        listed, _list_kinds(backend, listed, by_kind, scope, concurrency), strict=True
    ):
        wanted = by_kind.get(kind, [])
        if isinstance(found, KindNotServed):
            if wanted:
                result.skipped.append(found.message)
                result.failed.extend((key_of(obj), found.message) for obj in wanted)
            continue
        for obj in found:
            live[key_of(obj)] = obj
        served.add(kind)

    refused: set[str] = set()
    if guard is not None:
        refused = _guard_namespaces(backend, by_kind, live, guard, scope, result)
        if refused:
            by_kind = {
                kind: [obj for obj in objects if not _guarded(obj, refused)]
                for kind, objects in by_kind.items()
            }
            live = {key: obj for key, obj in live.items() if not _guarded(obj, refused)}

    pool = ThreadPoolExecutor(concurrency, "apply") if concurrency > 1 else None
    same = _Same(memo, digests or object_digest) if memo is not None and not dry_run else None
    try:
        _write_desired(backend, by_kind, live, served, kinds, result, dry_run, pool, same)
        if scope.prune:
            _prune(backend, desired, live, served, kinds, scope, result, dry_run, pool)
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    return result


@dataclass
class _Same:
    """The apply memo of a pass, with how to find a desired object's digest."""

    memo: ApplyMemo
    digest: Callable[[dict[str, Any]], bytes]

    def unchanged(self, key: Key, obj: dict[str, Any], live: dict[str, Any]) -> bool:
        return self.memo.unchanged(key, live, self.digest(obj))

    def remember(self, key: Key, obj: dict[str, Any], live: dict[str, Any]) -> None:
        self.memo.remember(key, live, self.digest(obj))


def _list_kinds(
    backend: Backend,
    kinds: Sequence[Kind],
    by_kind: dict[Kind, list[dict[str, Any]]],
    scope: Scope,
    concurrency: int,
) -> list[list[dict[str, Any]] | KindNotServed]:
    """Each kind's owned objects (its selectors' LISTs one after another), or the
    ``KindNotServed`` the cluster answered, in ``kinds`` order. Kinds are listed
    ``concurrency`` at a time where the backend writes that many at once: the cluster pages
    one kind while the portal reads another's. A ``RetryableError`` is raised once every LIST
    under way has ended."""

    def one(kind: Kind) -> list[dict[str, Any]] | KindNotServed:
        found: list[dict[str, Any]] = []
        try:
            for selector in scope.selectors(by_kind.get(kind, [])):
                found.extend(backend.list_owned(kind, selector))
        except KindNotServed as exc:
            return exc
        return found

    workers = min(concurrency, LIST_CONCURRENCY, len(kinds))
    if workers < 2:
        return [one(kind) for kind in kinds]
    with ThreadPoolExecutor(workers, "list") as pool:
        futures = [pool.submit(one, kind) for kind in kinds]
        wait(futures)
    return [future.result() for future in futures]


def _namespace_of(obj: dict[str, Any]) -> str:
    """The namespace an object is in, or a Namespace's own name; "" for cluster-wide ones."""
    meta = obj.get("metadata") or {}
    if obj.get("kind") == "Namespace" and obj.get("apiVersion") == "v1":
        return str(meta.get("name") or "")
    return str(meta.get("namespace") or "")


def _guarded(obj: dict[str, Any], namespaces: set[str]) -> bool:
    """Whether the namespace guard decides for ``obj``: a tenant's object (or a Namespace) in
    one of ``namespaces``. The portal's named cluster-level objects in a system namespace
    (the time-slicing and MIG ConfigMaps in the GPU Operator's) carry no tenant label and are
    not the guard's: RBAC and the admission policy hold those to their names."""
    name = _namespace_of(obj)
    if not name or name not in namespaces:
        return False
    return obj.get("kind") == "Namespace" or _tenant_owned(obj)


def _guard_namespaces(
    backend: Backend,
    by_kind: dict[Kind, list[dict[str, Any]]],
    live: dict[Key, dict[str, Any]],
    guard: NamespaceGuard,
    scope: Scope,
    result: ApplyResult,
) -> set[str]:
    """The desired namespaces ``guard`` refuses, each recorded in ``result.failed`` under its
    Namespace: reserved ones, and those that exist without the portal's managed-by label
    (one GET each, only for a namespace the LIST did not find as the portal's; a backend that
    cannot read, a folder of YAML, has none) unless adopted. Only the namespaces of tenants'
    objects count: an object without a tenant label (the time-slicing ConfigMap in
    gpu-operator) is never refused for its namespace, and a tenant's never admitted to a
    reserved one for it."""
    namespaces: dict[str, Key] = {}
    for kind, objects in by_kind.items():
        for obj in objects:
            name = _namespace_of(obj)
            if kind.kind != "Namespace" and not _tenant_owned(obj):
                continue
            if name and (kind.kind == "Namespace" or name not in namespaces):
                key = key_of(obj) if kind.kind == "Namespace" else ("v1", "Namespace", "", name)
                namespaces[name] = key
    read = getattr(backend, "read", None)
    refused: set[str] = set()
    for name, key in sorted(namespaces.items()):
        reason = guard.reserved(name)
        if reason is None and key not in live and name not in guard.adopted and read:
            existing = read(NAMESPACE, namespace=None, name=name)
            labels = ((existing or {}).get("metadata") or {}).get("labels") or {}
            if existing is not None and labels.get(LABEL_MANAGED_BY) != scope.managed_by:
                reason = guard.not_created_by_portal(name)
        if reason is not None:
            refused.add(name)
            result.failed.append((key, reason))
    return refused


@dataclass
class _Write:
    obj: dict[str, Any]
    key: Key
    current: dict[str, Any] | None
    reasons: list[str]


def _waves(objects: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """A kind's objects (sorted by ``compiler.sort_key``) cut where the compiler's order
    changes: what a later wave refers to (a parent Cohort) is in an earlier one."""
    waves: list[list[dict[str, Any]]] = []
    last: int | None = None
    for obj in objects:
        order = compiler.apply_order(obj)
        if order != last:
            waves.append([])
            last = order
        waves[-1].append(obj)
    return waves


def _run_wave(
    items: Sequence[_T], work: Callable[[_T], str | None], pool: ThreadPoolExecutor | None
) -> list[str | None]:
    """``work`` for every item (on ``pool`` when there is one and more than one item), the
    answers in the items' order: None for done, a message for a permanent failure. The first
    ``RetryableError`` is raised once the writes already running have finished, and nothing
    after it starts: the pass is retried whole, and every write is idempotent."""
    if pool is None or len(items) < 2:
        return [work(item) for item in items]
    futures: list[Future[str | None]] = [pool.submit(work, item) for item in items]
    answers: list[str | None] = []
    retry: RetryableError | None = None
    for future in futures:
        if retry is not None:
            future.cancel()
            continue
        try:
            answers.append(future.result())
        except RetryableError as exc:
            retry = exc
            for later in futures:
                later.cancel()
    if retry is not None:
        for future in futures:
            if not future.cancelled():
                future.exception()  # wait for what was already running
        raise retry
    return answers


def _write_steps(
    by_kind: dict[Kind, list[dict[str, Any]]], kinds: Sequence[Kind]
) -> list[tuple[Kind, list[dict[str, Any]]]]:
    """Each kind's objects in ``kinds`` order, the portal's own RoleBindings of its namespaces
    taken out of the RoleBindings and written right after the Namespaces (first, where the
    pass writes no Namespace): they give the portal its writes in those namespaces."""
    own = [o for o in by_kind.get(ROLE_BINDING, []) if portal_access.is_namespace_role_binding(o)]
    steps: list[tuple[Kind, list[dict[str, Any]]]] = []
    if ROLE_BINDING in kinds and own and NAMESPACE not in kinds:
        steps.append((ROLE_BINDING, own))
    for kind in kinds:
        objects = by_kind.get(kind, [])
        if kind is ROLE_BINDING:
            objects = [o for o in objects if not portal_access.is_namespace_role_binding(o)]
        steps.append((kind, objects))
        if kind is NAMESPACE and ROLE_BINDING in kinds and own:
            steps.append((ROLE_BINDING, own))
    return steps


def _write_desired(
    backend: Backend,
    by_kind: dict[Kind, list[dict[str, Any]]],
    live: dict[Key, dict[str, Any]],
    served: set[Kind],
    kinds: Sequence[Kind],
    result: ApplyResult,
    dry_run: bool,
    pool: ThreadPoolExecutor | None,
    same: _Same | None = None,
) -> None:
    def write(item: _Write) -> str | None:
        try:
            if item.current is not None:
                refuse_breaking_update(item.obj, item.current, key=item.key)
            headers = portal_access.impersonation_for(item.obj)
            if headers:
                backend.apply(item.obj, dry_run=dry_run, headers=headers)
            else:
                backend.apply(item.obj, dry_run=dry_run)
        except RetryableError:
            raise
        except ApplyError as exc:
            return exc.message
        return None

    # Why nothing more is written into a namespace, where something is: the cluster refused
    # to write (to label, for an adopted one) the namespace, or the portal's binding there, so
    # a namespace is the portal's, labelled and bound, before anything else is written in it.
    blocked: dict[str, str] = {}
    # A dry run creates nothing: what goes into a new namespace is not checked; nor, in a dry
    # run, what goes where the portal's binding is still to be written (the binder writes it;
    # the dry run's account, the web pods', may not impersonate, and has no rights there yet).
    unchecked: dict[str, str] = {}
    for kind, objects in _write_steps(by_kind, kinds):
        if kind not in served:
            continue
        for wave in _waves(objects):
            todo: list[_Write] = []
            for obj in wave:
                key = key_of(obj)
                if key[2] and key[2] in blocked:
                    result.skipped.append(
                        f"{Change(key).describe()} not written: {blocked[key[2]]}"
                    )
                    continue
                current = live.get(key)
                if same is not None and current is not None and same.unchanged(key, obj, current):
                    result.unchanged += 1
                    continue
                reasons = needs_write(obj, current, FIELD_MANAGER)
                if not reasons:
                    result.unchanged += 1
                    if same is not None and current is not None:
                        same.remember(key, obj, current)
                    continue
                if dry_run and key[2] in unchecked:
                    result.skipped.append(
                        f"{Change(key).describe()} not checked: {unchecked[key[2]]}"
                    )
                    continue
                if dry_run and current is None and kind.kind == "Namespace":
                    unchecked[key[3]] = "its namespace does not exist yet"
                if dry_run and portal_access.is_namespace_role_binding(obj):
                    unchecked[key[2]] = (
                        "the portal's RoleBinding in its namespace is not written yet "
                        "(the next push writes it)"
                    )
                    result.skipped.append(
                        f"{Change(key).describe()} not checked: the push writes it as the binder"
                    )
                    continue
                todo.append(_Write(obj, key, current, reasons))
            for item, failure in zip(todo, _run_wave(todo, write, pool), strict=True):
                if failure is not None:
                    result.failed.append((item.key, failure))
                    if kind.kind == "Namespace":
                        blocked[item.key[3]] = "the cluster refused its namespace"
                    elif portal_access.is_namespace_role_binding(item.obj):
                        blocked[item.key[2]] = "the cluster refused the portal's RoleBinding there"
                elif item.current is None:
                    result.created.append(Change(item.key))
                elif item.reasons == [GENERATION_ONLY]:
                    result.restamped.append(Change(item.key, item.reasons))
                else:
                    result.changed.append(
                        Change(item.key, item.reasons, drift(item.obj, item.current))
                    )


def _prune(
    backend: Backend,
    desired: Sequence[dict[str, Any]],
    live: dict[Key, dict[str, Any]],
    served: set[Kind],
    kinds: Sequence[Kind],
    scope: Scope,
    result: ApplyResult,
    dry_run: bool,
    pool: ThreadPoolExecutor | None,
) -> None:
    """Delete owned objects in scope no longer desired: kinds in reverse order, and within a
    kind the compiler's order reversed (child Cohorts before their parents)."""

    def delete(target: tuple[Kind, Key]) -> str | None:
        kind, key = target
        if dry_run:
            return None
        try:
            backend.delete(kind, namespace=key[2] or None, name=key[3])
        except RetryableError:
            raise
        except ApplyError as exc:
            return exc.message
        return None

    def prune(kind: Kind, gone: list[dict[str, Any]]) -> None:
        for wave in reversed(_waves(sort_for_apply(gone))):
            doomed = [(kind, key_of(obj)) for obj in wave]
            for (_, key), failure in zip(doomed, _run_wave(doomed, delete, pool), strict=True):
                if failure is not None:
                    result.failed.append((key, failure))
                else:
                    result.pruned.append(Change(key))

    def in_scope(key: Key, obj: dict[str, Any]) -> bool:
        # cluster-wide objects are pruned by the full pass only
        return key not in wanted_keys and (scope.tenant is None or _tenant_owned(obj))

    wanted_keys = {key_of(o) for o in desired}
    live_by_kind: dict[tuple[str, str], list[tuple[Key, dict[str, Any]]]] = {}
    for key, obj in live.items():
        live_by_kind.setdefault(key[:2], []).append((key, obj))
    # The portal's own RoleBindings: pruned after everything else, and only where their
    # namespace is no longer wanted (released) and nothing of the portal's failed to go there.
    own_bindings = [
        (key, obj)
        for key, obj in live_by_kind.get((ROLE_BINDING.api_version, ROLE_BINDING.kind), [])
        if portal_access.is_namespace_role_binding(obj)
    ]
    for kind in reversed(kinds):
        if kind is NAMESPACE:
            _prune_own_bindings(own_bindings, wanted_keys, served, kinds, result, prune, in_scope)
        if kind is NAMESPACE and kind in served:
            _release_namespaces(backend, live_by_kind, wanted_keys, scope, result, dry_run)
        if kind not in served or kind.never_prune:
            continue
        gone = [
            obj
            for key, obj in live_by_kind.get((kind.api_version, kind.kind), [])
            if in_scope(key, obj) and not portal_access.is_namespace_role_binding(obj)
        ]
        prune(kind, gone)
    if NAMESPACE not in kinds:
        _prune_own_bindings(own_bindings, wanted_keys, served, kinds, result, prune, in_scope)


def _prune_own_bindings(
    own_bindings: list[tuple[Key, dict[str, Any]]],
    wanted_keys: set[Key],
    served: set[Kind],
    kinds: Sequence[Kind],
    result: ApplyResult,
    prune: Callable[[Kind, list[dict[str, Any]]], None],
    in_scope: Callable[[Key, dict[str, Any]], bool],
) -> None:
    """The portal's RoleBinding of a namespace it releases, once all else of its there is gone:
    deleting it first would take away the right to delete the rest. Where a prune in that
    namespace failed, the binding stays for the next pass to finish with."""
    if ROLE_BINDING not in kinds or ROLE_BINDING not in served:
        return
    failed = {key[2] for key, _ in result.failed if key[2]}
    gone = [
        obj
        for key, obj in own_bindings
        if in_scope(key, obj)
        and ("v1", "Namespace", "", key[2]) not in wanted_keys
        and key[2] not in failed
    ]
    prune(ROLE_BINDING, gone)


def _release_namespaces(
    backend: Backend,
    live_by_kind: dict[tuple[str, str], list[tuple[Key, dict[str, Any]]]],
    wanted_keys: set[Key],
    scope: Scope,
    result: ApplyResult,
    dry_run: bool,
) -> None:
    """Tenants' namespaces the portal no longer wants (taken away from their tenant): never
    deleted, but released: a server-side apply of the bare name under the portal's field
    manager drops the labels and annotations it set (the tenant label the admission policies
    select on among them), and leaves what others set. Runs after everything in them was
    pruned (Namespace is the first kind, so the last in reverse). Only on a live cluster (a
    backend that reads): a folder of YAML keeps its Namespace objects as they are."""
    if getattr(backend, "read", None) is None:
        return
    for key, obj in live_by_kind.get((NAMESPACE.api_version, NAMESPACE.kind), []):
        if key in wanted_keys or not _tenant_owned(obj):
            continue
        if (
            scope.tenant is not None
            and (obj["metadata"].get("labels") or {}).get(LABEL_TENANT) != scope.tenant
        ):
            continue
        bare = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": key[3]}}
        try:
            if not dry_run:
                backend.apply(bare)
        except RetryableError:
            raise
        except ApplyError as exc:
            result.failed.append((key, exc.message))
        else:
            result.released.append(Change(key))


def as_applied(desired: Any, live: Any) -> Any:
    """The object a server-side apply of ``desired`` over ``live`` leaves: desired's values
    over live's, maps merged key by key, lists and scalars replaced. (What another manager
    set stays; a field the portal stops sending is kept here, so a rule it would break is
    left to the API server.)"""
    if isinstance(desired, dict) and isinstance(live, dict):
        merged = dict(live)
        for name, value in desired.items():
            merged[name] = as_applied(value, live.get(name))
        return merged
    return desired


def refuse_breaking_update(
    desired: dict[str, Any], live: dict[str, Any], *, key: Key | None = None
) -> None:
    """Raise a permanent ``ApplyError`` (nothing is written) when updating ``live`` to
    ``desired`` breaks a CRD transition rule, such as a LocalQueue's immutable
    ``spec.clusterQueue``: the API server would refuse it the same way, every pass."""
    problems = transition_issues(as_applied(desired, live), live)
    if problems:
        raise ApplyError(
            "update refused before writing, the API server would reject it: " + "; ".join(problems),
            status=422,
            key=key,
        )


def drift(desired: dict[str, Any], live: dict[str, Any]) -> dict[str, Any]:
    """The fields a hand edit changed: {path: {"desired": ..., "live": ...}}."""
    return {
        path: {"desired": want, "live": have}
        for path, (want, have) in differences(desired, live).items()
    }


# --- the Kubernetes API ---------------------------------------------------------------------


class KubernetesBackend:
    """A cluster through the official client. ``api_client`` comes from a kubeconfig
    (``from_kubeconfig``) or the in-cluster service account (``in_cluster``). ``concurrency``
    is how many writes a pass sends at once; the client's connection pool
    (``connection_pool_maxsize``) is made that large, so each thread keeps its connection."""

    def __init__(
        self, api_client: Any, *, field_manager: str = FIELD_MANAGER, concurrency: int = 1
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be 1 or more, not {concurrency}")
        self.api = api_client
        self.field_manager = field_manager
        self.concurrency = concurrency

    @classmethod
    def from_kubeconfig(
        cls, path: str, *, context: str | None = None, concurrency: int = 1
    ) -> KubernetesBackend:
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(
            config_file=path, context=context, client_configuration=configuration
        )
        return cls(
            client.ApiClient(_client_configuration(configuration, concurrency)),
            concurrency=concurrency,
        )

    @classmethod
    def in_cluster(cls, *, concurrency: int = 1) -> KubernetesBackend:
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
        return cls(
            client.ApiClient(_client_configuration(configuration, concurrency)),
            concurrency=concurrency,
        )

    def close(self) -> None:
        self.api.close()

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        request = self.api.param_serialize(
            method,
            path,
            query_params=query or [],
            header_params={
                "Accept": "application/json",
                "Content-Type": content_type,
                **(headers or {}),
            },
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response = self.api.call_api(*request, _request_timeout=TIMEOUT)
            response.read()
        except ApiException as exc:
            raise _error(exc.status, exc.body, path) from exc
        except (HTTPError, OSError) as exc:
            raise RetryableError(f"{method} {path}: {exc}") from exc
        if not 200 <= response.status <= 299:
            raise _error(response.status, response.data, path)
        return _loads(response.data) if response.data else None

    def list_owned(self, kind: Kind, selector: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        token = ""
        while True:
            query = [("labelSelector", selector), ("limit", str(LIST_PAGE))]
            if token:
                query.append(("continue", token))
            try:
                page = self._call("GET", kind.path(), query=query)
            except ApplyError as exc:
                if exc.status == 404:
                    raise KindNotServed(
                        f"the cluster does not serve {kind.kind} ({kind.api_version}): "
                        f"is {kind.group or 'core'} installed?",
                        status=404,
                    ) from exc
                raise
            for obj in page.get("items") or []:
                obj.setdefault("apiVersion", kind.api_version)
                obj.setdefault("kind", kind.kind)
                items.append(obj)
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return items

    def list_all(self, kind: Kind, selector: str = "") -> list[dict[str, Any]]:
        """Every object of ``kind`` (optionally matching ``selector``), owned or not: for
        objects the portal reads but does not own, such as Nodes."""
        return self.list_owned(kind, selector)

    def read(self, kind: Kind, *, namespace: str | None, name: str) -> dict[str, Any] | None:
        """One object, or None when there is none."""
        try:
            return self._call("GET", kind.path(namespace=namespace, name=name))
        except ApplyError as exc:
            if exc.status == 404:
                return None
            raise

    def merge_patch(
        self, kind: Kind, *, namespace: str | None, name: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386) of an existing object: never creates one (a missing
        object answers 404, an ``ApplyError``), and a ``metadata.resourceVersion`` in ``body``
        is a precondition (409, retryable)."""
        return self._call(
            "PATCH",
            kind.path(namespace=namespace, name=name),
            query=[("fieldManager", self.field_manager)],
            body=body,
            content_type="application/merge-patch+json",
        )

    def apply(
        self,
        obj: dict[str, Any],
        *,
        dry_run: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        kind = kind_of(obj)
        meta = obj["metadata"]
        query = [("fieldManager", self.field_manager), ("force", "true")]
        if dry_run:
            query.append(("dryRun", "All"))
        # The portal owns these fields: force takes them back from a hand edit (drift repair).
        return self._call(
            "PATCH",
            kind.path(namespace=meta.get("namespace"), name=meta["name"]),
            query=query,
            body=obj,
            content_type="application/apply-patch+yaml",
            headers=headers,
        )

    def delete(self, kind: Kind, *, namespace: str | None, name: str) -> None:
        try:
            self._call("DELETE", kind.path(namespace=namespace, name=name))
        except ApplyError as exc:
            if exc.status != 404:  # already gone: what a delete wanted
                raise


def _client_configuration(configuration: Any, concurrency: int) -> Any:
    """No client retries: the pass retries as a whole, with backoff (the task); urllib3's own
    silent retries would only stretch a page view's dry run against a cluster that drops
    connections. A connection pool at least ``concurrency`` large: a smaller one would open and
    discard a connection per write beyond it."""
    configuration.retries = False
    configuration.connection_pool_maxsize = max(
        concurrency, configuration.connection_pool_maxsize or 1
    )
    return configuration


def _loads(data: bytes | str) -> Any:
    """An answer's JSON, parsed by orjson (a no-op pass reads every owned object: 10% less
    time for it at 20,000 objects); what orjson refuses and ``json`` takes (NaN) goes to
    ``json``."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def _error(status: int | None, body: Any, path: str) -> ApplyError:
    message = ""
    try:
        data = json.loads(body) if body else {}
        message = data.get("message", "")
    except (TypeError, ValueError):
        message = body.decode() if isinstance(body, bytes) else str(body or "")
    message = message or f"HTTP {status}"
    if status is None or status in RETRYABLE_STATUSES:
        return RetryableError(f"{path}: {message}", status=status)
    return ApplyError(message, status=status)


# --- GitOps: a directory of YAML ------------------------------------------------------------


class ManifestsBackend:
    """Writes desired objects as YAML files: ``cluster.yaml`` for cluster-wide objects and
    ``tenants/<slug>.yaml`` per tenant, each sorted in apply order. What it reads back is what
    it wrote, so a no-op pass writes nothing."""

    def __init__(self, directory: str | Path) -> None:
        self.root = Path(directory)

    def close(self) -> None:
        """Nothing to release: files are opened and closed per write."""

    def merge_patch(
        self, kind: Kind, *, namespace: str | None, name: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        where = f"{namespace}/{name}" if namespace else name
        raise ApplyError(
            f"{kind.kind} {where}: a folder of manifests holds only what the portal writes, "
            "no live objects to patch"
        )

    def _file(self, obj: dict[str, Any]) -> Path:
        tenant = (obj.get("metadata", {}).get("labels") or {}).get(LABEL_TENANT)
        return self.root / "tenants" / f"{tenant}.yaml" if tenant else self.root / "cluster.yaml"

    def _read(self, path: Path) -> list[dict[str, Any]]:
        if not path.exists():
            return []
        return [d for d in yaml.safe_load_all(path.read_text()) if d]

    def _all(self) -> list[tuple[Path, dict[str, Any]]]:
        files = [self.root / "cluster.yaml", *sorted((self.root / "tenants").glob("*.yaml"))]
        return [(path, obj) for path in files for obj in self._read(path)]

    def list_owned(self, kind: Kind, selector: str) -> list[dict[str, Any]]:
        wanted = _parse_selector(selector)
        return [
            obj
            for _, obj in self._all()
            if (obj["apiVersion"], obj["kind"]) == (kind.api_version, kind.kind)
            and _matches(obj.get("metadata", {}).get("labels") or {}, wanted)
        ]

    def apply(
        self,
        obj: dict[str, Any],
        *,
        dry_run: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """The object written as it is: ``headers`` (who writes it) mean nothing to a file."""
        if not dry_run:
            path = self._file(obj)
            others = [o for o in self._read(path) if key_of(o) != key_of(obj)]
            self._write(path, [*others, obj])
        return obj

    def delete(self, kind: Kind, *, namespace: str | None, name: str) -> None:
        for path, obj in self._all():
            if key_of(obj) == (kind.api_version, kind.kind, namespace or "", name):
                self._write(path, [o for o in self._read(path) if key_of(o) != key_of(obj)])

    def _write(self, path: Path, objects: list[dict[str, Any]]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not objects:
            path.unlink(missing_ok=True)
            return
        text = yaml.safe_dump_all(sort_for_apply(objects), sort_keys=True, default_flow_style=False)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)


def write_manifests(directory: str | Path, objects: Sequence[dict[str, Any]]) -> list[Path]:
    """The whole desired state as files (``manage.py export_manifests``): stable order, one
    file per tenant, so a diff between two exports shows only what changed."""
    root = Path(directory)
    groups: dict[Path, list[dict[str, Any]]] = {}
    backend = ManifestsBackend(root)
    for obj in objects:
        groups.setdefault(backend._file(obj), []).append(obj)
    for path, group in groups.items():
        backend._write(path, group)
    return sorted(groups)


def _parse_selector(selector: str) -> list[tuple[str, str | None, bool]]:
    """``a=b,!c`` -> [(a, b, True), (c, None, False)] (only the forms the applier writes)."""
    out: list[tuple[str, str | None, bool]] = []
    for part in filter(None, selector.split(",")):
        if part.startswith("!"):
            out.append((part[1:], None, False))
        else:
            name, _, value = part.partition("=")
            out.append((name, value, True))
    return out


def _matches(labels: dict[str, str], wanted: list[tuple[str, str | None, bool]]) -> bool:
    for name, value, present in wanted:
        if not present and name in labels:
            return False
        if present and labels.get(name) != value:
            return False
    return True
