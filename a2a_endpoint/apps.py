from django.apps import AppConfig


class A2aEndpointConfig(AppConfig):
    name = "a2a_endpoint"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from a2a_endpoint.identity import agent_cache
        from a2a_endpoint.observe import push_deliveries_collect
        from a2a_endpoint.push_bodies import push_body
        from config import metrics
        from runtime.agents.agent_models import Agent
        from runtime.kernel.push.push_delivery import push_body_writer_set
        from tenants.models import Tenant

        # The core delivers push bodies that the wire writes (runtime.kernel.push.push_delivery).
        push_body_writer_set(push_body)
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
        from runtime.kernel.push.push_selectors import push_settings_for

        found = push_settings_for(tenant=tenant)
        found.allowed_hosts = "*"
        found.save(update_fields=["allowed_hosts"])
        return {}
