"""A tenant's people and the tenant itself: invite, re-role, remove, deactivate.

Django admin's "Members" and ``manage.py members`` / ``manage.py tenants`` call these, so
that both say and do the same. Each change is one transaction and is sent to the audit log
(tenants.signals.tenant_changed) in it.
"""

import hmac
from datetime import timedelta

from django.conf import settings
from django.core import signing
from django.core.exceptions import ValidationError
from django.core.mail import EmailMultiAlternatives
from django.core.validators import validate_email
from django.db import transaction
from django.db.models import F
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.crypto import salted_hmac

from tenants.models import ApiToken, ApproverGroup, Membership, Tenant, User
from tenants.signals import tenant_changed
from tenants.tokens import token_cache

INVITATION_SALT = "tenants.invitation"
ROLE_WORDS: dict[str, str] = {
    Membership.Role.ADMIN: "an admin: you run the tenant (its members, agents, tokens and "
    "settings) and decide what agents may do",
    Membership.Role.OPERATOR: "an operator: you approve or deny what its agents ask to do and "
    "answer their questions",
    Membership.Role.VIEWER: "a viewer: you see its inbox, tasks and audit, and decide nothing",
}


class MemberError(Exception):
    """Why a change to a member was refused, in words for the person who asked."""


def email_normalised(email: str) -> str:
    """The address as stored (lowercase), or MemberError when it is none."""
    email = User.objects.normalize_email((email or "").strip()).lower()
    try:
        validate_email(email)
    except ValidationError:
        raise MemberError(f"{email!r} is not an e-mail address.") from None
    limit = User._meta.get_field("email").max_length
    if limit is not None and len(email) > limit:
        raise MemberError(f"An e-mail address is at most {limit} characters.")
    return email


def _audit(*, tenant: Tenant, actor: str, action: str, **detail) -> None:
    tenant_changed.send(sender=Tenant, tenant=tenant, actor=actor, action=action, detail=detail)


def sessions_end(*, user: User) -> None:
    """End every session of the person: each one carries a hash with session_generation in
    it (User.get_session_auth_hash), which no longer verifies."""
    User.objects.filter(pk=user.pk).update(session_generation=F("session_generation") + 1)


def _tenant_locked(tenant_id: int) -> None:
    """Lock the tenant's row for the rest of the transaction: changes to its admins are made
    one at a time, so two admins demoting each other at once cannot leave it with none."""
    Tenant.objects.select_for_update().filter(pk=tenant_id).first()


def last_admin_problem(
    *,
    membership: Membership,
    role: str | None = None,
    staff: bool | None = None,
    active: bool | None = None,
    removing: bool = False,
) -> str:
    """Why the change would leave the tenant with nobody who runs it, or "".

    A tenant is run by its admins (the admin role, Django admin access, an active account):
    the last of them is never demoted, deactivated, removed or has their access taken, by
    anyone, so that the tenant never needs platform staff to be run again."""
    user = membership.user
    runs_now = membership.role == Membership.Role.ADMIN and user.is_staff and user.is_active
    if not runs_now:
        return ""
    runs_after = (
        not removing
        and (role or membership.role) == Membership.Role.ADMIN
        and (user.is_staff if staff is None else staff)
        and (user.is_active if active is None else active)
    )
    if runs_after:
        return ""
    others = (
        Membership.objects.filter(
            tenant_id=membership.tenant_id,
            role=Membership.Role.ADMIN,
            user__is_staff=True,
            user__is_active=True,
        )
        .exclude(pk=membership.pk)
        .exists()
    )
    if others:
        return ""
    return (
        f"{user.email} is the last admin of {membership.tenant.name}: make another member an "
        "admin (with Django admin access) first."
    )


def invitation_domain_problem(*, tenant: Tenant, email: str) -> str:
    """Why ``email`` may not be added to the tenant (its invitation domain allow-list), or
    "". A member already is not judged again."""
    allowed = tenant.invitation_domain_list
    if not allowed or email.rpartition("@")[2].lower() in allowed:
        return ""
    if Membership.objects.filter(tenant=tenant, user__email__iexact=email).exists():
        return ""
    return f"{tenant.name} invites addresses at {', '.join(allowed)} only (its settings)."


