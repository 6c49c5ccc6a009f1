"""The A2A bodies of push deliveries, which the core's delivery (runtime.kernel.push.push_delivery)
posts: the event as the wire says it, in the dialect the config was registered in."""

from django.conf import settings

from a2a_endpoint.files import files_base, linker
from a2a_endpoint.wire import event_wire
from a2a_endpoint.wire03 import push_body_out


def push_body(config, event) -> dict:
    """``event`` as a StreamResponse for a 1.0 config, as the Task for a 0.3 one, with the
    data of the extensions the config's request activated."""
    # Download links in artifacts are absolute only with PUBLIC_BASE_URL (there is no
    # request to take a host from); a receiver can always GetTask for fresh ones.
    link = linker(
        config.task,
        lambda: files_base(settings.PUBLIC_BASE_URL, config.tenant.slug, config.task.agent.slug),
    )
    result = event_wire(event.payload, frozenset(config.activated), link)
    if config.dialect == "0.3":
        # A config registered in 0.3 gets 0.3 bodies (no 0.3 receiver reads a 1.0
        # StreamResponse): the Task as of the event, as the a2a-sdk's 0.3 servers send.
        return push_body_out(result, event.state)
    return result
