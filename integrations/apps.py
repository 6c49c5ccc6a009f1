from django.apps import AppConfig


class IntegrationsConfig(AppConfig):
    """The notification mediums, one folder each (email/, slack/, teams/, webhook/): how each
    sends (its transport, registered by name in notifications.transports) and, where people
    decide from it (the Slack app's buttons and modals, e-mail's one-time links), a thin edge
    over the one decision flow (runtime.decisions.flow). Their rows keep this one app label."""

    name = "integrations"
    verbose_name = "Slack and e-mail decisions"
    default_auto_field = "django.db.models.BigAutoField"
    # Fields holding secret_encrypt() output, for `manage.py rotate_secrets`.
    encrypted_fields = {"SlackApp": ("bot_token_encrypted", "signing_secret_encrypted")}