def membership_add(
    *, tenant: Tenant, email: str, role: str, actor: str, staff: bool | None = None
) -> tuple[Membership, bool]:
    """Add a person to the tenant with a role, or give a member a new role; return the
    membership and whether it is new. A new person has no usable password: the invitation's
    link sets one. ``staff``: give (or take) Django admin access, as platform staff may."""
    email = email_normalised(email)
    if role not in Membership.Role.values:
        raise MemberError(f"{role!r} is not a role ({', '.join(Membership.Role.values)}).")
    problem = invitation_domain_problem(tenant=tenant, email=email)
    if problem:
        raise MemberError(problem)
    with transaction.atomic():
        user = User.objects.filter(email__iexact=email).first()
        if user is None:
            user = User.objects.create_user(email=email, password=None)
        membership, created = Membership.objects.select_related("user", "tenant").get_or_create(
            tenant=tenant, user=user, defaults={"role": role}
        )
        if created:
            _audit(tenant=tenant, actor=actor, action="member.added", member=email, role=role)
        elif membership.role != role:
            membership_role_set(membership=membership, role=role, actor=actor)
        if staff is not None:
            member_staff_set(membership=membership, staff=staff, platform=True, actor=actor)
    return membership, created


def membership_role_set(*, membership: Membership, role: str, actor: str, by=None) -> bool:
    """Give a member another role; False when it was theirs already. ``by``: the person
    asking, who may not change their own role (another admin can)."""
    if role not in Membership.Role.values:
        raise MemberError(f"{role!r} is not a role ({', '.join(Membership.Role.values)}).")
    if by is not None and membership.user_id == by.pk:
        raise MemberError("You cannot change your own role; another admin of the tenant can.")
    with transaction.atomic():
        _tenant_locked(membership.tenant_id)
        old = (
            Membership.objects.select_for_update()
            .values_list("role", flat=True)
            .filter(pk=membership.pk)
            .first()
        )
        if old is None:
            raise MemberError(f"{membership.user.email} is no longer a member.")
        if old == role:
            return False
        membership.role = old
        problem = last_admin_problem(membership=membership, role=role)
        if problem:
            raise MemberError(problem)
        Membership.objects.filter(pk=membership.pk).update(role=role)
        membership.role = role
        _audit(
            tenant=membership.tenant,
            actor=actor,
            action="member.role_changed",
            member=membership.user.email,
            role=role,
            previous=old,
        )
    return True


def staff_change_problem(*, user: User, tenant: Tenant, staff: bool, platform: bool) -> str:
    """Why the person asking may not give or take ``user``'s Django admin access, or "".

    Staff status belongs to the person, not to one membership: with the admin role it runs
    every tenant they are an admin of. So a tenant's admin (``platform`` False) may set it
    only for people who are members of that tenant alone; platform staff for anyone but
    platform staff."""
    if user.is_staff == staff:
        return ""
    if user.is_superuser:
        return f"{user.email} is platform staff; only platform staff change that."
    if not platform and Membership.objects.filter(user=user).exclude(tenant_id=tenant.pk).exists():
        return (
            f"{user.email} is a member of other tenants too: platform staff give or take "
            "their Django admin access."
        )
    return ""


def member_staff_set(
    *, membership: Membership, staff: bool, platform: bool, actor: str = "system:members"
) -> bool:
    """Give or take a member's Django admin access (staff status); False when unchanged.
    Refused as staff_change_problem and last_admin_problem say."""
    user = membership.user
    problem = staff_change_problem(
        user=user, tenant=membership.tenant, staff=staff, platform=platform
    )
    if problem:
        raise MemberError(problem)
    if user.is_staff == staff:
        return False
    with transaction.atomic():
        _tenant_locked(membership.tenant_id)
        problem = last_admin_problem(membership=membership, staff=staff)
        if problem:
            raise MemberError(problem)
        User.objects.filter(pk=user.pk).update(is_staff=staff)
        user.is_staff = staff
        _audit(
            tenant=membership.tenant,
            actor=actor,
            action="member.admin_access_given" if staff else "member.admin_access_taken",
            member=user.email,
        )
    return True


