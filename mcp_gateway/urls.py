from django.urls import path

from mcp_gateway import views

app_name = "mcp_gateway"

urlpatterns = [path("", views.gateways, name="gateways")]
