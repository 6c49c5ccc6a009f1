from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    verbose_name = "Notifications"
    default_auto_field = "django.db.models.BigAutoField"
    # Fields holding secret_encrypt() output, for `manage.py rotate_secrets`.
    encrypted_fields = {"Channel": ("url_encrypted", "signing_secret_encrypted")}

    def ready(self) -> None:
        from notifications.follow_ups import interaction_changed_received
        from notifications.services import interaction_opened_received
        from runtime.decisions.decision_models import Interaction
        from runtime.kernel.signals import interaction_changed, interaction_opened

        interaction_opened.connect(
            interaction_opened_received, sender=Interaction, dispatch_uid="notifications-opened"
        )
        interaction_changed.connect(
            interaction_changed_received, sender=Interaction, dispatch_uid="notifications-changed"
        )