def active_change_problem(*, membership: Membership, active: bool, platform: bool, by=None) -> str:
    """Why the person asking may not deactivate or reactivate ``membership``'s account, or "".

    An account is the person's, not one membership's: deactivated, they log in nowhere. So,
    as for Django admin access, a tenant's admin may do it only for people who are members
    of that tenant alone; platform staff for anyone but platform staff; nobody for
    themselves or for the tenant's last admin."""
    user = membership.user
    if user.is_active == active:
        return ""
    if by is not None and user.pk == by.pk:
        return "You cannot deactivate yourself; another admin of the tenant can."
    if user.is_superuser:
        return f"{user.email} is platform staff; only platform staff change that."
    if (
        not platform
        and Membership.objects.filter(user=user).exclude(tenant_id=membership.tenant_id).exists()
    ):
        return (
            f"{user.email} is a member of other tenants too: platform staff deactivate or "
            "reactivate their account."
        )
    return last_admin_problem(membership=membership, active=active)


def member_active_set(
    *, membership: Membership, active: bool, actor: str, platform: bool, by=None
) -> bool:
    """Deactivate a member's account (they log in nowhere, their sessions end, invitations
    to them stop working; nothing of theirs is deleted) or reactivate it; False when it
    already was. Refused as active_change_problem says."""
    user = membership.user
    with transaction.atomic():
        _tenant_locked(membership.tenant_id)
        problem = active_change_problem(
            membership=membership, active=active, platform=platform, by=by
        )
        if problem:
            raise MemberError(problem)
        if user.is_active == active:
            return False
        User.objects.filter(pk=user.pk).update(is_active=active)
        user.is_active = active
        if not active:
            sessions_end(user=user)
        _audit(
            tenant=membership.tenant,
            actor=actor,
            action="member.reactivated" if active else "member.deactivated",
            member=user.email,
        )
    return True


def member_groups_set(*, membership: Membership, groups: list[ApproverGroup], actor: str) -> bool:
    """Put a member in exactly ``groups`` (approver groups of their tenant); False when
    they were in those already."""
    strangers = [g for g in groups if g.tenant_id != membership.tenant_id]
    if strangers:
        raise MemberError(f"Groups of another tenant: {', '.join(str(g) for g in strangers)}.")
    with transaction.atomic():
        before = sorted(membership.approver_groups.values_list("slug", flat=True))
        after = sorted(g.slug for g in groups)
        if before == after:
            return False
        membership.approver_groups.set(groups)
        _audit(
            tenant=membership.tenant,
            actor=actor,
            action="member.groups_changed",
            member=membership.user.email,
            groups=after,
            previous=before,
        )
    return True


def membership_remove(*, membership: Membership, actor: str, by=None) -> dict:
    """Take a person out of the tenant: the membership goes, their sessions end, the tenant's
    tokens that act for them (subject user:<email>) are revoked; their audit history stays
    (it names them by subject, not by membership). ``by``: the person asking, who may not
    remove themselves."""
    user = membership.user
    if by is not None and user.pk == by.pk:
        raise MemberError("You cannot remove yourself; another admin of the tenant can.")
    now = timezone.now()
    with transaction.atomic():
        _tenant_locked(membership.tenant_id)
        problem = last_admin_problem(membership=membership, removing=True)
        if problem:
            raise MemberError(problem)
        deleted, _ = Membership.objects.filter(pk=membership.pk).delete()
        if not deleted:
            raise MemberError(f"{user.email} is no longer a member.")
        tokens = ApiToken.objects.filter(
            tenant_id=membership.tenant_id, subject=user.subject, revoked_at__isnull=True
        ).update(revoked_at=now, revoked_by=f"member-removed:{user.email} by {actor}")
        sessions_end(user=user)
        if user.is_staff and not user.is_superuser and not user.memberships.exists():
            # Staff status with no tenant would make them a tenant admin again the day they
            # are added as an admin elsewhere, without that tenant saying so.
            User.objects.filter(pk=user.pk).update(is_staff=False)
        _audit(
            tenant=membership.tenant,
            actor=actor,
            action="member.removed",
            member=user.email,
            role=membership.role,
            tokens_revoked=tokens,
        )
    if tokens:
        token_cache.invalidate()
    return {"tokens_revoked": tokens}


