"""Push notifications (A2A §4.3): configs, deliveries and the tenant's push settings."""
