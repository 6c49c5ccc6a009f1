from django.apps import AppConfig


class A2aEndpointConfig(AppConfig):
    name = "a2a_endpoint"

    def ready(self) -> None:
        from a2a_endpoint import push
        from runtime.models import TaskEvent
        from runtime.signals import task_event_written

        task_event_written.connect(
            push.queue_deliveries, sender=TaskEvent, dispatch_uid="push-queue"
        )
