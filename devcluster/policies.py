"""ValidatingAdmissionPolicy (``admissionregistration.k8s.io/v1``) as the API server runs it
(``staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating``), with the portal's CEL
engine (``quotas.kube.cel``, imported on first use).

A policy runs for a request when a binding names it and both match: ``matchConstraints`` of the
policy and ``matchResources`` of the binding (``resourceRules`` / ``excludeResourceRules`` with
operations, apiGroups, apiVersions, resources incl. ``*`` and ``x/*``, resourceNames, scope;
``namespaceSelector``; ``objectSelector`` on the object or the old object). Then every
``matchConditions`` must be true, ``variables`` are computed (``variables.<name>``) and each
``validations`` entry is evaluated with ``object``, ``oldObject``, ``request``,
``namespaceObject`` and ``variables``. A false validation is a denial for a binding with
``Deny`` (403/422/... from its ``reason``, default Invalid), a ``Warning`` header with ``Warn``,
nothing with ``Audit``. An expression that does not compile or fails follows the policy's
``failurePolicy`` (``Fail`` by default: the request is refused with the error).

Not supported: ``paramKind``/``paramRef`` (a policy with a ``paramKind`` is a configuration
error under its failure policy), ``auditAnnotations``, authorizer checks in CEL, type checking.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from devcluster.selectors import selector_matches

REASON_CODES = {"Unauthorized": 401, "Forbidden": 403, "Invalid": 422, "RequestEntityTooLarge": 413}
EXEMPT_GROUP = "admissionregistration.k8s.io"  # policies never apply to their own kinds

Evaluate = Callable[[str, Mapping[str, Any]], Any]


class ExpressionError(Exception):
    """An expression that did not compile or failed at run time, worded as the API server."""


@dataclass(frozen=True)
class Request:
    """One admission request as the policies see it."""

    operation: str  # CREATE, UPDATE, DELETE
    group: str
    version: str
    versions: tuple[str, ...]  # every version the kind is served at (matchPolicy Equivalent)
    kind: str
    resource: str
    subresource: str
    namespace: str
    name: str
    obj: dict[str, Any] | None
    old: dict[str, Any] | None
    namespace_object: dict[str, Any] | None
    username: str = "system:anonymous"
    groups: tuple[str, ...] = ("system:unauthenticated",)
    uid: str = ""
    extra: dict[str, list[str]] = field(default_factory=dict)
    dry_run: bool = False

    def user_info(self) -> dict[str, Any]:
        """``request.userInfo`` (authentication.k8s.io/v1 UserInfo: empty fields left out)."""
        info: dict[str, Any] = {"username": self.username}
        if self.uid:
            info["uid"] = self.uid
        info["groups"] = list(self.groups)
        if self.extra:
            info["extra"] = self.extra
        return info

    def cel_request(self) -> dict[str, Any]:
        kind = {"group": self.group, "version": self.version, "kind": self.kind}
        resource = {"group": self.group, "version": self.version, "resource": self.resource}
        return {
            "uid": str(uuid.uuid4()),
            "kind": kind,
            "resource": resource,
            "subResource": self.subresource,
            "requestKind": kind,
            "requestResource": resource,
            "name": self.name,
            "namespace": self.namespace,
            "operation": self.operation,
            "userInfo": self.user_info(),
            "dryRun": self.dry_run,
        }


@dataclass
class Outcome:
    denial: tuple[str, str] | None = None  # (message, reason) of the first denial
    warnings: list[str] = field(default_factory=list)


# Matching ---------------------------------------------------------------------------------------


def _any(values: Any, wanted: str) -> bool:
    listed = [str(v) for v in values or ()]
    return "*" in listed or wanted in listed


def _resource_matches(patterns: Any, resource: str, subresource: str) -> bool:
    for pattern in [str(p) for p in patterns or ()]:
        name, _, sub = pattern.partition("/")
        if pattern == "*/*":
            return True
        if not subresource and not sub and name in ("*", resource):
            return True
        if subresource and sub in ("*", subresource) and name in ("*", resource):
            return True
    return False


def _rule_matches(rule: Mapping[str, Any], request: Request, exact: bool) -> bool:
    versions = (request.version,) if exact else request.versions
    scope = rule.get("scope") or "*"
    # Namespaces are cluster-scoped; their requests carry no namespace here.
    if (scope == "Cluster" and request.namespace) or (
        scope == "Namespaced" and not request.namespace
    ):
        return False
    names = rule.get("resourceNames") or []
    return (
        _any(rule.get("operations"), request.operation)
        and _any(rule.get("apiGroups"), request.group)
        and any(_any(rule.get("apiVersions"), version) for version in versions)
        and _resource_matches(rule.get("resources"), request.resource, request.subresource)
        and (not names or request.name in names)
    )


def _labels(obj: Mapping[str, Any] | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


def _criteria_match(criteria: Mapping[str, Any], request: Request, *, rules_required: bool) -> bool:
    """``MatchResources``: selectors and resource rules."""
    if request.group == "" and request.kind == "Namespace":
        namespace_labels: dict[str, str] | None = _labels(request.obj or request.old)
    elif request.namespace:
        namespace_labels = _labels(request.namespace_object)
    else:
        namespace_labels = None  # other cluster-scoped kinds are not filtered by namespace
    if namespace_labels is not None and not selector_matches(
        criteria.get("namespaceSelector"), namespace_labels
    ):
        return False
    object_selector = criteria.get("objectSelector")
    if object_selector and not any(
        selector_matches(object_selector, _labels(candidate))
        for candidate in (request.obj, request.old)
        if candidate is not None
    ):
        return False
    exact = criteria.get("matchPolicy") == "Exact"
    rules = criteria.get("resourceRules")
    if rules is None and not rules_required:
        matched = True
    else:
        matched = any(_rule_matches(rule, request, exact) for rule in rules or [])
    excluded = any(
        _rule_matches(rule, request, exact) for rule in criteria.get("excludeResourceRules") or []
    )
    return matched and not excluded


# Evaluation -------------------------------------------------------------------------------------


def _run(evaluate: Evaluate, expression: str, variables: Mapping[str, Any]) -> Any:
    from quotas.kube.cel import CelError, compile_check  # the portal's engine, on first use

    try:
        compile_check(expression)
    except CelError as error:
        raise ExpressionError(f"compilation failed: {error.detail}") from None
    try:
        return evaluate(expression, variables)
    except CelError as error:
        raise ExpressionError(
            f"expression '{expression}' resulted in error: {error.detail}"
        ) from None


@dataclass(frozen=True)
class _Decision:
    """A failed validation (or an expression error under failurePolicy Fail)."""

    message: str
    reason: str = "Invalid"


def _aggregate(messages: list[str]) -> str:
    """``utilerrors.NewAggregate``'s text."""
    unique = list(dict.fromkeys(messages))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


