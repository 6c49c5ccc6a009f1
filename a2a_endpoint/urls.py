from django.urls import path

from a2a_endpoint import files, views

app_name = "a2a"
urlpatterns = [
    path("<slug:tenant>/<slug:agent>", views.endpoint, name="endpoint"),
    # Some clients post to the interface URL with a trailing slash.
    path("<slug:tenant>/<slug:agent>/", views.endpoint),
    path("<slug:tenant>/<slug:agent>/.well-known/agent-card.json", views.card, name="card"),
    path("<slug:tenant>/<slug:agent>/files/<str:token>", files.download, name="file"),
]
