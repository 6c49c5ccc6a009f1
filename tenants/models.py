import re
import unicodedata
import uuid
import zoneinfo
from typing import ClassVar

from django.conf import settings
from django.contrib.auth.models import AbstractUser, BaseUserManager
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone
from django.utils.crypto import salted_hmac

# AbstractBaseUser's salt for the session hash: a person whose sessions never ended keeps the
# hash Django gave them, so no session ends at an upgrade.
_SESSION_HASH_SALT = "django.contrib.auth.models.AbstractBaseUser.get_session_auth_hash"


class UserManager(BaseUserManager["User"]):
    use_in_migrations = True

    def _create_user(self, email: str, password: str | None, **extra):
        if not email:
            raise ValueError("An e-mail address is required.")
        user = self.model(email=self.normalize_email(email).lower(), **extra)
        user.set_password(password)
        user.save(using=self._db)
        return user

    def create_user(self, email: str, password: str | None = None, **extra):
        extra.setdefault("is_staff", False)
        extra.setdefault("is_superuser", False)
        return self._create_user(email, password, **extra)

    def create_superuser(self, email: str, password: str | None = None, **extra):
        extra.setdefault("is_staff", True)
        extra.setdefault("is_superuser", True)
        return self._create_user(email, password, **extra)


class User(AbstractUser):
    """A person who logs in with an e-mail address: operators, tenant admins, staff."""

    # No user name: people log in with their e-mail address (AbstractUser's field removed).
    username = None  # type: ignore[assignment]
    email = models.EmailField("e-mail address", unique=True)
    # Raised to end every session of the person at once (tenants.services.sessions_end):
    # it is part of the hash each session carries, so older sessions stop verifying.
    session_generation = models.PositiveIntegerField(default=0, editable=False)

    USERNAME_FIELD = "email"
    REQUIRED_FIELDS: ClassVar[list[str]] = []

    # By e-mail address too, where AbstractUser's (Django's UserManager) asks for a user name.
    objects: ClassVar[UserManager] = UserManager()  # type: ignore[assignment]

    class Meta:
        ordering = ["email"]

    def __str__(self) -> str:
        return self.email

    @property
    def subject(self) -> str:
        """The subject recorded on an operator's decisions."""
        return f"user:{self.email}"

    def _session_hash(self, secret=None) -> str:
        value = self.password
        if self.session_generation:
            value = f"{value}\x00{self.session_generation}"
        return salted_hmac(_SESSION_HASH_SALT, value, secret=secret, algorithm="sha256").hexdigest()

    def get_session_auth_hash(self) -> str:
        return self._session_hash()

    def get_session_auth_fallback_hash(self):
        for fallback_secret in settings.SECRET_KEY_FALLBACKS:
            yield self._session_hash(secret=fallback_secret)


def zone_named(name: str):
    """The IANA time zone ``name``, or None."""
    if not name:
        return None
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None


def time_zone_check(name: str) -> None:
    if name and zone_named(name) is None:
        raise ValidationError(f"{name!r} is not a time zone (such as Europe/Berlin or UTC).")


DOMAIN_RE = re.compile(r"(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}")


def invitation_domains_parse(value: str) -> list[str]:
    """The domains of an invitation allow-list, lowercase, in order; ValidationError names
    the first that is not a domain name."""
    domains: list[str] = []
    for word in re.split(r"[\s,]+", (value or "").strip().lower()):
        if not word:
            continue
        word = word.removeprefix("@")
        if not DOMAIN_RE.fullmatch(word):
            raise ValidationError(f"{word!r} is not a domain name (such as acme.example).")
        if word not in domains:
            domains.append(word)
    return domains


def invitation_domains_check(value: str) -> None:
    invitation_domains_parse(value)


