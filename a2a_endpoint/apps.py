from django.apps import AppConfig


class A2aEndpointConfig(AppConfig):
    name = "a2a_endpoint"
    # Fields holding secret_encrypt() output, for `manage.py rotate_secrets`.
    encrypted_fields = {"PushConfig": ("token", "auth_credentials")}

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from a2a_endpoint.identity import agent_cache
        from a2a_endpoint.observe import push_deliveries_collect
        from a2a_endpoint.push_delivery import ACTIVE_CONFIGS, queue_deliveries
        from config import metrics
        from runtime.agents.agent_models import Agent
        from runtime.kernel.signals import task_event_written
        from runtime.kernel.task_models import TaskEvent
        from runtime.kernel.task_state import locked_fact_register
        from tenants.models import Tenant

        task_event_written.connect(queue_deliveries, sender=TaskEvent, dispatch_uid="push-queue")
        locked_fact_register(ACTIVE_CONFIGS)
        metrics.collector_register("push_deliveries", push_deliveries_collect)
        # A saved or deleted agent or tenant is felt by this process's next request
        # (a2a_endpoint.identity; other processes within LOOKUP_CACHE_SECONDS).
        for model in (Agent, Tenant):
            for signal in (post_save, post_delete):
                signal.connect(
                    agent_cache.invalidate,
                    sender=model,
                    weak=False,
                    dispatch_uid=f"agent-cache-{model.__name__}-{signal is post_save}",
                )

    def seed_demo(self, *, tenant, **options) -> dict:
        """Push to any public host, and to localhost (the conformance kit's webhook); loopback
        is still refused unless PUSH_ALLOW_PRIVATE_HOSTS is on."""
        from a2a_endpoint.selectors import push_settings_for

        found = push_settings_for(tenant=tenant)
        found.allowed_hosts = "*"
        found.save(update_fields=["allowed_hosts"])
        return {}
