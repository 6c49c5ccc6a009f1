"""Access helpers for operator pages: who may see and who may decide in a tenant."""

from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import render
from django.utils import timezone

from tenants.models import Membership


def member_required(view):
    """Log-in required, and a membership in an active tenant; the view gets request.membership."""

    @login_required
    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if not request.membership:
            return render(request, "tenants/no_tenant.html", status=403)
        # The pages show times in the tenant's time zone.
        with timezone.override(request.membership.tenant.zone):
            return view(request, *args, **kwargs)

    return wrapper


def require_decider(membership) -> None:
    """Viewers see but cannot decide."""
    if not membership.can_decide:
        raise PermissionDenied("Viewers can see but not decide.")


def require_admin(membership) -> None:
    """A tenant's settings (its notification channels, its Slack app) are its admins' to change."""
    if membership.role != Membership.Role.ADMIN:
        raise PermissionDenied("Only the tenant's admins manage notification channels.")
