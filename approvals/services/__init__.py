"""Change: quota change requests and their approval (DESIGN flow 2), and onboarding (flow 1),
by concern:

* ``rules``: the rules a change keeps, as ordered lists of small named checks, each about
  the input whose field its errors name;
* ``checks``: the one validation of a change (``quota_request_check``, running the rules),
  what it would do to the quotas in force (``DiffLine``) and how many approvals it needs;
* ``policy``: the approval policy (two approvers above a size, expiry of pending requests);
* ``transitions``: who may file and decide, and each move of a request's status;
* ``filing``: a request filed, checked live, submitted, cancelled;
* ``deciding``: a request rejected, approved and applied, expired; the system's own grants;
* ``granting``: grants for a time (a request with a window): their check, their approval,
  the beat that starts and ends them, a lead's ask to extend one;
* ``onboarding``: a tenant with its leads and its tier's quotas;
* ``push``: where the push stands (hooks of ``quotas.sync``), a retry, a dry run.

Quotas change at a user's request only here. Every transition is a conditional update or
happens under a row lock; approval writes the decision, the new quota set (next generation),
the audit rows and the outbox row in one transaction, and the quotas app pushes it after
commit. Where the push stands comes back through ``quotas.sync``'s hooks
(``quota_requests_push_started``, ``quota_requests_pushed``): a request is applied once the
cluster has observed its approved generation, failed when the cluster refused it for good.

The names below are the app's service interface: import them from ``approvals.services``."""

from approvals.services.checks import (
    DiffLine,
    RequestCheck,
    diff_line,
    grant_request_check,
    grant_window_errors,
    quota_request_approved_diff,
    quota_request_check,
    quota_request_check_shown,
    quota_request_check_stored,
    quota_request_items,
    quota_request_tenant_changes,
)
from approvals.services.deciding import (
    quota_request_approve,
    quota_request_grant,
    quota_request_reject,
    quota_requests_expire,
)
from approvals.services.filing import (
    REASON_REQUIRED,
    Filed,
    quota_request_cancel,
    quota_request_create,
    quota_request_file,
    quota_request_submit,
    quota_request_validate,
    request_changes,
    request_items_parse,
)
from approvals.services.granting import (
    grant_extend,
    grant_get_for_user,
    grant_list_for_user,
    grants_tick,
)
from approvals.services.onboarding import (
    tenant_onboard,
)
from approvals.services.policy import (
    POLICY_FIELDS,
    approval_policy,
    approval_policy_update,
)
from approvals.services.push import (
    quota_request_dry_run,
    quota_request_retry,
    quota_requests_push_started,
    quota_requests_pushed,
)
from approvals.services.rules import (
    MAX_RUN_TIME_HOURS_MAX,
    SCHEDULING_FIELDS,
    TENANT_FIELDS,
    flavor_isolation_broken,
    pod_bandwidth_problem,
)
from approvals.services.transitions import (
    DECISION_NOTICES,
    quota_request_ensure_can_file,
)

__all__ = [
    "DECISION_NOTICES",
    "MAX_RUN_TIME_HOURS_MAX",
    "POLICY_FIELDS",
    "REASON_REQUIRED",
    "SCHEDULING_FIELDS",
    "TENANT_FIELDS",
    "DiffLine",
    "Filed",
    "RequestCheck",
    "approval_policy",
    "approval_policy_update",
    "diff_line",
    "flavor_isolation_broken",
    "grant_extend",
    "grant_get_for_user",
    "grant_list_for_user",
    "grant_request_check",
    "grant_window_errors",
    "grants_tick",
    "pod_bandwidth_problem",
    "quota_request_approve",
    "quota_request_approved_diff",
    "quota_request_cancel",
    "quota_request_check",
    "quota_request_check_shown",
    "quota_request_check_stored",
    "quota_request_create",
    "quota_request_dry_run",
    "quota_request_ensure_can_file",
    "quota_request_file",
    "quota_request_grant",
    "quota_request_items",
    "quota_request_reject",
    "quota_request_retry",
    "quota_request_submit",
    "quota_request_tenant_changes",
    "quota_request_validate",
    "quota_requests_expire",
    "quota_requests_push_started",
    "quota_requests_pushed",
    "request_changes",
    "request_items_parse",
    "tenant_onboard",
]
