from django.apps import AppConfig


class RuntimeConfig(AppConfig):
    name = "runtime"
    # Fields holding secret_encrypt() output, for `manage.py rotate_secrets`.
    encrypted_fields = {
        "Credential": ("secret_encrypted",),
        "ToolServer": ("signing_secret_encrypted",),
        "PushConfig": ("token", "auth_credentials"),
        "PushSettings": ("secret_encrypted", "previous_secret_encrypted"),
        "SigningKey": ("private_encrypted",),
    }

    def ready(self) -> None:
        from django.db.backends.signals import connection_created
        from django.db.models.signals import post_save

        from config.celery import app as celery_app
        from config.json_params import json_params_fast
        from connections.signals import app_connected
        from runtime.agents.agent_models import Agent
        from runtime.agents.policy_history import agent_created_received
        from runtime.decisions.call_summaries import summary_requested
        from runtime.decisions.decision_models import Interaction
        from runtime.kernel.signals import interaction_opened
        from runtime.receivers import app_connected_received, tenant_changed_received
        from runtime.turn.consumer import TurnConsumer
        from tenants.signals import tenant_changed

        app_connected.connect(app_connected_received, dispatch_uid="runtime-app-connected")
        tenant_changed.connect(tenant_changed_received, dispatch_uid="runtime-tenant-changed")
        post_save.connect(agent_created_received, sender=Agent, dispatch_uid="runtime-policy-kept")
        interaction_opened.connect(
            summary_requested, sender=Interaction, dispatch_uid="runtime-call-summary"
        )
        connection_created.connect(json_params_fast, dispatch_uid="config-json-params")
        # A worker pops the turns of its queue (runtime.turn.consumer); a web process ignores it.
        celery_app.steps["worker"].add(TurnConsumer)
        observability_setup()

    def signing_key_rotate(self) -> str:
        """A new receipt signing key, for `manage.py rotate_secrets --signing-key`: its kid."""
        from runtime.decisions.signing import signing_key_rotate

        return signing_key_rotate().kid

    def seed_demo(self, *, tenant, **options) -> dict:
        """The demo agents (runtime/agents/*.md), for tenants' seed_demo command; ``gateways``:
        those of them that are MCP gateways."""
        from runtime.agents.agent_selectors import gateways_for_tenant
        from runtime.agents.demo import seed_demo_agents

        kept: list[str] = []
        slugs = seed_demo_agents(tenant=tenant, kept=kept)
        gateways = [g.slug for g in gateways_for_tenant(tenant=tenant) if g.slug in slugs]
        return {"agents": slugs, "gateways": gateways, "agents_kept": kept}


def observability_setup() -> None:
    """Tracing (when configured), the Celery hooks that carry it and retire a dead process's
    metrics, and the scrape-time collectors of open interactions (config.metrics)."""
    from config import metrics, tracing
    from runtime.decisions.decision_metrics import open_interactions_collect

    tracing.tracing_setup()
    tracing.celery_hooks_connect()
    metrics.celery_hooks_connect()
    metrics.collector_register("interactions_open", open_interactions_collect)
