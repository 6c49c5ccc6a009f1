from django.urls import include, path

# Each medium's own pages and endpoints, under /integrations/<medium>/.
app_name = "integrations"
urlpatterns = [
    path("slack/", include("integrations.slack.urls")),
    path("email/", include("integrations.email.urls")),
]
