import uuid

from allauth.socialaccount.models import SocialApp
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from tenants.appendonly import AppendOnlyModel
from tenants.models import Tenant


class App(models.Model):
    """An app of the catalog that tenants may connect, such as ``github``.

    The catalog is global and admin-managed: which apps exist and how one connects to them is
    the operator of Countersign's decision; each tenant's connections hold the secrets.
    """

    class Method(models.TextChoices):
        TOKEN = "token", "Pasted token"
        OAUTH2 = "oauth2", "OAuth2"

    slug = models.SlugField(
        max_length=80,
        unique=True,
        help_text="The name agents use in request_connection and tools, e.g. github.",
    )
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    method = models.CharField(max_length=16, choices=Method.choices, default=Method.TOKEN)
    token_help = models.CharField(
        max_length=300,
        blank=True,
        help_text="For pasted tokens: where to create one and which permissions it needs.",
    )
    social_app = models.ForeignKey(
        SocialApp,
        null=True,
        blank=True,
        # A connection app that silently lost its client credentials would fail at the
        # provider; refuse the delete instead, so the admin unlinks it on purpose.
        on_delete=models.PROTECT,
        related_name="+",
        help_text=(
            "For OAuth2: the social application (Django admin → Social applications) with the "
            "client id and secret. Its settings give the endpoints: authorize_url and "
            "access_token_url, or server_url for OpenID Connect discovery."
        ),
    )
    scopes = models.CharField(
        max_length=500, blank=True, help_text="For OAuth2: the scopes to ask for, space-separated."
    )
    active = models.BooleanField(default=True, help_text="Shown on the connections page.")
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if self.method == self.Method.OAUTH2 and self.social_app_id is None:
            raise ValidationError({"social_app": "An OAuth2 app needs a social application."})
        if self.method == self.Method.TOKEN and self.social_app_id is not None:
            raise ValidationError({"social_app": "Only OAuth2 apps use a social application."})

    @property
    def is_oauth2(self) -> bool:
        return self.method == self.Method.OAUTH2

    @property
    def oauth2_ready(self) -> bool:
        """Whether an admin has filled in the client credentials (the demo seeds a blank one)."""
        social_app = self.social_app if self.social_app_id else None
        return bool(social_app is not None and social_app.client_id and social_app.secret)


class TenantApp(models.Model):
    """A tenant's own OAuth2 client for a catalog app: set by the tenant's admin, it wins over
    the platform's (the App's social application) for that tenant's connections.

    The secret is stored Fernet-encrypted (connections.crypto) and never shown again; the
    endpoints, when given, override the platform app's (a tenant's own identity provider)."""

    class AuthMethod(models.TextChoices):
        POST = "client_secret_post", "In the form body (client_secret_post)"
        BASIC = "client_secret_basic", "HTTP Basic (client_secret_basic)"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    app = models.ForeignKey(
        App,
        on_delete=models.CASCADE,
        related_name="tenant_apps",
        limit_choices_to={"method": App.Method.OAUTH2},
        help_text="The catalog app its agents may ask to connect.",
    )
    client_id = models.CharField(max_length=300)
    client_secret_encrypted = models.TextField(blank=True, editable=False)
    scopes = models.CharField(
        max_length=500, blank=True, help_text="Space-separated. Empty: the app's own scopes."
    )
    server_url = models.URLField(
        max_length=500,
        blank=True,
        help_text="OpenID Connect issuer (its /.well-known/openid-configuration names the "
        "endpoints). Or give the two endpoints below; empty: the platform app's endpoints.",
    )
    authorize_url = models.URLField(max_length=500, blank=True)
    token_url = models.URLField(max_length=500, blank=True)
    token_auth_method = models.CharField(
        max_length=24, choices=AuthMethod.choices, default=AuthMethod.POST
    )
    updated_by = models.CharField(max_length=254, blank=True, editable=False)
    updated_at = models.DateTimeField(default=timezone.now, editable=False)
    # What the last "check" found: "" when it passed, else why not (in words).
    checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    check_problem = models.CharField(max_length=500, blank=True, editable=False)

    class Meta:
        ordering = ["tenant__slug", "app__name"]
        verbose_name = "OAuth app of the tenant"
        verbose_name_plural = "OAuth apps of the tenant"
        constraints = [models.UniqueConstraint(fields=["tenant", "app"], name="tenant_app_unique")]

    def __str__(self) -> str:
        return f"{self.app} for {self.tenant.slug}"

    @property
    def secret_set(self) -> bool:
        return bool(self.client_secret_encrypted)


class Connection(models.Model):
    """A tenant's connection to one catalog app: one row per (tenant, app), reconnected in place.

    Secrets are stored Fernet-encrypted (connections.crypto) and never rendered; the history
    of who connected and disconnected lives in ConnectionAuditEvent.
    """

    class Status(models.TextChoices):
        CONNECTED = "connected", "Connected"
        DISCONNECTED = "disconnected", "Disconnected"

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="connections")
    app = models.ForeignKey(App, on_delete=models.PROTECT, related_name="connections")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.CONNECTED)
    connected_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    connected_at = models.DateTimeField(null=True, blank=True)
    disconnected_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    disconnected_at = models.DateTimeField(null=True, blank=True)
    # Fernet ciphertexts; blank when disconnected (a disconnect forgets the secrets).
    access_token_encrypted = models.TextField(blank=True, editable=False)
    refresh_token_encrypted = models.TextField(blank=True, editable=False)
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="When the OAuth2 access token expires, if it does."
    )
    granted_scopes = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["tenant__slug", "app__name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "app"], name="connection_unique_per_tenant")
        ]

    def __str__(self) -> str:
        return f"{self.app} for {self.tenant.slug} ({self.get_status_display()})"

    @property
    def is_connected(self) -> bool:
        return self.status == self.Status.CONNECTED

    def is_expired(self, now=None) -> bool:
        return self.expires_at is not None and self.expires_at <= (now or timezone.now())


class ConnectionAuditEvent(AppendOnlyModel):
    """Who connected or disconnected which app, and when; written with the state change.
    Append-only (tenants.appendonly)."""

    class Action(models.TextChoices):
        CONNECTED = "connected", "Connected"
        DISCONNECTED = "disconnected", "Disconnected"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    app = models.ForeignKey(App, on_delete=models.PROTECT, related_name="+")
    action = models.CharField(max_length=16, choices=Action.choices)
    actor = models.CharField(max_length=254, help_text="The subject, e.g. user:alice@acme.test.")
    method = models.CharField(max_length=16, blank=True, help_text="token or oauth2 on connect.")
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["tenant", "-created_at"], name="conn_audit_tenant_time")]

    def __str__(self) -> str:
        return f"{self.actor} {self.action} {self.app} in {self.tenant.slug}"