# --- invitations ----------------------------------------------------------------------------


def invitation_days() -> int:
    return settings.INVITATION_LINK_DAYS


def _invitation_state(membership: Membership) -> str:
    """What a link is good for: this invitation (invited_at), while the person has not set a
    password or logged in since. Any of those changing kills the link."""
    user = membership.user
    value = "|".join(
        [
            str(membership.pk),
            membership.invited_at.isoformat() if membership.invited_at else "",
            user.password,
            user.last_login.isoformat() if user.last_login else "",
        ]
    )
    return salted_hmac(INVITATION_SALT, value, algorithm="sha256").hexdigest()[:32]


def invitation_key(membership: Membership) -> str:
    return signing.dumps(
        {"m": membership.pk, "s": _invitation_state(membership)}, salt=INVITATION_SALT
    )


def invitation_for_key(key: str) -> tuple[Membership | None, str]:
    """The membership an invitation link is for, or None and why ("expired", "invalid")."""
    try:
        data = signing.loads(key, salt=INVITATION_SALT, max_age=timedelta(days=invitation_days()))
    except signing.SignatureExpired:
        return None, "expired"
    except signing.BadSignature:
        return None, "invalid"
    if not isinstance(data, dict) or not isinstance(data.get("m"), int):
        return None, "invalid"
    membership = (
        Membership.objects.select_related("user", "tenant", "invited_by")
        .filter(
            pk=data["m"],
            tenant__active=True,
            user__is_active=True,
            invitation_revoked_at__isnull=True,
        )
        .first()
    )
    if membership is None or not hmac.compare_digest(
        _invitation_state(membership), str(data.get("s", ""))
    ):
        return None, "invalid"
    return membership, ""


def invitation_send(
    *, membership: Membership, by=None, base_url: str, actor: str | None = None
) -> None:
    """E-mail the member their invitation: who invited them, to which tenant, with what role,
    and (when they have no password yet) a link that sets one and expires. Resending makes a
    new link and kills the one before (and undoes a revocation). Raises MemberError when the
    mail cannot be sent (and then nothing changes). ``actor``: who the audit names (default:
    ``by``'s subject)."""
    user, tenant = membership.user, membership.tenant
    if not user.is_active:
        raise MemberError(f"{user.email} is deactivated; no invitation was sent.")
    now = timezone.now()
    with transaction.atomic():
        Membership.objects.filter(pk=membership.pk).update(
            invited_at=now, invited_by=by, invitation_revoked_at=None
        )
        membership.invited_at, membership.invited_by = now, by
        membership.invitation_revoked_at = None
        _audit(
            tenant=tenant,
            actor=actor or (by.subject if by is not None else "system:members"),
            action="member.invited",
            member=user.email,
            role=membership.role,
        )
        needs_password = not user.has_usable_password()
        link = (
            base_url + reverse("invitation_accept", args=[invitation_key(membership)])
            if needs_password
            else base_url + reverse("account_login")
        )
        context = {
            "tenant": tenant,
            "membership": membership,
            "user": user,
            "inviter": by.email if by is not None else "",
            "role_words": ROLE_WORDS[membership.role],
            "admin_access": membership.is_tenant_admin,
            "admin_url": base_url + reverse("admin:index"),
            "link": link,
            "needs_password": needs_password,
            "expires_at": now + timedelta(days=invitation_days()),
            "days": invitation_days(),
        }
        # One line, whatever the tenant's name holds: a newline in a header is refused.
        subject = " ".join(
            render_to_string("tenants/email/invitation_subject.txt", context).split()
        )
        message = EmailMultiAlternatives(
            subject=subject,
            body=render_to_string("tenants/email/invitation_body.txt", context),
            to=[user.email],
        )
        try:
            # Inside the transaction on purpose: a mail that could not be sent leaves the
            # earlier invitation (and its link) as it was. No row is locked meanwhile.
            message.send()
        except Exception as exc:  # SMTP errors are many; each is the same answer here
            raise MemberError(f"The invitation to {user.email} could not be sent: {exc}") from exc


