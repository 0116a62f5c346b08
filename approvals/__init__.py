"""approvals: change. Quota change requests, their items and decisions, the approval policy,
onboarding (an auto-approved request), and the request pages and API.

Above quotas: an approval writes the quota set and the outbox row through
``quotas.services``; the push is the quotas app's, and requests follow it (approved ->
applying -> applied / failed) through the hooks ``quotas.sync`` offers, registered in
``apps.py``. Offers ``panels.REQUEST_PANELS`` to the apps above (advice's what-if).
"""
