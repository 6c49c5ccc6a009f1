from django.shortcuts import render
from django.views.decorators.http import require_GET

from tenants.access import member_required


@require_GET
@member_required
def inbox(request):
    return render(
        request,
        "approvals/not_built.html",
        {
            "nav": "inbox",
            "title": "Inbox",
            "what": "Approvals, questions, connection requests and uncertain effects waiting for a person will be listed here.",
        },
    )


@require_GET
@member_required
def tasks(request):
    return render(
        request,
        "approvals/not_built.html",
        {
            "nav": "tasks",
            "title": "Tasks",
            "what": "The tenant's A2A tasks, their states over time, plans and artifacts will be listed here.",
        },
    )


@require_GET
@member_required
def audit(request):
    return render(
        request,
        "approvals/not_built.html",
        {
            "nav": "audit",
            "title": "Audit",
            "what": "Every decision taken in this tenant, who took it and when, will be listed here.",
        },
    )
