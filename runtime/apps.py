from django.apps import AppConfig


class RuntimeConfig(AppConfig):
    name = "runtime"
    # Fields holding secret_encrypt() output, for `manage.py rotate_secrets`.
    encrypted_fields = {"Credential": ("secret_encrypted",)}

    def ready(self) -> None:
        from connections.signals import app_connected
        from runtime.receivers import app_connected_received

        app_connected.connect(app_connected_received, dispatch_uid="runtime-app-connected")

    def seed_demo(self, *, tenant, **options) -> dict:
        """The demo agents (runtime/agents/*.md), for tenants' seed_demo command."""
        from runtime.demo import seed_demo_agents

        return {"agents": seed_demo_agents(tenant=tenant)}
