from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.utils.functional import SimpleLazyObject

from tenants.selectors import membership_current, memberships_for_user

SESSION_KEY = "countersign_tenant"


class CurrentTenantMiddleware:
    """Give each request of a logged-in person ``request.membership`` and
    ``request.memberships`` (lazy).

    The tenant comes from the session (the tenant switcher) and falls back to the person's
    first membership. Nothing is queried unless a view asks, so the A2A endpoint, which
    identifies callers by bearer token, pays nothing for it.
    """

    async_capable = True
    sync_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        if iscoroutinefunction(self.get_response):
            markcoroutinefunction(self)

    def _attach(self, request) -> None:
        def authenticated():
            user = getattr(request, "user", None)
            return user if user is not None and user.is_authenticated else None

        def listed():
            user = authenticated()
            return memberships_for_user(user=user) if user else []

        def load():
            user = authenticated()
            if user is None:
                return None
            return membership_current(
                user=user,
                slug=request.session.get(SESSION_KEY),
                memberships=list(request.memberships),
            )

        # One read of the person's memberships per request, for the current one and for
        # the tenant switcher every page shows (tenants.context_processors).
        request.memberships = SimpleLazyObject(listed)
        request.membership = SimpleLazyObject(load)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self.__acall__(request)
        self._attach(request)
        return self.get_response(request)

    async def __acall__(self, request):
        self._attach(request)
        return await self.get_response(request)
