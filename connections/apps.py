from django.apps import AppConfig


class ConnectionsConfig(AppConfig):
    name = "connections"
    # Fields holding secret_encrypt() output, for `manage.py rotate_secrets`.
    encrypted_fields = {
        "Connection": ("access_token_encrypted", "refresh_token_encrypted"),
        "TenantApp": ("client_secret_encrypted",),
    }

    def seed_demo(self, *, tenant, **options) -> dict:
        """The demo app catalog (github, google-drive); it belongs to no tenant."""
        from connections.demo import seed_demo_apps

        seed_demo_apps()
        return {}
