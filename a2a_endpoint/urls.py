from django.urls import path, re_path

from a2a_endpoint import files, rest, views

app_name = "a2a"
urlpatterns = [
    path("<slug:tenant>/<slug:agent>", views.endpoint, name="endpoint"),
    # Some clients post to the interface URL with a trailing slash.
    path("<slug:tenant>/<slug:agent>/", views.endpoint),
    path("<slug:tenant>/<slug:agent>/.well-known/agent-card.json", views.card, name="card"),
    # 0.2.5's card path: the card in the 0.x shape (a2a_endpoint.dialect03).
    path(
        "<slug:tenant>/<slug:agent>/.well-known/agent.json",
        views.card,
        {"legacy": True},
        name="card-legacy",
    ),
    path("<slug:tenant>/<slug:agent>/files/<str:token>", files.download, name="file"),
    # The HTTP+JSON binding (A2A §11) on the same agent URL: /message:send, /tasks/{id}, ...
    re_path(
        rf"^(?P<tenant>[-a-zA-Z0-9_]+)/(?P<agent>[-a-zA-Z0-9_]+)(?P<route>{rest.PATHS})$",
        rest.endpoint,
        name="rest",
    ),
]
