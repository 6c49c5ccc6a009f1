"""Signals tenants sends, so that the audit log (runtime, a layer above) records changes to a
tenant's people and to the tenant itself without tenants importing it."""

from django.dispatch import Signal

# Sent inside the transaction of the change (kwargs: tenant, actor, action, detail): a member
# invited, re-roled or removed, a tenant deactivated or reactivated. ``actor`` is a subject
# (user:<email>, shell:<login>); ``action`` is the audit's word (member.removed, ...).
tenant_changed = Signal()