# The shortest audit retention a tenant may set: six months (180 days), the minimum that
# the EU AI Act sets for the logs a deployer of a high-risk AI system keeps (Art. 26(6): "for
# a period appropriate to the intended purpose ..., of at least six months"; providers, Art.
# 19(1), likewise). Longer duties (sector rules, a contract) are the tenant's to set above it.
AUDIT_RETENTION_FLOOR_DAYS = 180


def audit_retention_check(days) -> None:
    if days is not None and days < AUDIT_RETENTION_FLOOR_DAYS:
        raise ValidationError(
            f"Keep the audit for at least {AUDIT_RETENTION_FLOOR_DAYS} days (six months): the "
            "legal floor for the logs of high-risk AI systems (EU AI Act, Art. 19 and 26)."
        )


class Tenant(models.Model):
    """An organisation; every other row belongs to exactly one tenant."""

    slug = models.SlugField(max_length=63, unique=True)
    name = models.CharField(max_length=200)
    active = models.BooleanField(
        default=True,
        help_text="An inactive tenant's tokens and agents answer that it is deactivated, and "
        "its members reach none of its pages. Platform staff change it (deactivate, reactivate).",
    )
    deactivated_at = models.DateTimeField(null=True, blank=True, editable=False)
    deactivated_by = models.CharField(max_length=200, blank=True, editable=False)
    time_zone = models.CharField(
        max_length=64,
        blank=True,
        validators=[time_zone_check],
        help_text="The IANA time zone its members' pages show times in (Europe/Berlin); "
        "empty: the site's TIME_ZONE.",
    )
    invitation_domains = models.CharField(
        max_length=1000,
        blank=True,
        validators=[invitation_domains_check],
        help_text="Who may be invited: e-mail domains, separated by commas or spaces "
        "(acme.test, acme.example); an address at a subdomain is not at its parent's. "
        "Empty: any address.",
    )
    expiry_may_approve = models.BooleanField(
        default=False,
        help_text="A policy rule with risk: low and on_expiry: approve may approve its calls "
        "when nobody decided in time. Off: such calls are denied at expiry, as every other.",
    )
    # The expire step of the tenant's default ladder (runtime.policy.ladders, as stored:
    # ``{"after": "24h", "action": "expire", "on_expiry": ...}``), {} for none: how long an
    # item of an agent with no expiry of its own stays open, and what then becomes of it
    # (runtime.policy.ladders.expiry_of says the precedence). The ladder's other steps are the
    # tenant's ladder under Notifications; the settings page edits both as one sentence.
    default_expiry = models.JSONField(default=dict, blank=True, editable=False)
    audit_retention_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[audit_retention_check],
        help_text=f"Audit rows older than this many days are pruned (at least "
        f"{AUDIT_RETENTION_FLOOR_DAYS}, the legal floor). Empty: kept for ever.",
    )
    # Where the audit chain now starts: the place and chain hash of the last row the pruner
    # removed (runtime.kernel.audit_prune), 0 and "" while none was. Written by the pruner only.
    audit_pruned_seq = models.BigIntegerField(default=0, editable=False)
    audit_pruned_hash = models.CharField(max_length=64, blank=True, editable=False)
    ai_summaries = models.BooleanField(
        "AI summaries of held calls",
        default=False,
        help_text="A model writes a short summary of each held call (its arguments without "
        "redacted fields, and the conversation before it), shown labelled beside the "
        "arguments and checked against them. Off: nothing is sent to a model for it.",
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.name

    @property
    def invitation_domain_list(self) -> list[str]:
        try:
            return invitation_domains_parse(self.invitation_domains)
        except ValidationError:
            return []  # stored around its check: nothing narrows who may be invited

    @property
    def zone(self):
        """The tenant's time zone (the site's TIME_ZONE when it names none, or none known)."""
        return zone_named(self.time_zone) or timezone.get_default_timezone()


class Membership(models.Model):
    class Role(models.TextChoices):
        ADMIN = "admin", "Admin"
        OPERATOR = "operator", "Operator"
        VIEWER = "viewer", "Viewer"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.OPERATOR)
    # Who sent the last invitation and when: its link names this time, so that a resent
    # invitation's link replaces the one before (tenants.services.invitation_send).
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        editable=False,
    )
    invited_at = models.DateTimeField(null=True, blank=True, editable=False)
    # When an admin revoked the last invitation: its link stops working (a new invitation
    # clears it).
    invitation_revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Out of office (tenants.services.away_set): from ``away_from`` until ``away_until`` the
    # member is told of nothing; what would have reached them reaches ``delegate`` (a member
    # of the same tenant) when there is one.
    away_from = models.DateTimeField(null=True, blank=True, editable=False)
    away_until = models.DateTimeField(null=True, blank=True, editable=False)
    delegate = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user"], name="membership_unique_per_tenant")
        ]
        ordering = ["tenant__slug", "user__email"]
        verbose_name = "member"

    def __str__(self) -> str:
        return f"{self.user} ({self.get_role_display()}) in {self.tenant.slug}"

    def away_at(self, now=None) -> bool:
        """Out of office at ``now`` (now unless told)."""
        if self.away_until is None:
            return False
        now = now or timezone.now()
        return (self.away_from is None or self.away_from <= now) and now < self.away_until

    @property
    def can_decide(self) -> bool:
        return self.role in (self.Role.ADMIN, self.Role.OPERATOR)

    @property
    def is_tenant_admin(self) -> bool:
        """Runs this tenant in Django admin: the admin role and staff status."""
        return self.role == self.Role.ADMIN and self.user.is_staff and self.user.is_active


