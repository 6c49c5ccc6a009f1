"""The runtime's receivers of other apps' signals (connected in RuntimeConfig.ready)."""

from runtime.decisions.flow import interactions_connect_app


def app_connected_received(sender, *, tenant, app: str, by: str, **kwargs) -> None:
    """A tenant connected an app: answer its open connection interactions; tasks resume."""
    interactions_connect_app(tenant=tenant, app=app, by=by)
