from django.shortcuts import render
from django.views.decorators.http import require_GET

from tenants.access import member_required


@require_GET
@member_required
def index(request):
    return render(
        request,
        "approvals/not_built.html",
        {
            "nav": "connections",
            "title": "Connections",
            "what": "The apps this tenant's agents may use, and who connected them, will be managed here.",
        },
    )
