from tenants.models import Membership, Tenant


def memberships_for_user(*, user) -> list[Membership]:
    return list(Membership.objects.filter(user=user, tenant__active=True).select_related("tenant"))


def membership_current(
    *, user, slug: str | None, memberships: list[Membership] | None = None
) -> Membership | None:
    """The membership the person works in now: the switched-to tenant, else the first;
    among ``memberships`` when the caller has read them (memberships_for_user)."""
    if memberships is None:
        memberships = memberships_for_user(user=user)
    for membership in memberships:
        if membership.tenant.slug == slug:
            return membership
    return memberships[0] if memberships else None


def tenant_by_slug(*, slug: str) -> Tenant | None:
    return Tenant.objects.filter(slug=slug, active=True).first()
