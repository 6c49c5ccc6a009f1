from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    verbose_name = "Notifications"
    default_auto_field = "django.db.models.BigAutoField"
    # Fields holding secret_encrypt() output, for `manage.py rotate_secrets`.
    encrypted_fields = {"Channel": ("url_encrypted", "signing_secret_encrypted")}

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from notifications.follow_ups import channels_cache, interaction_changed_received
        from notifications.models import Channel
        from notifications.services import interaction_opened_received
        from runtime.decisions.decision_models import Interaction
        from runtime.kernel.signals import interaction_changed, interaction_opened

        interaction_opened.connect(
            interaction_opened_received, sender=Interaction, dispatch_uid="notifications-opened"
        )
        interaction_changed.connect(
            interaction_changed_received, sender=Interaction, dispatch_uid="notifications-changed"
        )
        # Whether a tenant has channels (follow_ups.tenant_has_channels), cached per process.
        post_save.connect(channels_cache.invalidate, sender=Channel, dispatch_uid="channels-saved")
        post_delete.connect(
            channels_cache.invalidate, sender=Channel, dispatch_uid="channels-deleted"
        )