class InvitationStatus:
    """What became of a member's invitation, as the members list says it."""

    NOT_SENT = "not sent"
    PENDING = "pending"
    EXPIRED = "expired"
    REVOKED = "revoked"
    ACCEPTED = "accepted"


def invitation_status(membership: Membership, now=None) -> str:
    """One of InvitationStatus's words for ``membership`` (its user loaded)."""
    user = membership.user
    if membership.invitation_revoked_at is not None:
        return InvitationStatus.REVOKED
    if user.has_usable_password() or user.last_login is not None:
        return InvitationStatus.ACCEPTED
    if membership.invited_at is None:
        return InvitationStatus.NOT_SENT
    if membership.invited_at + timedelta(days=invitation_days()) <= (now or timezone.now()):
        return InvitationStatus.EXPIRED
    return InvitationStatus.PENDING


def invitation_revoke(*, membership: Membership, actor: str) -> bool:
    """Make a pending (or expired) invitation's link stop working; False when there was none
    to revoke (never sent, accepted, or revoked already). The member stays, without a
    password, until removed or invited again."""
    if invitation_status(membership) not in (InvitationStatus.PENDING, InvitationStatus.EXPIRED):
        return False
    now = timezone.now()
    with transaction.atomic():
        done = Membership.objects.filter(
            pk=membership.pk, invitation_revoked_at__isnull=True
        ).update(invitation_revoked_at=now)
        if not done:
            return False
        membership.invitation_revoked_at = now
        _audit(
            tenant=membership.tenant,
            actor=actor,
            action="member.invitation_revoked",
            member=membership.user.email,
        )
    return True


def member_invite(
    *,
    tenant: Tenant,
    email: str,
    role: str,
    actor: str,
    by=None,
    base_url: str,
    groups: list[ApproverGroup] | None = None,
    staff: bool = False,
    platform: bool = True,
    send: bool = True,
) -> tuple[Membership, bool]:
    """Add a person to the tenant (role, approver groups, Django admin access) and e-mail
    them the invitation: what Django admin's "Add member" form and ``manage.py members
    invite`` both do. Returns the membership and whether it is new. The member is added
    even when the mail then fails (MemberError says so; "resend" tries again)."""
    with transaction.atomic():
        membership, created = membership_add(tenant=tenant, email=email, role=role, actor=actor)
        if groups is not None:
            member_groups_set(membership=membership, groups=groups, actor=actor)
        if staff:
            member_staff_set(membership=membership, staff=True, platform=platform, actor=actor)
    if send:
        invitation_send(membership=membership, by=by, base_url=base_url, actor=actor)
    return membership, created


def invitation_accept(*, membership: Membership, password: str) -> User:
    """Set the invited person's password (the link dies with it)."""
    user = membership.user
    with transaction.atomic():
        user.set_password(password)
        user.save(update_fields=["password"])
    return user


# --- tenants --------------------------------------------------------------------------------


TENANT_SETTINGS = (
    "name",
    "time_zone",
    "invitation_domains",
    "expiry_may_approve",
    "audit_retention_days",
    "ai_summaries",
)


def tenant_settings_set(*, tenant: Tenant, actor: str, **values) -> list[str]:
    """Change what a tenant's admin sets of their tenant (TENANT_SETTINGS); return the names
    changed. Audited as tenant.settings_changed with the old and new values."""
    unknown = set(values) - set(TENANT_SETTINGS)
    if unknown:
        raise ValueError(f"Not a tenant setting: {', '.join(sorted(unknown))}.")
    with transaction.atomic():
        locked = Tenant.objects.select_for_update().get(pk=tenant.pk)
        changed = {
            name: [getattr(locked, name), value]
            for name, value in values.items()
            if getattr(locked, name) != value
        }
        if not changed:
            return []
        for name, (_, value) in changed.items():
            setattr(locked, name, value)
            setattr(tenant, name, value)
        locked.full_clean(exclude=["slug"])
        locked.save(update_fields=list(changed))
        _audit(tenant=locked, actor=actor, action="tenant.settings_changed", changed=changed)
    return list(changed)


