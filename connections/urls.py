from django.urls import path

from connections import views

app_name = "connections"
urlpatterns = [
    path("", views.index, name="index"),
    # One callback for every app, so that each provider needs one redirect URI registered.
    path("oauth/callback", views.oauth_callback, name="oauth_callback"),
    path("<slug:slug>/token", views.connect_token, name="connect_token"),
    path("<slug:slug>/oauth", views.oauth_start, name="oauth_start"),
    path("<slug:slug>/disconnect", views.disconnect, name="disconnect"),
]
