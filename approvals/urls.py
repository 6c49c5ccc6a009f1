from django.urls import path

from approvals import api, views

app_name = "approvals"
urlpatterns = [
    path("inbox/", views.inbox, name="inbox"),
    path("inbox/fragment", views.inbox_fragment, name="inbox_fragment"),
    path("inbox/<str:public_id>/", views.interaction_detail, name="interaction"),
    path("effects/<str:public_id>/", views.effect_detail, name="effect"),
    path("tasks/", views.tasks, name="tasks"),
    path("tasks/<str:public_id>/", views.task_detail, name="task"),
    path(
        "tasks/<str:public_id>/artifacts/<str:artifact_id>",
        views.artifact_download,
        name="artifact_download",
    ),
    path("audit/", views.audit, name="audit"),
    path("api/v1/interactions", api.interaction_list, name="api_interactions"),
    path("api/v1/interactions/<str:public_id>", api.interaction_detail, name="api_interaction"),
    path(
        "api/v1/interactions/<str:public_id>/answer",
        api.interaction_answer_view,
        name="api_interaction_answer",
    ),
]
