from django.apps import AppConfig


def _socket_mode_start(**signal) -> None:
    # Imported here: only a worker needs slack_sdk's Socket Mode client.
    from integrations.slack.socket_mode import socket_mode_start

    socket_mode_start(**signal)


def _socket_mode_stop(**signal) -> None:
    from integrations.slack.socket_mode import socket_mode_stop

    socket_mode_stop(**signal)


class IntegrationsConfig(AppConfig):
    """The notification mediums, one folder each (email/, slack/, teams/, webhook/): how each
    sends (its transport, registered by name in notifications.transports) and, where people
    decide from it (the Slack app's buttons and modals, e-mail's one-time links), a thin edge
    over the one decision flow (runtime.decisions.flow). Their rows keep this one app label."""

    name = "integrations"
    verbose_name = "Slack and e-mail decisions"
    default_auto_field = "django.db.models.BigAutoField"
    # Fields holding secret_encrypt() output, for `manage.py rotate_secrets`.
    encrypted_fields = {
        "SlackApp": ("bot_token_encrypted", "signing_secret_encrypted", "app_token_encrypted")
    }

    def ready(self) -> None:
        from celery.signals import worker_ready, worker_shutdown

        # A worker holds the Socket Mode connections of the tenants' Slack apps that have an
        # app-level token (integrations.slack.socket_mode); a web process holds none.
        worker_ready.connect(_socket_mode_start, weak=False, dispatch_uid="slack-socket-mode")
        worker_shutdown.connect(_socket_mode_stop, weak=False, dispatch_uid="slack-socket-mode")
