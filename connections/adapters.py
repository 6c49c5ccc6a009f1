from tenants.adapters import SocialAccountAdapter as TenantsSocialAccountAdapter


class SocialAccountAdapter(TenantsSocialAccountAdapter):
    """The tenants adapter, minus the social applications that connection apps use.

    A social application linked to a catalog App holds a tenant connection's client
    credentials, not a way to log in: leaving it in allauth's list would put a "Google Drive"
    button on the login page and serve allauth's login flow for it. Hidden here, allauth's
    login and connect views answer 404 for it; the connections app reads it by its own link.
    """

    def list_apps(self, request, provider=None, client_id=None):
        from connections.models import App

        apps = super().list_apps(request, provider=provider, client_id=client_id)
        linked = set(
            App.objects.filter(social_app__isnull=False).values_list("social_app_id", flat=True)
        )
        return [app for app in apps if app.pk is None or app.pk not in linked]