class ApproverGroup(models.Model):
    """A named group of a tenant's members that a tool policy can name as its approvers
    (``approvers: [group:release-managers]``, docs/how-to/policy.md, "Who may decide")."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="approver_groups")
    slug = models.SlugField(
        max_length=63, help_text="The name a policy uses: approvers: [group:<slug>]."
    )
    name = models.CharField(max_length=200, blank=True)
    members = models.ManyToManyField(Membership, blank=True, related_name="approver_groups")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "slug"], name="approver_group_unique_slug")
        ]
        ordering = ["tenant__slug", "slug"]

    def __str__(self) -> str:
        return f"group:{self.slug}"


# Subjects the system itself decides as (the expiry, a void, a ladder, a standing rule): no
# token acts as one (ApiToken.clean), and no person or program deciding as one is ever a
# decider (runtime.decisions.approvers), so the audit never names the system for a person.
RESERVED_SUBJECT_PREFIXES = ("system:", "rule:")
# The subjects of callers without credentials (runtime.kernel.task_models.ANONYMOUS).
ANONYMOUS_SUBJECT = "anonymous"


def subject_folded(subject: str) -> str:
    """``subject`` as the reserved-subject checks compare it: trimmed, in Unicode's
    compatibility form and case-folded, so that ``System:expiry``, `` system:expiry`` and
    a fullwidth ``ｓｙｓｔｅｍ:`` all read as ``system:expiry``."""
    once = unicodedata.normalize("NFKC", subject or "").casefold()
    return unicodedata.normalize("NFKC", once).strip()


def subject_reserved(subject: str) -> bool:
    """Whether ``subject`` is, or folds to, one the system decides as (``system:...``,
    ``rule:...``)."""
    return subject_folded(subject).startswith(RESERVED_SUBJECT_PREFIXES)


def subject_anonymous(subject: str) -> bool:
    """Whether ``subject`` is, or folds to, a subject of callers without credentials."""
    folded = subject_folded(subject)
    return folded == ANONYMOUS_SUBJECT or folded.startswith(f"{ANONYMOUS_SUBJECT}:")


def _control_character(value: str) -> str | None:
    return next((c for c in value if not c.isprintable()), None)


def token_subject_problem(subject: str) -> str | None:
    """Why a new token may not act for ``subject``, or None. Reserved subjects are compared
    folded (subject_folded): the audit and the inbox show a subject as written, and
    ``System:expiry`` reads there as the system's own."""
    # "anonymous" and "anonymous:..." are the subjects of callers without credentials
    # (runtime.kernel.task_models.ANONYMOUS): a token acting as one would reach their tasks.
    if subject_anonymous(subject):
        return "anonymous and anonymous:... are reserved for callers without a token."
    # The system decides as system:... and rule:... (the expiry, a void, a standing rule): a
    # token acting as one would make the audit name the system for its decisions.
    if subject_reserved(subject):
        reserved = " and ".join(p + "..." for p in RESERVED_SUBJECT_PREFIXES)
        return f"{reserved} (in any case) are reserved for the system's own decisions."
    # A subject is written into log lines, the audit and receipts: a line break or other
    # control character in it would forge a line of its own there.
    bad = _control_character(subject or "")
    if bad is not None:
        return f"must not contain control characters (found {bad!r})."
    return None


