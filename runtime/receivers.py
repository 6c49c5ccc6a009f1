"""The runtime's receivers of other apps' signals (connected in RuntimeConfig.ready)."""

from runtime.agents.agent_models import PolicyVersion
from runtime.decisions.flow import interactions_connect_app
from runtime.decisions.receipts import policy_version
from runtime.kernel.audit import audit_record


def app_connected_received(sender, *, tenant, app: str, by: str, **kwargs) -> None:
    """A tenant connected an app: answer its open connection interactions; tasks resume."""
    interactions_connect_app(tenant=tenant, app=app, by=by)


def tenant_changed_received(sender, *, tenant, actor: str, action: str, detail, **kwargs) -> None:
    """A member invited, re-roled or removed, a tenant deactivated: written to the tenant's
    audit log in the transaction of the change (tenants.signals)."""
    via = "shell" if actor.startswith("shell") else "admin"
    audit_record(tenant_id=tenant.pk, actor=actor, action=action, via=via, detail=detail)


def agent_saved_received(sender, *, instance, update_fields=None, raw=False, **kwargs) -> None:
    """An agent saved (AGENT.md loaded, admin, the policy table): its tool policy recorded as
    a version when it differs from the last one kept (runtime.agents.agent_models.PolicyVersion),
    in the transaction of the save."""
    if raw or (update_fields is not None and "tool_policy" not in update_fields):
        return
    version = policy_version(instance)
    last = (
        PolicyVersion.objects.filter(tenant_id=instance.tenant_id, agent=instance)
        .order_by("-recorded_at", "-id")
        .values_list("version", flat=True)
        .first()
    )
    if last != version:
        PolicyVersion.objects.create(
            tenant_id=instance.tenant_id,
            agent=instance,
            version=version,
            policy=instance.tool_policy or {},
        )
