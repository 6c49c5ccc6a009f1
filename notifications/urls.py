from django.urls import path

from notifications import views

app_name = "notifications"
urlpatterns = [
    path("", views.settings_page, name="settings"),
    path("me", views.preferences, name="preferences"),
    path("channels/new", views.channel_new, name="channel_new"),
    path("channels/<str:public_id>/", views.channel_edit, name="channel_edit"),
    path("channels/<str:public_id>/delete", views.channel_remove, name="channel_delete"),
    path("channels/<str:public_id>/rotate", views.channel_rotate, name="channel_rotate"),
    path("channels/<str:public_id>/test", views.channel_test_view, name="channel_test"),
]