class ApiToken(models.Model):
    """A bearer token for partner agents and programs.

    The plaintext (``cs_<prefix>_<secret>``) is shown once, at creation; the row keeps the
    public lookup prefix and the SHA-256 of the whole token. The token carries 256 bits of
    randomness, so a fast hash is enough (as for GitHub's tokens): nothing to brute-force.
    """

    class Kind(models.TextChoices):
        PARTNER = "partner", "Partner agent (calls the A2A endpoint)"
        OPERATOR = "operator", "Operator program (decides through the REST API)"

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_tokens")
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.PARTNER)
    subject = models.CharField(
        max_length=200,
        help_text="Who callers with this token act for, e.g. partner:globex or user:alice@acme.test.",
    )
    name = models.CharField(
        max_length=200, help_text="What the token is for; shown to admins only."
    )
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    token_hash = models.CharField(max_length=64, editable=False)
    all_agents = models.BooleanField(default=True, help_text="May call every agent of the tenant.")
    agent_slugs = models.JSONField(
        default=list,
        blank=True,
        help_text="When not all agents: the slugs of the agents it may call.",
    )
    may_step_up = models.BooleanField(
        default=False,
        help_text="Operator tokens: may approve tools marked risk: high (the program stands for "
        "a re-authenticated person). Without it such approvals answer 403.",
    )
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Who revoked it: user:<email> from Django admin, shell:<login> from manage.py, or
    # member-removed:<email> when the person the token acted for left the tenant.
    revoked_by = models.CharField(max_length=200, blank=True, editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["-created_at"]
        # Admin's titles and breadcrumbs ("Add API token"), not the class name's "api token".
        verbose_name = "API token"
        verbose_name_plural = "API tokens"

    def __str__(self) -> str:
        return f"{self.name} ({self.subject})"

    def save(self, *args, **kwargs):
        # Every way a token is made passes here, clean() or not (Django admin, manage.py
        # tokens, api_token_create, a shell's ApiToken.objects.create): none acts for the
        # system or for callers without credentials.
        if self._state.adding:
            problem = token_subject_problem(self.subject)
            if problem:
                raise ValidationError({"subject": problem})
        super().save(*args, **kwargs)

    def clean(self) -> None:
        # A token's subject is its identity, fixed when it is made (admin shows it read-only
        # after): it is judged then. A row made before a rule was stricter keeps its name and
        # its revocation editable; the decision flow refuses it as a decider
        # (runtime.decisions.approvers).
        if self._state.adding:
            problem = token_subject_problem(self.subject)
            if problem:
                raise ValidationError({"subject": problem})
        # A name is written into log lines: a line break in it would forge a line there.
        bad = _control_character(self.name or "")
        if bad is not None:
            raise ValidationError({"name": f"must not contain control characters (found {bad!r})."})

    def may_call(self, agent_slug: str) -> bool:
        return self.all_agents or agent_slug in (self.agent_slugs or [])

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    def is_expired(self, now=None) -> bool:
        return self.expires_at is not None and self.expires_at <= (now or timezone.now())
