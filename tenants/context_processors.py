from tenants.selectors import memberships_for_user


def current_tenant(request) -> dict:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    membership = getattr(request, "membership", None)
    membership = membership if membership else None
    return {
        "current_membership": membership,
        "current_tenant": membership.tenant if membership else None,
        # The list the middleware read for the current membership (a request that did not
        # pass through it reads its own).
        "memberships": (
            list(request.memberships)
            if hasattr(request, "memberships")
            else memberships_for_user(user=user)
        ),
    }
