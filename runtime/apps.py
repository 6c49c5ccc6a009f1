from django.apps import AppConfig


class RuntimeConfig(AppConfig):
    name = "runtime"
    # Fields holding secret_encrypt() output, for `manage.py rotate_secrets`.
    encrypted_fields = {
        "Credential": ("secret_encrypted",),
        "ToolServer": ("signing_secret_encrypted",),
        "PushConfig": ("token", "auth_credentials"),
        "PushSettings": ("secret_encrypted", "previous_secret_encrypted"),
    }

    def ready(self) -> None:
        from connections.signals import app_connected
        from runtime.receivers import app_connected_received, tenant_changed_received
        from tenants.signals import tenant_changed

        app_connected.connect(app_connected_received, dispatch_uid="runtime-app-connected")
        tenant_changed.connect(tenant_changed_received, dispatch_uid="runtime-tenant-changed")
        observability_setup()

    def seed_demo(self, *, tenant, **options) -> dict:
        """The demo agents (runtime/agents/*.md), for tenants' seed_demo command."""
        from runtime.agents.demo import seed_demo_agents

        kept: list[str] = []
        return {"agents": seed_demo_agents(tenant=tenant, kept=kept), "agents_kept": kept}


def observability_setup() -> None:
    """Tracing (when configured), the Celery hooks that carry it and retire a dead process's
    metrics, and the scrape-time collectors of open interactions (config.metrics)."""
    from config import metrics, tracing
    from runtime.decisions.decision_metrics import open_interactions_collect

    tracing.tracing_setup()
    tracing.celery_hooks_connect()
    metrics.celery_hooks_connect()
    metrics.collector_register("interactions_open", open_interactions_collect)
