"""The admission chain of the stand-in, in the API server's order: mutating (LimitRanger
defaults) before the object's validation, then validating (admission policies, ResourceQuota).

The server handles one request at a time on one event loop and a write runs from admission to
store without awaiting anything, so a quota check and the store update it allows are atomic:
two concurrent creates cannot both slip under a limit.

It also plays the quota controller: every ResourceQuota's ``status`` (``hard`` and ``used``)
is kept current as the objects of its namespace are created, changed and deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from devcluster import kueue_jobs, limitranger, policies, quota
from devcluster.auth import INSECURE_ANONYMOUS, UserInfo
from devcluster.errors import ApiError, forbidden, qualified
from devcluster.resources import Registry, ResourceType
from devcluster.store import Store

logger = logging.getLogger("devcluster")

QUOTAS = "resourcequotas"
POLICIES = "validatingadmissionpolicies.admissionregistration.k8s.io"
BINDINGS = "validatingadmissionpolicybindings.admissionregistration.k8s.io"
LIMIT_RANGES = "limitranges"
RBAC = "rbac.authorization.k8s.io"
PRIORITY_CLASSES = "priorityclasses.scheduling.k8s.io"
PODS = "pods"
JOBS = "jobs.batch"
# Who submitted a job: Kubernetes records no creator, so the portal's MutatingAdmissionPolicy
# (docs/use/workloads.md) stamps the requesting user on a Job's pod template, which Kueue copies
# into the Workload. The stand-in runs validating policies only; this plays that one.
ANNOTATION_SUBMITTER = "portal.gpu-quota.io/submitter"
# The policy's namespaceSelector: the label the portal puts on each tenant namespace.
LABEL_TENANT = "portal.gpu-quota.io/tenant"


def stamp_submitter(job: dict[str, Any], username: str) -> None:
    """Set the submitter annotation of a Job's pod template to ``username`` (whatever the
    creator wrote there: nobody names someone else)."""
    template = job.setdefault("spec", {}).setdefault("template", {})
    metadata = template.setdefault("metadata", {})
    annotations = metadata.get("annotations") or {}
    metadata["annotations"] = {**annotations, ANNOTATION_SUBMITTER: username}


@dataclass(frozen=True)
class Attributes:
    """What admission plugins see of one write."""

    operation: str  # CREATE, UPDATE or DELETE
    resource_type: ResourceType
    version: str
    namespace: str  # "" for cluster-scoped kinds
    name: str
    subresource: str
    obj: dict[str, Any] | None  # None on DELETE
    old: dict[str, Any] | None  # None on CREATE
    dry_run: bool = False


class Admission:
    """Mutating and validating admission over one store."""

    def __init__(
        self,
        registry: Registry,
        store: Store,
        *,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.registry = registry
        self.store = store
        self.now = now
        # Of the request being served (one at a time): its user, and Warning headers to send.
        self.user: UserInfo = INSECURE_ANONYMOUS
        # RBAC's escalation checks on role and binding writes (set by the server).
        self.rbac_check: Callable[[UserInfo, Attributes], None] | None = None
        self.warnings: list[str] = []
        self._cel_missing = False
        self._evaluators: dict[str, quota.Evaluator] = {}
        self._writing_status = False
        store.listeners.append(self._changed)

    # The chain -------------------------------------------------------------------------------

    def mutate(self, attributes: Attributes) -> None:
        """RBAC's storage checks (roles and bindings); pod defaulting, the LimitRanger and
        Priority on pod creation (a pod's spec is immutable)."""
        obj, resource_type = attributes.obj, attributes.resource_type
        if obj is not None and resource_type.group == RBAC and self.rbac_check is not None:
            self.rbac_check(self.user, attributes)  # RBAC's storage checks, before admission
        if (
            obj is not None
            and resource_type.key == JOBS
            and attributes.operation == "CREATE"
            and self._tenant_namespace(attributes.namespace)
        ):
            stamp_submitter(obj, self.user.name)
        if (
            obj is not None
            and attributes.operation == "CREATE"
            and not attributes.subresource
            and self._tenant_namespace(attributes.namespace)
        ):
            # Kueue's webhooks: a managed job is created suspended, a managed pod gated.
            kueue_jobs.hold_on_create(resource_type.key, obj)
        if obj is None or resource_type.key != PODS or attributes.subresource:
            return
        limitranger.default_pod(obj)
        if attributes.operation != "CREATE":
            return
        refusal = limitranger.limit_pod(obj, self.store.list(LIMIT_RANGES, attributes.namespace))
        if refusal:
            raise forbidden(resource_type.plural, resource_type.group, attributes.name, refusal)
        priority_refusal = self._priority(obj)
        if priority_refusal:
            raise forbidden(
                resource_type.plural, resource_type.group, attributes.name, priority_refusal
            )

    def _tenant_namespace(self, namespace: str) -> bool:
        """A namespace the portal made for a tenant (its tenant label): where the submitter
        policy's namespaceSelector matches."""
        found = self.store.get("namespaces", "", namespace) if namespace else None
        labels = ((found or {}).get("metadata") or {}).get("labels") or {}
        return LABEL_TENANT in labels

    def _priority(self, pod: dict[str, Any]) -> str | None:
        """The Priority admission plugin on pod creation: ``spec.priority`` (and
        ``preemptionPolicy``) from the PriorityClass named, else from the class with
        ``globalDefault: true`` (the lowest if several; its name is then set), else 0. Returns
        the reason of a refusal."""
        spec = pod.setdefault("spec", {})
        class_name = spec.get("priorityClassName") or ""
        if class_name:
            found = self.store.get(PRIORITY_CLASSES, "", class_name)
            if found is None:
                return f"no PriorityClass with name {class_name} was found"
        else:
            defaults = [c for c in self.store.list(PRIORITY_CLASSES) if c.get("globalDefault")]
            found = min(defaults, key=lambda c: int(c.get("value") or 0), default=None)
            if found is not None:
                spec["priorityClassName"] = found["metadata"]["name"]
        if found is not None:
            priority = int(found.get("value") or 0)
            policy = found.get("preemptionPolicy") or "PreemptLowerPriority"
        else:
            priority, policy = 0, "PreemptLowerPriority"
        asked = spec.get("priority")
        if asked is not None and asked != priority:
            return (
                f"the integer value of priority ({asked}) must not be provided in pod spec; "
                f"priority admission controller computed {priority} from the given "
                "PriorityClass name"
            )
        spec["priority"] = priority
        asked_policy = spec.get("preemptionPolicy")
        if asked_policy is not None and asked_policy != policy:
            return (
                f"the string value of PreemptionPolicy ({asked_policy}) must not be provided in "
                f"pod spec; priority admission controller computed {policy} from the given "
                "PriorityClass name"
            )
        spec["preemptionPolicy"] = policy
        return None

    def validate(self, attributes: Attributes) -> None:
        """Validating admission: ValidatingAdmissionPolicy, then ResourceQuota."""
        self._check_policies(attributes)
        self._check_quota(attributes)

    # ValidatingAdmissionPolicy ---------------------------------------------------------------

    def _evaluate(self, expression: str, variables: Mapping[str, Any]) -> Any:
        from quotas.kube.cel import evaluate  # the portal's CEL engine (no Django)

        return evaluate(expression, variables)

    def _check_policies(self, attributes: Attributes) -> None:
        bound = self.store.list(BINDINGS)
        if not bound or self._cel_missing:
            return
        resource_type = attributes.resource_type
        namespace_object = (
            self.store.get("namespaces", "", attributes.namespace) if attributes.namespace else None
        )
        request = policies.Request(
            operation=attributes.operation,
            group=resource_type.group,
            version=attributes.version,
            versions=resource_type.versions,
            kind=resource_type.kind,
            resource=resource_type.plural,
            subresource=attributes.subresource,
            namespace=attributes.namespace,
            name=attributes.name,
            obj=attributes.obj,
            old=attributes.old,
            namespace_object=namespace_object,
            username=self.user.name,
            groups=self.user.groups,
            uid=self.user.uid,
            extra={key: list(values) for key, values in self.user.extra},
            dry_run=attributes.dry_run,
        )
        try:
            outcome = policies.admit(self.store.list(POLICIES), bound, request, self._evaluate)
        except ModuleNotFoundError as error:
            if error.name not in ("quotas", "quotas.kube", "quotas.kube.cel"):
                raise
            logger.warning("devcluster: %s; admission policies are NOT evaluated", error)
            self._cel_missing = True
            return
        self.warnings.extend(outcome.warnings)
        if outcome.denial is None:
            return
        message, reason = outcome.denial
        name = attributes.name
        details: dict[str, Any] = {
            "name": name,
            "kind": resource_type.plural,
            "causes": [{"message": message}],
        }
        if resource_type.group:
            details["group"] = resource_type.group
        target = qualified(resource_type.plural, resource_type.group)
        raise ApiError(
            policies.REASON_CODES.get(reason, 422),
            f'{target} "{name}" is forbidden: {message}',
            reason=reason,
            details=details,
        )

    # ResourceQuota ---------------------------------------------------------------------------

    def evaluator(self, resource_type: ResourceType) -> quota.Evaluator:
        found = self._evaluators.get(resource_type.key)
        if found is None:
            found = quota.evaluator_for(resource_type.plural, resource_type.group, self.now)
            self._evaluators[resource_type.key] = found
        return found

    def _kinds(self, namespace: str) -> quota.Kinds:
        def lister(key: str) -> Callable[[], list[dict[str, Any]]]:
            return lambda: self.store.list(key, namespace)

        return [
            (self.evaluator(t), lister(t.key))
            for t in self.registry.types
            if t.namespaced and not t.read_only and not t.create_only
        ]

    def _used(self, namespace: str) -> list[tuple[dict[str, Any], quota.ResourceList]]:
        kinds = self._kinds(namespace)
        return [(q, quota.used(q, kinds)) for q in self.store.list(QUOTAS, namespace)]

    def quota_status(self, resource_quota: dict[str, Any]) -> dict[str, Any]:
        """``status`` of a ResourceQuota being written: ``hard`` from the spec, ``used`` from
        what its namespace holds now."""
        namespace = (resource_quota.get("metadata") or {}).get("namespace", "")
        used = quota.used(resource_quota, self._kinds(namespace))
        return quota.quota_status(resource_quota, used)

    def _check_quota(self, attributes: Attributes) -> None:
        obj, resource_type = attributes.obj, attributes.resource_type
        if obj is None or attributes.subresource or not resource_type.namespaced:
            return
        if not self.store.list(QUOTAS, attributes.namespace):
            return
        try:
            quota.check(
                self.evaluator(resource_type),
                attributes.operation,
                obj,
                attributes.old,
                self._used(attributes.namespace),
            )
        except quota.QuotaRefused as refusal:
            raise forbidden(
                resource_type.plural, resource_type.group, attributes.name, str(refusal)
            ) from None

    def _changed(self, type_key: str, event: str, obj: dict[str, Any]) -> None:
        """The quota controller: after any change in a namespace with quotas, write the
        ``status`` of those whose usage moved."""
        if self._writing_status:
            return
        namespace = (obj.get("metadata") or {}).get("namespace")
        if not namespace:
            return
        quotas = self.store.list(QUOTAS, namespace)
        resource_type = self.registry.by_key(type_key)
        if not quotas or resource_type is None:
            return
        if type_key != QUOTAS:
            evaluator = self.evaluator(resource_type)
            if not any(evaluator.matching(quota.hard_of(q)) for q in quotas):
                return
        kinds = self._kinds(namespace)
        for current in quotas:
            status = quota.quota_status(current, quota.used(current, kinds))
            if status == current.get("status"):
                continue
            updated = {**current, "status": status}
            updated["metadata"] = {
                **current["metadata"],
                "resourceVersion": self.store.next_resource_version(),
            }
            self._writing_status = True
            try:
                self.store.put(QUOTAS, updated, created=False)
            finally:
                self._writing_status = False
