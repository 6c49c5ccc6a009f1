"""Agents and what they use: tool servers, credentials, model prices."""

import base64
import secrets
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

from connections.crypto import secret_encrypt
from connections.outbound import OutboundRefused, check_url
from tenants.models import Tenant

# The ``model.provider`` of an approval gate: it has no model; the turn runs it (runtime.turn.gate).
GATE_PROVIDER = "gate"
# A gate's policy entry for the tools no other entry names (without it they are refused).
GATE_DEFAULT_ENTRY = "*"


class Agent(models.Model):
    """A tenant's configured agent, usually loaded from an AGENT.md file."""

    # In memory only, on the agents the inbox reads with their counts
    # (runtime.decisions.inbox.agents_with_open_counts): open items per kind, and the columns
    # of its query that make them.
    open_counts: dict[str, int]
    open_kind: str | None
    open_n: int | None

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="agents")
    slug = models.SlugField(max_length=63)
    name = models.CharField(max_length=200)
    description = models.TextField()
    version = models.CharField(max_length=50, default="1.0.0")
    skills = models.JSONField(
        default=list, blank=True, help_text="[{id, name, description, tags, examples}]"
    )
    # The skill a message that names none (no metadata.skillId) runs, for an agent with
    # several: the caller is asked to choose only when no default exists.
    default_skill = models.CharField(
        max_length=100,
        blank=True,
        help_text="The id of the skill a message without metadata.skillId gets, when the "
        "agent has several skills (empty: such a message must name one).",
    )
    instructions = models.TextField(blank=True)
    model = models.JSONField(
        default=dict, help_text='e.g. {"provider": "scripted", "script": [...]}'
    )
    tools = models.JSONField(
        default=list, blank=True, help_text="[{server, tool, description, schema, idempotent}]"
    )
    tool_policy = models.JSONField(
        default=dict,
        blank=True,
        help_text='{"server/tool" or "server": "allow"|"approve"|"deny", {action, ...}, or a '
        "list of rules [{when, action, ...}, ...]}",
    )
    connections_enabled = models.BooleanField(
        default=False, help_text="loop.connections: the request_connection tool"
    )
    public = models.BooleanField(
        default=False,
        help_text="Anonymous callers allowed (each task they start gets its own subject).",
    )
    # AGENT.md's ``interactionTtlSeconds``; None (a file without it, an agent made without
    # one): not set, so the tenant's default expiry applies, else 24 hours (ladders.expiry_of).
    interaction_ttl_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        default=None,
        help_text="Seconds an approval or question stays open, unless a ladder's expire step "
        "says. Empty: the tenant's default expiry, else 24 hours.",
    )
    # AGENT.md's ``ladder`` (runtime.policy.ladders.ladder_parse): reminders, escalation and expiry.
    ladder = models.JSONField(
        default=dict,
        blank=True,
        help_text='{"steps": [{"after": "15m", "action": "remind"}, ...], "tools": '
        '{"server/tool": [...]}}, from AGENT.md; its expire steps win over interaction_ttl_seconds.',
    )
    source_path = models.CharField(
        max_length=500, blank=True, help_text="The AGENT.md it was loaded from."
    )
    # The hash of the tool policy and ladder as a file last loaded them
    # (runtime.agents.policy_history.policy_document_hash): a file updates the agent's policy
    # only while the stored one is still that; edited since (in admin, or by another file),
    # load_agents refuses the agent unless told to replace it. Empty: never loaded.
    policy_loaded = models.CharField(max_length=64, blank=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "slug"], name="agent_slug_unique_per_tenant")
        ]
        ordering = ["tenant__slug", "slug"]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.slug}"

    @property
    def is_gateway(self) -> bool:
        """An MCP gateway (AGENT.md ``gateway``): no model; MCP clients call its tools."""
        return (self.model or {}).get("provider") == "gateway"

    @property
    def is_gate(self) -> bool:
        """An approval gate (AGENT.md ``gate: true``): no model and no tool servers; it holds
        the calls its callers describe under its policy (runtime.turn.gate)."""
        return (self.model or {}).get("provider") == GATE_PROVIDER


