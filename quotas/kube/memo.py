"""What a full pass remembers of the last one, so that a pass where nothing changed does not
compile, validate and compare 200,000 objects again (issue 36: a no-op reconcile at 10,000
tenants). Pure Python, no Django, no module state: the caller (``quotas.sync``) owns one of
each per process and per cluster, and the compiler stays data in, dicts out.

Every memo is keyed by content, never by a counter that could miss a change:

* ``CompileMemo``: a tenant's compiled objects, keyed by the exact text (``repr``) of its
  ``TenantSpec`` and of the ``ClusterSpec`` (everything ``compiler.compile_tenant`` reads).
  It keeps each object's canonical JSON and hands out fresh dicts decoded from it, so no pass
  can change what the next one is given.
* ``ValidationMemo``: the digests of objects that passed validation, keyed also by what
  validation reads besides the object (the Kubernetes schema version, the CRD files' content
  and the rules' version: ``quotas.kube.validate.rules_fingerprint``). A bounded LRU.
* ``ApplyMemo``: for a live object that was found to hold what is desired, its uid and
  resourceVersion and the desired object's digest. The next pass skips the field-by-field
  compare only when all three are the same: a hand edit in the cluster changes the
  resourceVersion, a change in the portal the digest. Rebuilt each pass (bounded by the
  cluster's objects).

A digest is the BLAKE2b (16 bytes) of the object's canonical JSON (``orjson``, keys sorted).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import orjson

KubeObject = dict[str, Any]
Key = tuple[str, str, str, str]
Digest = bytes

# Validation digests kept (about 100 bytes each): twice the objects of 10,000 tenants.
VALIDATION_MEMO_SIZE = 500_000
# Compiled bytes kept per cluster; past it, further tenants are compiled each pass.
COMPILE_MEMO_BYTES = 512 * 1024 * 1024


def canonical_json(obj: Any) -> bytes:
    """The object as JSON with sorted keys: equal content, equal bytes. Raises TypeError for
    what is not JSON (a compiled object never holds such a value)."""
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


def digest_of(data: bytes) -> Digest:
    return hashlib.blake2b(data, digest_size=16).digest()


def object_digest(obj: Any) -> Digest:
    """The digest of ``obj``'s canonical JSON; of its ``repr`` when it is not JSON (such an
    object is refused by validation anyway, and never equal to a live one)."""
    try:
        return digest_of(canonical_json(obj))
    except TypeError:
        return digest_of(b"repr:" + repr(obj).encode())


class Digests:
    """The digests of one pass's desired objects, by identity: given where they are known (the
    compile memo decoded the object from the bytes they are the digest of), computed once
    otherwise. Holds the objects, so an id is not reused within the pass."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[KubeObject, Digest]] = {}

    def note(self, obj: KubeObject, digest: Digest) -> None:
        self._by_id[id(obj)] = (obj, digest)

    def __call__(self, obj: KubeObject) -> Digest:
        known = self._by_id.get(id(obj))
        if known is not None and known[0] is obj:
            return known[1]
        digest = object_digest(obj)
        self._by_id[id(obj)] = (obj, digest)
        return digest


class CompileMemo:
    """One cluster's tenants' compiled objects as canonical JSON, from the last pass."""

    def __init__(self, max_bytes: int = COMPILE_MEMO_BYTES) -> None:
        self.max_bytes = max_bytes
        self._cluster = ""
        self._entries: dict[str, list[tuple[bytes, Digest]]] = {}
        self.hits = self.misses = 0

    def begin(self, cluster: Any) -> None:
        """A pass for ``cluster`` (a ``ClusterSpec``) starts: what was compiled for another
        cluster spec is forgotten."""
        key = repr(cluster)
        if key != self._cluster:
            self._cluster, self._entries = key, {}
        self._next: dict[str, list[tuple[bytes, Digest]]] = {}
        self._size = 0
        self.hits = self.misses = 0

    def end(self) -> None:
        """The pass is over: keep only the tenants it compiled (a removed tenant goes)."""
        self._entries, self._next = self._next, {}

    def tenant_objects(
        self,
        compile_tenant: Callable[[Any, Any], list[KubeObject]],
        cluster: Any,
        tenant: Any,
        digests: Digests,
    ) -> list[KubeObject]:
        """``compile_tenant(cluster, tenant)``, from the memo when the tenant's spec is the
        same text as last pass: fresh dicts either way, their digests noted in ``digests``."""
        key = repr(tenant)
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            compiled = compile_tenant(cluster, tenant)
            try:
                entry = [(data, digest_of(data)) for data in map(canonical_json, compiled)]
            except TypeError:
                return compiled  # not JSON: not remembered (validation will refuse it)
        else:
            self.hits += 1
        size = sum(len(data) for data, _ in entry)
        if self._size + size <= self.max_bytes:
            self._next[key] = entry
            self._size += size
        out = []
        for data, digest in entry:
            obj = orjson.loads(data)
            digests.note(obj, digest)
            out.append(obj)
        return out


class ValidationMemo:
    """Digests of objects that passed validation in a given context (schema version, CRDs,
    rules): such an object passes again. Only passes are remembered; an LRU of ``size``."""

    def __init__(self, size: int = VALIDATION_MEMO_SIZE) -> None:
        self.size = size
        self._passed: OrderedDict[tuple[str, Digest], None] = OrderedDict()
        self.hits = 0

    def __len__(self) -> int:
        return len(self._passed)

    def clear(self) -> None:
        self._passed.clear()

    def passed(self, context: str, digest: Digest) -> bool:
        key = (context, digest)
        if key in self._passed:
            self._passed.move_to_end(key)
            self.hits += 1
            return True
        return False

    def remember(self, context: str, digest: Digest) -> None:
        self._passed[(context, digest)] = None
        self._passed.move_to_end((context, digest))
        while len(self._passed) > self.size:
            self._passed.popitem(last=False)


class ApplyMemo:
    """Live objects of one cluster found to hold what was desired: key -> (uid,
    resourceVersion, desired digest). ``begin`` / ``end`` a pass; only what the pass saw
    unchanged is kept."""

    def __init__(self) -> None:
        self._last: dict[Key, tuple[str, str, Digest]] = {}
        self._next: dict[Key, tuple[str, str, Digest]] = {}
        self.hits = 0

    @staticmethod
    def _stamp(live: KubeObject) -> tuple[str, str] | None:
        metadata = live.get("metadata") or {}
        uid, version = metadata.get("uid"), metadata.get("resourceVersion")
        if not uid or not version:
            return None  # a backend without versions (a folder of YAML): always compare
        return str(uid), str(version)

    def begin(self) -> None:
        self._next = {}
        self.hits = 0

    def end(self) -> None:
        self._last, self._next = self._next, {}

    def unchanged(self, key: Key, live: KubeObject, digest: Digest) -> bool:
        """Whether ``live`` is the very version found to hold ``digest``'s object last pass."""
        stamp = self._stamp(live)
        remembered = self._last.get(key)
        if stamp is None or remembered != (*stamp, digest):
            return False
        self._next[key] = remembered
        self.hits += 1
        return True

    def remember(self, key: Key, live: KubeObject, digest: Digest) -> None:
        stamp = self._stamp(live)
        if stamp is not None:
            self._next[key] = (*stamp, digest)
