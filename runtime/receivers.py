"""The runtime's receivers of other apps' signals (connected in RuntimeConfig.ready)."""

from runtime.decisions.flow import interactions_connect_app
from runtime.kernel.audit import audit_record


def app_connected_received(sender, *, tenant, app: str, by: str, **kwargs) -> None:
    """A tenant connected an app: answer its open connection interactions; tasks resume."""
    interactions_connect_app(tenant=tenant, app=app, by=by)


def tenant_changed_received(sender, *, tenant, actor: str, action: str, detail, **kwargs) -> None:
    """A member invited, re-roled or removed, a tenant deactivated, an app connected or
    disconnected: written to the tenant's audit log in the transaction of the change
    (tenants.signals), ``via`` as the sender says (else admin, or shell)."""
    via = kwargs.get("via") or ("shell" if actor.startswith("shell") else "admin")
    audit_record(tenant_id=tenant.pk, actor=actor, action=action, via=via, detail=detail)