def tenant_active_set(*, tenant: Tenant, active: bool, actor: str) -> bool:
    """Deactivate or reactivate a tenant; False when it already was. An inactive tenant's
    tokens are refused, its agents answer that it is deactivated (a2a_endpoint) and its
    members reach none of its pages; nothing of it is deleted."""
    with transaction.atomic():
        locked = Tenant.objects.select_for_update().get(pk=tenant.pk)
        if locked.active == active:
            return False
        locked.active = active
        locked.deactivated_at = None if active else timezone.now()
        locked.deactivated_by = "" if active else actor
        # save(), not update(): its post_save clears this process's token and agent caches
        # (tenants.apps, a2a_endpoint.apps); other processes within LOOKUP_CACHE_SECONDS.
        locked.save(update_fields=["active", "deactivated_at", "deactivated_by"])
        _audit(
            tenant=locked,
            actor=actor,
            action="tenant.reactivated" if active else "tenant.deactivated",
        )
    tenant.active, tenant.deactivated_at, tenant.deactivated_by = (
        locked.active,
        locked.deactivated_at,
        locked.deactivated_by,
    )
    return True


# Out of office: at most this far ahead (a year), so that a typo does not hide someone forever.
AWAY_MAX_DAYS = 366


def away_problem(
    *, membership: Membership, until, starts=None, delegate: Membership | None = None
) -> tuple[str, str] | None:
    """What is wrong with setting ``membership`` away (a form's field, ``until`` or
    ``delegate``, and why), or None: what away_set refuses, for a form to say beside its
    field first (Django admin's Members)."""
    now = timezone.now()
    starts = starts or now
    if until <= starts or until <= now:
        return "until", "until must come after from, and after now."
    if until - now > timedelta(days=AWAY_MAX_DAYS):
        return "until", f"Away for at most {AWAY_MAX_DAYS} days."
    if delegate is not None:
        if delegate.tenant_id != membership.tenant_id:
            return "delegate", "The delegate must be a member of the same tenant."
        if delegate.pk == membership.pk:
            return "delegate", "A member cannot be their own delegate."
        if not delegate.can_decide:
            return (
                "delegate",
                "The delegate must be a member who may decide (an operator or admin).",
            )
    return None


def away_set(
    *,
    membership: Membership,
    until,
    starts=None,
    delegate: Membership | None = None,
    actor: str,
) -> Membership:
    """The member is away from ``starts`` (now unless told) until ``until``, with an optional
    ``delegate`` (a member of the same tenant who may decide: the notifications that would
    reach the member reach them; delegation never widens what anyone may decide). Set by the
    member or by a tenant admin (``actor``); audited. Raises MemberError saying what is
    wrong, and changes nothing then."""
    now = timezone.now()
    starts = starts or now
    problem = away_problem(membership=membership, until=until, starts=starts, delegate=delegate)
    if problem:
        raise MemberError(problem[1])
    Membership.objects.filter(pk=membership.pk).update(
        away_from=starts, away_until=until, delegate=delegate
    )
    membership.away_from, membership.away_until, membership.delegate = starts, until, delegate
    _audit(
        tenant=membership.tenant,
        actor=actor,
        action="member.away",
        member=membership.user.email,
        away_from=starts.isoformat(),
        away_until=until.isoformat(),
        delegate=delegate.user.email if delegate else None,
    )
    return membership


def away_clear(*, membership: Membership, actor: str) -> Membership:
    """The member is back (no longer away, no delegate); audited when they were set away."""
    if membership.away_until is None and membership.delegate_id is None:
        return membership
    Membership.objects.filter(pk=membership.pk).update(
        away_from=None, away_until=None, delegate=None
    )
    membership.away_from = membership.away_until = membership.delegate = None
    _audit(
        tenant=membership.tenant, actor=actor, action="member.back", member=membership.user.email
    )
    return membership
