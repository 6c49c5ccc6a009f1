from django.apps import AppConfig


class IntegrationsConfig(AppConfig):
    """Decisions where people are: the tenant's Slack app (buttons and modals) and e-mail's
    one-time links. Each is a thin edge over the one decision flow (runtime.decisions.flow)."""

    name = "integrations"
    verbose_name = "Slack and e-mail decisions"
    default_auto_field = "django.db.models.BigAutoField"
    # Fields holding secret_encrypt() output, for `manage.py rotate_secrets`.
    encrypted_fields = {"SlackApp": ("bot_token_encrypted", "signing_secret_encrypted")}