def _validate(policy: Mapping[str, Any], request: Request, evaluate: Evaluate) -> list[_Decision]:
    """Decisions of one policy for one binding (matchConditions, variables, validations)."""
    spec = policy.get("spec") or {}
    fail = (spec.get("failurePolicy") or "Fail") == "Fail"
    activation: dict[str, Any] = {
        "object": request.obj,
        "oldObject": request.old,
        "request": request.cel_request(),
        "namespaceObject": request.namespace_object,
        "params": None,
    }
    errors = []
    for condition in spec.get("matchConditions") or []:
        try:
            if _run(evaluate, str(condition.get("expression", "")), activation) is False:
                return []
        except ExpressionError as error:
            errors.append(str(error))
    if errors:
        return [_Decision(_aggregate(errors))] if fail else []
    variables: dict[str, Any] = {}
    failed_variables: dict[str, str] = {}
    for variable in spec.get("variables") or []:
        name = str(variable.get("name", ""))
        try:
            variables[name] = _run(
                evaluate,
                str(variable.get("expression", "")),
                {**activation, "variables": variables},
            )
        except ExpressionError as error:
            failed_variables[name] = str(error)
    activation["variables"] = variables
    decisions = []
    for validation in spec.get("validations") or []:
        expression = str(validation.get("expression", ""))
        broken = next(
            (text for name, text in failed_variables.items() if f"variables.{name}" in expression),
            None,
        )
        try:
            if broken is not None:
                raise ExpressionError(broken)
            result = _run(evaluate, expression, activation)
        except ExpressionError as error:
            if fail:
                decisions.append(_Decision(str(error)))
            continue
        if result is True:
            continue
        message = _message(validation, expression, activation, evaluate)
        decisions.append(_Decision(message, str(validation.get("reason") or "Invalid")))
    return decisions


def _message(
    validation: Mapping[str, Any],
    expression: str,
    activation: Mapping[str, Any],
    evaluate: Evaluate,
) -> str:
    message_expression = validation.get("messageExpression")
    if message_expression:
        try:
            text = _run(evaluate, str(message_expression), activation)
        except ExpressionError:
            text = None
        if isinstance(text, str) and text.strip() and "\n" not in text.strip():
            return text.strip()
    if str(validation.get("message") or "").strip():
        return str(validation["message"]).strip()
    return f"failed expression: {expression.strip()}"


def admit(
    policies: list[dict[str, Any]],
    bindings: list[dict[str, Any]],
    request: Request,
    evaluate: Evaluate,
) -> Outcome:
    """Every bound policy that matches ``request``; the first denial and the warnings."""
    outcome = Outcome()
    if request.group == EXEMPT_GROUP:
        return outcome
    for policy in policies:
        name = policy["metadata"]["name"]
        spec = policy.get("spec") or {}
        if not _criteria_match(spec.get("matchConstraints") or {}, request, rules_required=True):
            continue
        bound = [b for b in bindings if (b.get("spec") or {}).get("policyName") == name]
        if bound and spec.get("paramKind"):
            # A configuration error (params are not supported here), under the failure policy.
            if (spec.get("failurePolicy") or "Fail") == "Fail" and outcome.denial is None:
                outcome.denial = (
                    f"ValidatingAdmissionPolicy '{name}' denied request: failed to configure "
                    "policy: paramKind is not supported by devcluster",
                    "Invalid",
                )
            continue
        for binding in bound:
            binding_spec = binding.get("spec") or {}
            if not _criteria_match(
                binding_spec.get("matchResources") or {}, request, rules_required=False
            ):
                continue
            actions = binding_spec.get("validationActions") or []
            label = (
                f"ValidatingAdmissionPolicy '{name}' with binding '{binding['metadata']['name']}'"
            )
            for decision in _validate(policy, request, evaluate):
                if "Deny" in actions and outcome.denial is None:
                    outcome.denial = (
                        f"{label} denied request: {decision.message}",
                        decision.reason,
                    )
                if "Warn" in actions:
                    outcome.warnings.append(f"Validation failed for {label}: {decision.message}")
    return outcome
