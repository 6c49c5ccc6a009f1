"""The core's Django admin, one module per concern; Django's autodiscovery imports this
package, and importing each module registers its model admins."""

from runtime.admin import (  # noqa: F401  (each registers its models' admin)
    agent_admin,
    credential_admin,
    push_admin,
    record_admin,
    token_admin,
    toolserver_admin,
)
