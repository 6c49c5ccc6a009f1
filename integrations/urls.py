from django.urls import path

from integrations import email_views, slack_views

app_name = "integrations"
urlpatterns = [
    path(
        "slack/<slug:tenant_slug>/interactions",
        slack_views.slack_interactions,
        name="slack_interactions",
    ),
    # A token in a path: anything but a slash or a NUL (a NUL names nothing: 404).
    path(
        "email/<str:token>/<str:action>",
        email_views.email_link_page,
        name="email_link",
    ),
]