class PolicyVersion(models.Model):
    """One version of an agent's tool policy and ladder, as it was set and by what: the
    policy's history (the agent's admin page lists it, with diffs, and restores one)."""

    class Source(models.TextChoices):
        FILE = "file", "loaded from a file"
        ADMIN = "admin", "edited in admin"
        RESTORE = "restore", "restored in admin"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="policy_versions")
    tool_policy = models.JSONField(default=dict, blank=True)
    ladder = models.JSONField(default=dict, blank=True)
    # The version of the tool policy (runtime.decisions.receipts.policy_version): the audit
    # names it with each change.
    version = models.CharField(max_length=64)
    source = models.CharField(max_length=16, choices=Source.choices)
    # A file's path and the agent version it declared; for a restore, the version restored.
    source_path = models.CharField(max_length=500, blank=True)
    source_version = models.CharField(max_length=64, blank=True)
    set_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["agent", "-created_at"], name="policy_version_agent")]

    def __str__(self) -> str:
        return f"{self.agent_id} {self.version[:12]}"

    @property
    def where(self) -> str:
        """Where this version came from, in words."""
        when = f"{self.created_at:%Y-%m-%d %H:%M} UTC"
        if self.source == self.Source.FILE:
            version = f" (version {self.source_version})" if self.source_version else ""
            return f"loaded from {self.source_path or 'a file'}{version} by {self.set_by} at {when}"
        if self.source == self.Source.RESTORE:
            return f"restored ({self.source_version[:12]}) in admin by {self.set_by} at {when}"
        return f"edited in admin by {self.set_by} at {when}"


class DemoRecord(models.Model):
    """What the offline demo tool servers did: a deployment, a pull request (runtime.tools.catalog)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    server = models.CharField(max_length=100)
    kind = models.CharField(max_length=50)
    effect_id = models.CharField(max_length=64, unique=True)
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.server} {self.kind} {self.effect_id}"


# An environment variable's shape: what AGENT.md's ``model.credential`` names, so that one
# name means the same secret in a tenant's admin and in a single-tenant install's environment.
CREDENTIAL_NAME_RE = r"^[A-Z][A-Z0-9_]{0,99}$"


class Credential(models.Model):
    """A secret a model provider or an agent URL sends (an API key), set by a tenant's admin
    and referenced by name from AGENT.md (``model.credential``).

    Only the Fernet ciphertext (connections.crypto) is stored; admin shows that it is set and
    the last characters of a long secret, never the secret (runtime.llm.credentials reads it).
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(
        max_length=100,
        validators=[
            RegexValidator(
                CREDENTIAL_NAME_RE,
                "Upper-case letters, digits and underscores, starting with a letter "
                "(like an environment variable, e.g. OPENAI_API_KEY).",
            )
        ],
        help_text="The name AGENT.md's model.credential refers to, e.g. OPENAI_API_KEY.",
    )
    secret_encrypted = models.TextField(editable=False)
    # "…abcd" for secrets long enough that four characters give nothing away, else blank.
    secret_hint = models.CharField(max_length=8, blank=True, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant__slug", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="credential_name_per_tenant")
        ]

    def __str__(self) -> str:
        return self.name


