from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Tenants and access"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from tenants.models import ApiToken, Tenant
        from tenants.tokens import token_cache

        # A saved or deleted token or tenant is felt by this process's next request
        # (tenants.lookup_cache; other processes within LOOKUP_CACHE_SECONDS).
        for model in (ApiToken, Tenant):
            for signal in (post_save, post_delete):
                signal.connect(
                    token_cache.invalidate,
                    sender=model,
                    weak=False,
                    dispatch_uid=f"token-cache-{model.__name__}-{signal is post_save}",
                )
