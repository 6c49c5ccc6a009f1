from django.urls import path

from integrations.slack import views

# Under /integrations/slack/, in the ``integrations`` namespace (integrations.urls).
urlpatterns = [
    path("<slug:tenant_slug>/interactions", views.slack_interactions, name="slack_interactions"),
]