class ModelPrice(models.Model):
    """What a model's tokens cost, USD per million; a row here overrides settings.MODEL_PRICES
    (runtime.llm.prices)."""

    model = models.CharField(max_length=200, unique=True, help_text="e.g. gpt-4o-mini")
    input_usd_per_million = models.DecimalField(
        max_digits=12, decimal_places=6, validators=[MinValueValidator(Decimal(0))]
    )
    output_usd_per_million = models.DecimalField(
        max_digits=12, decimal_places=6, validators=[MinValueValidator(Decimal(0))]
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["model"]

    def __str__(self) -> str:
        return self.model


# Names tool servers may not take: the demo servers and the built-in tools' server answer to
# these (runtime.tools.demo_servers.SERVERS, BUILTIN_SERVER), and a tenant's server of the same name
# would never be reached.
RESERVED_SERVER_NAMES = frozenset({"deploy", "github", "countersign"})


def new_signing_secret() -> str:
    # Standard Webhooks' format: "whsec_" + base64 of 24-64 random bytes.
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


class ToolServer(models.Model):
    """A tenant's tool server, the ``server`` of ``server/tool`` in AGENT.md and the policy.

    ``mcp``: a Model Context Protocol server over streamable HTTP; ``http``: a URL that takes
    signed JSON posts (docs/reference/tool-servers.md). Its tools are discovered on demand (admin's
    "Refresh tools") and cached here; a call of a tool the cache does not hold is refused
    before it is journalled. With an ``app``, calls carry the tenant's connection to that app.
    """

    class Kind(models.TextChoices):
        MCP = "mcp", "MCP (streamable HTTP)"
        HTTP = "http", "HTTP (signed JSON POST)"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="tool_servers")
    name = models.SlugField(
        max_length=63, help_text="The server in server/tool, as AGENT.md and the policy name it."
    )
    kind = models.CharField(max_length=8, choices=Kind.choices)
    url = models.CharField(
        max_length=2000,
        help_text="http(s) URL of the server (MCP: its streamable HTTP endpoint). Loopback and "
        "private addresses are refused unless PUSH_ALLOW_PRIVATE_HOSTS is on.",
    )
    app = models.ForeignKey(
        "connections.App",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="The app whose connection (this tenant's) authorizes the calls, if any.",
    )
    # Fernet ciphertext (connections.crypto) of the Standard Webhooks secret http servers are
    # signed with; shown once, when made.
    signing_secret_encrypted = models.TextField(blank=True, editable=False)
    timeout_seconds = models.PositiveIntegerField(
        default=30, help_text="How long one call or discovery may take (1 to 300 seconds)."
    )
    tools = models.JSONField(
        default=list, blank=True, editable=False, help_text="[{name, description, inputSchema}]"
    )
    refreshed_at = models.DateTimeField(null=True, blank=True, editable=False)
    refresh_error = models.TextField(blank=True, editable=False)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["tenant__slug", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="toolserver_unique_per_tenant")
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind}) of {self.tenant.slug if self.tenant_id else '?'}"

    def clean(self) -> None:
        errors = {}
        if self.name in RESERVED_SERVER_NAMES:
            errors["name"] = f"{self.name!r} is a built-in server's name; choose another."
        try:
            check_url(self.url, ["*"])
        except OutboundRefused as exc:
            errors["url"] = f"This URL cannot be called: {exc}."
        if not 1 <= (self.timeout_seconds or 0) <= 300:
            errors["timeout_seconds"] = "From 1 to 300 seconds."
        if errors:
            raise ValidationError(errors)

    def signing_secret_new(self) -> str:
        """Make a new signing secret, keep it encrypted, and return it (to show once)."""
        secret = new_signing_secret()
        self.signing_secret_encrypted = secret_encrypt(secret)
        return secret

    def tool_named(self, tool: str) -> dict | None:
        """The discovered tool of that name, as the last refresh cached it."""
        return next((t for t in self.tools or [] if t.get("name") == tool), None)


class AnnotationPolicy(models.Model):
    """A tenant's default policy for its tool servers' tools that no entry of an agent's
    policy names, by what the tool's MCP annotations say it does (docs/reference/tool-servers.md):
    read-only (``readOnlyHint: true``), additive (``destructiveHint: false``), destructive
    (``destructiveHint: true``, or ``readOnlyHint: false`` alone: MCP's default) or unknown
    (no hints). Without a row, the defaults below. An agent's policy entry for the tool (or
    its server) always wins; the demo servers' tools have no annotations and wait for a person.
    """

    class Action(models.TextChoices):
        ALLOW = "allow", "allow: runs at once"
        APPROVE = "approve", "approve: waits for a person"
        DENY = "deny", "deny: never runs"

    # The annotation kinds, each with its column and its default (runtime.policy.rules).
    KINDS = (
        ("read_only", "allow"),
        ("additive", "approve"),
        ("destructive", "approve"),
        ("unknown", "approve"),
    )

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="+")
    read_only = models.CharField(
        max_length=8,
        choices=Action.choices,
        default=Action.ALLOW,
        help_text="Tools whose annotations say readOnlyHint: true.",
    )
    additive = models.CharField(
        max_length=8,
        choices=Action.choices,
        default=Action.APPROVE,
        help_text="Tools that say destructiveHint: false (they add, never overwrite or delete).",
    )
    destructive = models.CharField(
        max_length=8,
        choices=Action.choices,
        default=Action.APPROVE,
        help_text="Tools that say destructiveHint: true, or readOnlyHint: false alone.",
    )
    unknown = models.CharField(
        max_length=8,
        choices=Action.choices,
        default=Action.APPROVE,
        help_text="Tools without readOnlyHint or destructiveHint.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "tool annotation default"

    def __str__(self) -> str:
        return f"tool annotation defaults of {self.tenant.slug if self.tenant_id else '?'}"

    def action_for(self, kind: str) -> str:
        return getattr(self, kind)
