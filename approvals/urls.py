from django.urls import path, register_converter

from approvals import (
    api,
    audit_views,
    bulk_views,
    deadline_api,
    deadline_views,
    decision_views,
    group_api,
    inbox_views,
    rule_views,
    task_stop,
    task_views,
)


class PublicIdConverter:
    """A public id in a path: any text but a slash or a NUL.

    Ids are opaque text, so ``str`` would do, but a NUL reaching PostgreSQL is a DataError (a
    500): a path holding one names nothing, and is answered 404 by not matching at all.
    """

    regex = "[^/\x00]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(PublicIdConverter, "public_id")

app_name = "approvals"
urlpatterns = [
    path("inbox/", inbox_views.inbox, name="inbox"),
    path("inbox/fragment", inbox_views.inbox_fragment, name="inbox_fragment"),
    path("inbox/bulk", bulk_views.inbox_bulk, name="inbox_bulk"),
    path("inbox/<public_id:public_id>/", decision_views.interaction_detail, name="interaction"),
    path(
        "inbox/<public_id:public_id>/extend",
        deadline_views.interaction_extend_page,
        name="interaction_extend",
    ),
    path("effects/<public_id:public_id>/", decision_views.effect_detail, name="effect"),
    path("tasks/", task_views.tasks, name="tasks"),
    path("tasks/<public_id:public_id>/", task_views.task_detail, name="task"),
    path("tasks/<public_id:public_id>/cancel", task_stop.task_stop_page, name="task_cancel"),
    path(
        "tasks/<public_id:public_id>/artifacts/<public_id:artifact_id>",
        task_views.artifact_download,
        name="artifact_download",
    ),
    path("audit/", audit_views.audit, name="audit"),
    path("audit/receipts.csv", audit_views.audit_export, {"fmt": "csv"}, name="audit_export_csv"),
    path(
        "audit/receipts.jsonl",
        audit_views.audit_export,
        {"fmt": "jsonl"},
        name="audit_export_jsonl",
    ),
    path("rules/", rule_views.rules, name="rules"),
    path("rules/<public_id:public_id>/revoke", rule_views.rule_revoke_view, name="rule_revoke"),
    path("api/v1/interactions", api.interaction_list, name="api_interactions"),
    path(
        "api/v1/interactions/<public_id:public_id>", api.interaction_detail, name="api_interaction"
    ),
    path(
        "api/v1/interactions/<public_id:public_id>/answer",
        api.interaction_answer_view,
        name="api_interaction_answer",
    ),
    path(
        "api/v1/interactions/<public_id:public_id>/extend",
        deadline_api.interaction_extend_view,
        name="api_interaction_extend",
    ),
    path("api/v1/groups/<public_id:public_id>", group_api.group_detail, name="api_group"),
    path(
        "api/v1/groups/<public_id:public_id>/answer",
        group_api.group_answer_view,
        name="api_group_answer",
    ),
    path(
        "api/v1/tasks/<public_id:public_id>/cancel",
        task_stop.task_cancel_api,
        name="api_task_cancel",
    ),
    path("api/v1/rules", api.rule_list, name="api_rules"),
    path("api/v1/rules/<public_id:public_id>/revoke", api.rule_revoke_view, name="api_rule_revoke"),
]
