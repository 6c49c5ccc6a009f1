from django.urls import path

from connections import views

app_name = "connections"
urlpatterns = [
    path("", views.index, name="index"),
]
