"""The mediums in Django admin: each folder registers its own (imported here, where Django's
autodiscovery looks)."""

from integrations.email import admin as email_admin
from integrations.slack import admin as slack_admin

__all__ = ["email_admin", "slack_admin"]
