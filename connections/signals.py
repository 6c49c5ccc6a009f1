"""Signals this app sends, so that the runtime can react without this app importing it."""

from django.dispatch import Signal

# Sent after the transaction that connected an app for a tenant committed (sender: the
# Connection class; kwargs: tenant, app (the app's slug), by (the operator's subject)). The
# runtime answers the tenant's open connection interactions for that app (runtime.receivers).
app_connected = Signal()
