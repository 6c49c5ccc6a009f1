from django.urls import path

from integrations.email import views

# Under /integrations/email/, in the ``integrations`` namespace (integrations.urls).
urlpatterns = [
    # A link on its way back from sign-in or re-authentication: the token is in the
    # session, not in this URL (nor in the ``next=`` that leads here).
    path("pending", views.email_link_pending, name="email_link_pending"),
    # A token in a path: anything but a slash or a NUL (a NUL names nothing: 404).
    path("<str:token>/<str:action>", views.email_link_page, name="email_link"),
]
