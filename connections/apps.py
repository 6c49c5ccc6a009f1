from django.apps import AppConfig


class ConnectionsConfig(AppConfig):
    name = "connections"
