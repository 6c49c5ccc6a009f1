"""Celery tasks of the mediums (the Slack app's clicks): thin, they take ids and the click, and
call one service.

Nothing imports this module: integrations.slack.interactivity queues its tasks by name
(config.celery.task_enqueue)."""

from celery import shared_task

from integrations.slack.api import SlackFailed
from integrations.slack.decide import slack_app_tell, slack_click_take


@shared_task(bind=True, acks_late=True, ignore_result=True, max_retries=3)
def slack_decide(self, tenant_id: int, click: dict) -> None:
    """A click or a modal's submission: the decision through the flow, and the clicker told
    if it was refused. Tried again when Slack could not say who clicked (a second run of a
    decision that was taken is refused by the flow as decided already: nothing twice)."""
    try:
        slack_click_take(tenant_id=tenant_id, click=click)
    except SlackFailed as exc:
        if exc.final or self.request.is_eager:
            raise
        raise self.retry(countdown=5) from None


@shared_task(ignore_result=True)
def slack_reply(tenant_id: int, channel_id: str, user_id: str, text: str) -> None:
    slack_app_tell(tenant_id=tenant_id, channel_id=channel_id, user_id=user_id, text=text)
