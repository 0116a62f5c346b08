"""The garbage collector, as the kube-controller-manager's runs it, a moment after writes:

- an object whose ``metadata.ownerReferences`` all name owners that do not exist (no object of
  that kind and name, in the dependent's namespace for a namespaced owner, or one with another
  uid) is deleted; references to missing owners are removed from an object that still has an
  existing owner;
- deleting an owner deletes its dependents (background propagation; ``Foreground`` is treated
  as background); ``propagationPolicy: Orphan`` (the default for batch/v1 Jobs, as upstream)
  removes the owner's references from the dependents instead (``DevCluster`` calls
  :meth:`GarbageCollector.orphan` before the owner goes);
- an owner reference to a kind the stand-in does not serve keeps the object (upstream cannot
  resolve it either and retries); a cluster-scoped dependent naming a namespaced owner gets a
  warning Event ``OwnerRefInvalidNamespace`` and is treated as having no such owner.

The checks run ``DELAY_S`` after the write that calls for them (writes in a burst share a
pass), on the server's event loop, as ``system:serviceaccount:kube-system:
generic-garbage-collector`` (admission policies see that user).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from devcluster.auth import UserInfo, service_account_groups
from devcluster.errors import ApiError
from devcluster.events import Events
from devcluster.resources import Registry, ResourceType
from devcluster.store import Store

if TYPE_CHECKING:
    from devcluster.objects import Objects

logger = logging.getLogger("devcluster")

DELAY_S = 0.05
GC_USER = UserInfo(
    "system:serviceaccount:kube-system:generic-garbage-collector",
    (*service_account_groups("kube-system"), "system:authenticated"),
)
COMPONENT = "garbage-collector-controller"

Key = tuple[str, str, str]  # (type key, namespace, name)


class GarbageCollector:
    def __init__(
        self,
        objects: Objects,
        registry: Registry,
        store: Store,
        events: Events,
        on_write: Callable[[], None] = lambda: None,
    ) -> None:
        self.objects = objects
        self.registry = registry
        self.store = store
        self.events = events
        self.on_write = on_write
        self._dependents: dict[str, set[Key]] = {}  # owner uid -> dependents naming it
        self._owners_of: dict[Key, tuple[str, ...]] = {}  # dependent -> owner uids it names
        self._pending: set[Key] = set()
        self._timer: asyncio.TimerHandle | None = None
        store.listeners.append(self._changed)
        self.rebuild()

    # The dependents index --------------------------------------------------------------------

    def rebuild(self) -> None:
        """Index every stored object with owner references and check them all (at start and
        after a reset)."""
        self._dependents.clear()
        self._owners_of.clear()
        for type_key in self.store.type_keys():
            for obj in self.store.list(type_key):
                self._index(type_key, obj, "ADDED")

    def _index(self, type_key: str, obj: dict[str, Any], event: str) -> Key:
        metadata = obj["metadata"]
        key = (type_key, metadata.get("namespace", ""), metadata["name"])
        for uid in self._owners_of.pop(key, ()):
            found = self._dependents.get(uid)
            if found is not None:
                found.discard(key)
                if not found:
                    del self._dependents[uid]
        references = metadata.get("ownerReferences") or ()
        if event != "DELETED" and references:
            uids = tuple(str(r.get("uid", "")) for r in references if isinstance(r, dict))
            self._owners_of[key] = uids
            for uid in uids:
                self._dependents.setdefault(uid, set()).add(key)
            self._pending.add(key)
        return key

    def _changed(self, type_key: str, event: str, obj: dict[str, Any]) -> None:
        self._index(type_key, obj, event)
        if event == "DELETED":
            self._pending.update(self._dependents.get(str(obj["metadata"].get("uid", "")), ()))
        if self._pending:
            self.kick()

    def kick(self) -> None:
        """Run a pass ``DELAY_S`` from now (if none is due), on the running event loop."""
        if self._timer is not None or not self._pending:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # not serving yet: the server kicks at start
        self._timer = loop.call_later(DELAY_S, self._run)

    # A pass ----------------------------------------------------------------------------------

    def _run(self) -> None:
        self._timer = None
        pending, self._pending = self._pending, set()
        admission = self.objects.admission
        user, warnings = admission.user, admission.warnings
        admission.user, admission.warnings = GC_USER, []
        wrote = False
        try:
            for key in sorted(pending):
                try:
                    wrote = self._attempt(key) or wrote
                except ApiError as error:
                    logger.warning("devcluster: garbage collector: %s: %s", key, error.message)
        finally:
            admission.user, admission.warnings = user, warnings
        if wrote:
            self.on_write()
        if self._pending:
            self.kick()

    def _owner_state(self, reference: dict[str, Any], dependent: dict[str, Any]) -> str:
        """``solid`` (the owner exists), ``dangling`` (it does not), ``unknown`` (a kind not
        served), or ``invalid`` (a namespaced owner of a cluster-scoped dependent)."""
        api_version = str(reference.get("apiVersion", ""))
        group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
        owner_type = self.registry.by_kind(group, str(reference.get("kind", "")))
        if owner_type is None or owner_type.create_only:
            return "unknown"
        namespace = dependent["metadata"].get("namespace", "")
        if owner_type.namespaced and not namespace:
            return "invalid"
        owner = self.store.get(
            owner_type.key, namespace if owner_type.namespaced else "", str(reference.get("name"))
        )
        if owner is None or owner["metadata"].get("uid") != reference.get("uid"):
            return "dangling"
        return "solid"

    def _attempt(self, key: Key) -> bool:
        type_key, namespace, name = key
        obj = self.store.get(type_key, namespace, name)
        references = [r for r in (obj or {}).get("metadata", {}).get("ownerReferences") or ()]
        if obj is None or not references:
            return False
        states = [self._owner_state(r, obj) for r in references]
        for reference, state in zip(references, states, strict=True):
            if state == "invalid":
                self.events.record(
                    obj,
                    "Warning",
                    "OwnerRefInvalidNamespace",
                    f'ownerRef {_describe(reference)} does not exist in namespace "{namespace}"',
                    component=COMPONENT,
                )
        kept = [r for r, s in zip(references, states, strict=True) if s in ("solid", "unknown")]
        if kept:
            if len(kept) == len(references):
                return False
            self._set_references(type_key, obj, kept)
            return True
        resource_type = self.registry.by_key(type_key)
        assert resource_type is not None
        self._delete(resource_type, obj)
        return True

    def _set_references(
        self, type_key: str, obj: dict[str, Any], references: list[dict[str, Any]]
    ) -> None:
        metadata = {**obj["metadata"], "resourceVersion": self.store.next_resource_version()}
        if references:
            metadata["ownerReferences"] = references
        else:
            metadata.pop("ownerReferences", None)
        self.store.put(type_key, {**obj, "metadata": metadata}, created=False)

    def _delete(self, resource_type: ResourceType, obj: dict[str, Any]) -> None:
        from devcluster.objects import Target

        metadata = obj["metadata"]
        target = Target(
            resource_type,
            resource_type.storage_version,
            metadata.get("namespace") or None,
            metadata["name"],
        )
        self.objects.delete(target, {"preconditions": {"uid": metadata["uid"]}}, dry_run=False)

    def orphan(self, owner: dict[str, Any]) -> None:
        """Propagation ``Orphan``: the owner's dependents lose their references to it."""
        uid = str(owner["metadata"].get("uid", ""))
        for type_key, namespace, name in sorted(self._dependents.get(uid, ())):
            dependent = self.store.get(type_key, namespace, name)
            if dependent is None:
                continue
            references = dependent["metadata"].get("ownerReferences") or []
            self._set_references(
                type_key, dependent, [r for r in references if r.get("uid") != uid]
            )


def _describe(reference: dict[str, Any]) -> str:
    """An owner reference as upstream's ``objectReference.String()`` (namespace empty: the
    dependent is cluster-scoped)."""
    return (
        f"[{reference.get('apiVersion', '')}/{reference.get('kind', '')}, namespace: , "
        f"name: {reference.get('name', '')}, uid: {reference.get('uid', '')}]"
    )
