from django.urls import path

from integrations import email_views, slack_views

app_name = "integrations"
urlpatterns = [
    path(
        "slack/<slug:tenant_slug>/interactions",
        slack_views.slack_interactions,
        name="slack_interactions",
    ),
    # A link on its way back from sign-in or re-authentication: the token is in the
    # session, not in this URL (nor in the ``next=`` that leads here).
    path("email/pending", email_views.email_link_pending, name="email_link_pending"),
    # A token in a path: anything but a slash or a NUL (a NUL names nothing: 404).
    path(
        "email/<str:token>/<str:action>",
        email_views.email_link_page,
        name="email_link",
    ),
]
