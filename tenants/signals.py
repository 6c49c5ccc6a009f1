"""Signals tenants sends, so that the audit log (runtime, a layer above) records changes to a
tenant's people and to the tenant itself without tenants importing it."""

from django.dispatch import Signal

# Sent inside the transaction of the change (kwargs: tenant, actor, action, detail, and
# optionally via): a member invited, re-roled or removed, a tenant deactivated or
# reactivated, an app connected or disconnected (connections). ``actor`` is a subject
# (user:<email>, shell:<login>, system:...); ``action`` is the audit's word (member.removed,
# connection.connected, ...).
tenant_changed = Signal()
