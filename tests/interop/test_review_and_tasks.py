"""Flow 2 (a question answered on the same task), ListTasks, CancelTask and the typed errors,
through the a2a-sdk client."""

from datetime import timedelta

import pytest
from a2a.types import TaskPushNotificationConfig, TaskState
from a2a.utils.errors import (
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from runtime.decisions.decision_models import Interaction
from runtime.kernel import extensions as ext
from runtime.kernel.task_models import Task
from tenants.models import Tenant
from tenants.tokens import api_token_create
from tests.sdk_client import Partner, as_dict, status_text, user_message

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "Which base branch should I compare this diff against?"


def ask_for_review(partner, agents, **kw):
    task = partner.send(
        agents["code-reviewer"], user_message("Review this diff of payments-api"), **kw
    )
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    return task


def test_question_is_answered_on_the_same_task_and_the_review_names_the_base(partner, agents):
    task = ask_for_review(partner, agents, extensions=[ext.INTERACTIONS])
    assert status_text(task) == QUESTION
    pause = as_dict(task.status.message)["metadata"][ext.INTERACTIONS]
    assert pause["kind"] == "question" and pause["prompt"] == QUESTION

    done = partner.send(
        agents["code-reviewer"],
        user_message("release/2026.10", task_id=task.id, context_id=task.context_id),
    )
    assert (done.id, done.context_id) == (task.id, task.context_id)
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert "release/2026.10" in status_text(done)
    [artifact] = done.artifacts
    assert artifact.name == "review.json"
    assert as_dict(artifact.parts[0])["data"]["base"] == "release/2026.10"
    texts = [p.text for m in done.history for p in m.parts if p.text]
    assert texts[:3] == ["Review this diff of payments-api", QUESTION, "release/2026.10"]


def test_question_without_the_extension_is_plain_text(partner, agents):
    task = ask_for_review(partner, agents)
    assert status_text(task) == QUESTION
    assert not task.status.message.metadata
    assert ext.INTERACTIONS not in list(task.status.message.extensions)


def test_answer_with_another_context_id_is_invalid_params(partner, agents):
    task = ask_for_review(partner, agents)
    with pytest.raises(InvalidParamsError):
        partner.send(
            agents["code-reviewer"], user_message("main", task_id=task.id, context_id="elsewhere")
        )


def test_list_tasks_filters_by_context_status_and_timestamp(partner, agents):
    support = agents["support"]
    first = partner.send(support, user_message("one"))
    partner.send(support, user_message("two", context_id=first.context_id))
    other = partner.send(support, user_message("three"))
    waiting = ask_for_review(partner, agents)

    in_context = partner.list(support, context_id=first.context_id)
    assert in_context.total_size == 2
    assert {t.context_id for t in in_context.tasks} == {first.context_id}

    everything = partner.list(support)
    assert everything.total_size == 3
    assert other.id in {t.id for t in everything.tasks}
    assert waiting.id not in {t.id for t in everything.tasks}  # ListTasks is per agent

    reviewer = agents["code-reviewer"]
    asking = partner.list(reviewer, status=TaskState.TASK_STATE_INPUT_REQUIRED)
    assert [t.id for t in asking.tasks] == [waiting.id]
    assert partner.list(reviewer, status=TaskState.TASK_STATE_COMPLETED).total_size == 0

    cutoff = Task.objects.get(public_id=other.id).status_timestamp
    later = partner.list(support, status_timestamp_after=cutoff)
    assert [t.id for t in later.tasks] == [other.id]
    empty = partner.list(support, status_timestamp_after=cutoff + timedelta(seconds=1))
    assert (empty.total_size, list(empty.tasks)) == (0, [])


def test_list_tasks_pages_with_tokens_and_includes_artifacts_on_request(partner, agents):
    support = agents["support"]
    sent = {partner.send(support, user_message(f"question {i}")).id for i in range(5)}

    seen, token, pages = [], "", 0
    while True:
        page = partner.list(support, page_size=2, page_token=token)
        assert page.total_size == 5
        seen += [t.id for t in page.tasks]
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert pages == 3
    assert len(seen) == 5 and set(seen) == sent

    reviewer = agents["code-reviewer"]
    task = ask_for_review(partner, agents)
    partner.send(reviewer, user_message("main", task_id=task.id, context_id=task.context_id))
    assert not partner.list(reviewer).tasks[0].artifacts
    [listed] = partner.list(reviewer, include_artifacts=True).tasks
    assert [a.name for a in listed.artifacts] == ["review.json"]

    with pytest.raises(InvalidParamsError):
        partner.list(support, page_token="not-a-token")
    with pytest.raises(InvalidParamsError):
        partner.list(support, page_size=101)


def test_cancel_closes_the_question_and_a_terminal_task_takes_no_answer(partner, agents):
    reviewer = agents["code-reviewer"]
    task = ask_for_review(partner, agents)
    canceled = partner.cancel(reviewer, task.id)
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert partner.cancel(reviewer, task.id).status.state == TaskState.TASK_STATE_CANCELED
    assert Interaction.objects.get(task__public_id=task.id).state == Interaction.State.CANCELED
    with pytest.raises(UnsupportedOperationError):
        partner.send(reviewer, user_message("main", task_id=task.id, context_id=task.context_id))


def test_cancel_of_a_completed_task_is_not_cancelable(partner, agents):
    done = partner.send(agents["support"], user_message("hello"))
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    with pytest.raises(TaskNotCancelableError):
        partner.cancel(agents["support"], done.id)


def test_unknown_tasks_are_task_not_found(partner, agents):
    support = agents["support"]
    with pytest.raises(TaskNotFoundError):
        partner.get(support, "t1.nosuchtask")
    with pytest.raises(TaskNotFoundError):
        partner.cancel(support, "t1.nosuchtask")
    with pytest.raises(TaskNotFoundError):
        partner.send(support, user_message("hi", task_id="t1.nosuchtask"))


def test_another_partners_task_is_not_found(partner, agents, live_stack, demo):
    task = partner.send(agents["support"], user_message("mine"))
    _, token = api_token_create(
        tenant=Tenant.objects.get(slug=demo["tenant"]), subject="partner:someone-else", name="x"
    )
    stranger = Partner(live_stack.url, token)
    try:
        with pytest.raises(TaskNotFoundError):
            stranger.get(agents["support"], task.id)
        with pytest.raises(TaskNotFoundError):
            stranger.cancel(agents["support"], task.id)
        assert stranger.list(agents["support"]).total_size == 0
    finally:
        stranger.close()


def test_message_to_a_terminal_task_is_unsupported(partner, agents):
    done = partner.send(agents["support"], user_message("hello"))
    with pytest.raises(UnsupportedOperationError):
        partner.send(
            agents["support"], user_message("more", task_id=done.id, context_id=done.context_id)
        )


def test_bad_params_are_invalid_params(partner, agents):
    with pytest.raises(InvalidParamsError):
        partner.send(agents["support"], user_message("hi", metadata={"skillId": "no-such-skill"}))
    with pytest.raises(InvalidParamsError):
        partner.send(agents["support"], user_message("hi", context_id="not a context id!"))
    done = partner.send(agents["support"], user_message("hello"))
    with pytest.raises(InvalidParamsError):
        partner.get(agents["support"], done.id, history_length=-1)


def test_push_config_for_an_unknown_task_is_task_not_found(partner, agents):
    client = partner.client(agents["support"])
    config = TaskPushNotificationConfig(task_id="t1.x", url="https://example.test/hook")
    with pytest.raises(TaskNotFoundError):
        partner.run(client.create_task_push_notification_config(config))


def test_answer_retried_with_the_same_message_id_returns_the_same_task(partner, agents):
    reviewer = agents["code-reviewer"]
    task = ask_for_review(partner, agents)
    reply = user_message("main", task_id=task.id, context_id=task.context_id)
    first = partner.send(reviewer, reply)
    again = partner.send(reviewer, reply)
    assert again.id == first.id == task.id
    assert again.status.state == TaskState.TASK_STATE_COMPLETED
    ids = [m.message_id for m in partner.get(reviewer, task.id).history]
    assert ids.count(reply.message_id) == 1
    assert Interaction.objects.get(task__public_id=task.id).answer == {"value": "main"}
