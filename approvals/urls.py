from django.urls import path

from approvals import views

app_name = "approvals"
urlpatterns = [
    path("inbox/", views.inbox, name="inbox"),
    path("tasks/", views.tasks, name="tasks"),
    path("audit/", views.audit, name="audit"),
]
