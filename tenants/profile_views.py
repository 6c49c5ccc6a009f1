"""A member's own profile page (``/me/``, "My profile" in the account menu): their out of
office, "away from ... until ..." with an optional delegate (a member of the same tenant who
may decide), and "I'm back". The same service as ``/api/v1/me/away`` and ``manage.py
members away|back`` (tenants.services.away_set, away_clear: audited as member.away and
member.back); times are read in the tenant's time zone, as the pages show them."""

from django import forms
from django.contrib import messages
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from tenants.access import member_required
from tenants.models import Membership
from tenants.services import MemberError, away_clear, away_set

LOCAL = "%Y-%m-%dT%H:%M"


class DelegateField(forms.ModelChoiceField):
    """A select of members who may stand in, each named by e-mail and role."""

    def label_from_instance(self, obj) -> str:
        return f"{obj.user.email} ({obj.get_role_display()})"


def delegates_for(membership: Membership):
    """Who may be ``membership``'s delegate: their tenant's active operators and admins,
    never themselves."""
    return (
        Membership.objects.filter(
            tenant_id=membership.tenant_id,
            role__in=(Membership.Role.ADMIN, Membership.Role.OPERATOR),
            user__is_active=True,
        )
        .exclude(pk=membership.pk)
        .select_related("user")
        .order_by("user__email")
    )


class AwayForm(forms.Form):
    away_from = forms.DateTimeField(
        label="Away from",
        required=False,
        input_formats=[LOCAL],
        help_text="Empty: from now.",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format=LOCAL),
    )
    away_until = forms.DateTimeField(
        label="Until",
        input_formats=[LOCAL],
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format=LOCAL),
    )
    delegate = DelegateField(
        label="Delegate (optional)",
        queryset=Membership.objects.none(),
        required=False,
        empty_label="Nobody: the other approvers are told",
        help_text="What would reach you reaches them meanwhile. They decide with their own "
        "rights, never wider ones.",
    )

    def __init__(self, *args, membership: Membership, **kwargs):
        super().__init__(*args, **kwargs)
        field = self.fields["delegate"]
        assert isinstance(field, DelegateField)
        field.queryset = delegates_for(membership)


def _away_form(membership: Membership, data=None) -> AwayForm:
    initial = {}
    if membership.away_until is not None:
        zone = timezone.get_current_timezone()
        initial = {
            "away_from": membership.away_from.astimezone(zone) if membership.away_from else None,
            "away_until": membership.away_until.astimezone(zone),
            "delegate": membership.delegate_id,
        }
    return AwayForm(data, initial=initial, membership=membership)


def _profile(request, *, form: AwayForm | None = None, status: int = 200):
    membership = request.membership
    context = {
        "nav": "profile",
        "membership": membership,
        "away_now": membership.away_at(),
        "away_set": membership.away_until is not None and membership.away_until > timezone.now(),
        "delegate": membership.delegate.user.email if membership.delegate_id else "",
        "form": form or _away_form(membership),
        "zone": request.membership.tenant.zone,
    }
    return render(request, "tenants/profile.html", context, status=status)


@require_http_methods(["GET"])
@member_required
def profile(request):
    return _profile(request)


@require_POST
@member_required
def profile_away(request):
    """Set the signed-in member's own out of office; a wrong value is an error beside its
    field, and nothing changes."""
    membership = request.membership
    form = _away_form(membership, request.POST)
    if not form.is_valid():
        return _profile(request, form=form, status=400)
    data = form.cleaned_data
    try:
        away_set(
            membership=membership,
            until=data["away_until"],
            starts=data.get("away_from"),
            delegate=data.get("delegate"),
            actor=request.user.subject,
        )
    except MemberError as exc:
        text = str(exc)
        form.add_error("delegate" if "delegate" in text.lower() else "away_until", text)
        return _profile(request, form=form, status=400)
    until = timezone.localtime(membership.away_until)
    delegate = data.get("delegate")
    messages.success(
        request,
        f"You are away until {until:%Y-%m-%d %H:%M}"
        + (f"; {delegate.user.email} is told instead." if delegate else "."),
    )
    return redirect("profile")


@require_POST
@member_required
def profile_back(request):
    """I'm back: the member's out of office ends now."""
    away_clear(membership=request.membership, actor=request.user.subject)
    messages.success(request, "Welcome back: you are told of items again.")
    return redirect("profile")
