from django.apps import AppConfig


class A2aEndpointConfig(AppConfig):
    name = "a2a_endpoint"
