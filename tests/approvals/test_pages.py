"""The operator pages: the inbox, deciding on interactions and uncertain effects, tasks, audit."""

import re
from html import unescape
from http import HTTPStatus

import pytest
from django.test import Client
from django.urls import reverse

from runtime.agents.agent_models import DemoRecord
from runtime.decisions.decision_models import Effect, Interaction
from runtime.kernel.task_models import AuditEvent, TaskState
from tests.core import run

pytestmark = pytest.mark.django_db


def detail_url(interaction) -> str:
    return reverse("approvals:interaction", args=[interaction.public_id])


def test_inbox_lists_every_kind_newest_first_with_agent_caller_and_expiry(agents):
    make = agents.a.extra["make"]
    effect = make.uncertain()
    question = make.question()
    connection = make.connection()
    approval = make.approval()
    html = agents.a.client_for(agents.a.viewer).get(reverse("approvals:inbox")).content.decode()
    positions = [
        html.index(f'id="item-{x}"')
        for x in (approval.public_id, connection.public_id, question.public_id, effect.public_id)
    ]
    assert positions == sorted(positions)
    assert "<strong>deployer</strong>" in html and agents.a.subject in html and "expires in" in html
    assert "Did deploy / deploy_build happen?" in html


def test_inbox_filters_by_kind_and_agent(agents):
    make = agents.a.extra["make"]
    approval = make.approval()
    question = make.question()
    client = agents.a.client_for(agents.a.operator)
    html = client.get(reverse("approvals:inbox"), {"kind": "question"}).content.decode()
    assert question.public_id in html and approval.public_id not in html
    html = client.get(reverse("approvals:inbox"), {"agent": "deployer"}).content.decode()
    assert approval.public_id in html and question.public_id not in html
    fragment = client.get(reverse("approvals:inbox_fragment"), {"agent": "deployer"})
    assert approval.public_id in fragment.content.decode()
    assert question.public_id not in fragment.content.decode()


def test_inbox_page_polls_its_fragment_and_works_without_script(agents):
    client = agents.a.client_for(agents.a.operator)
    html = client.get(reverse("approvals:inbox"), {"kind": "approval"}).content.decode()
    assert 'data-fragment-url="/inbox/fragment?kind=approval"' in html
    assert "inbox.js" in html
    assert "Nothing is waiting for a person" in html


def test_approval_page_shows_the_full_arguments_and_the_messages(agents):
    approval = agents.a.extra["make"].approval(build="b-42")
    html = agents.a.client_for(agents.a.operator).get(detail_url(approval)).content.decode()
    assert "&quot;build&quot;: &quot;b-42&quot;" in html
    assert "&quot;environment&quot;: &quot;staging&quot;" in html
    assert "deploy build b-42 to staging" in html
    assert "Approve deploy / deploy_build?" in html
    assert 'value="approve"' in html and 'value="deny"' in html


def test_operator_approves_on_the_page_and_the_turn_sends_the_call(agents):
    approval = agents.a.extra["make"].approval()
    client = agents.a.client_for(agents.a.operator)
    response = client.post(detail_url(approval), {"decision": "approve"})
    assert response.status_code == HTTPStatus.FOUND
    approval.refresh_from_db()
    assert approval.state == Interaction.State.ANSWERED
    assert approval.answer == {"approved": True}
    assert approval.answered_by == f"user:{agents.a.operator.email}"
    assert approval.answered_via == "page"
    event = AuditEvent.objects.get(interaction=approval)
    assert (event.action, event.via, event.actor) == ("approved", "page", approval.answered_by)
    task = run(approval.task)
    assert task.state == TaskState.COMPLETED
    assert DemoRecord.objects.filter(effect_id=approval.public_id).count() == 1
    html = client.get(detail_url(approval)).content.decode()
    assert "Decided" in html and approval.answered_by in html and "page" in html
    assert 'value="approve"' not in html


def test_deny_with_a_reason_reaches_the_model(agents):
    approval = agents.a.extra["make"].approval()
    client = agents.a.client_for(agents.a.admin)
    client.post(detail_url(approval), {"decision": "deny", "reason": "freeze week"})
    approval.refresh_from_db()
    assert approval.answer == {"approved": False, "reason": "freeze week"}
    task = run(approval.task)
    assert task.state == TaskState.COMPLETED
    assert "freeze week" in task.status_message["parts"][0]["text"]
    assert Effect.objects.get(public_id=approval.public_id).state == Effect.State.DENIED
    assert not DemoRecord.objects.exists()


def test_answer_a_question_in_free_text(agents):
    question = agents.a.extra["make"].question()
    client = agents.a.client_for(agents.a.operator)
    html = client.get(detail_url(question)).content.decode()
    assert 'name="custom"' in html and 'type="radio"' not in html
    client.post(detail_url(question), {"decision": "answer", "custom": "main"})
    question.refresh_from_db()
    assert question.answer == {"value": "main"}
    task = run(question.task)
    assert task.state == TaskState.COMPLETED
    assert "against main" in task.status_message["parts"][0]["text"]


def _with_choices(question, allow_custom: bool):
    question.request = {
        **question.request,
        "choices": ["main", "develop"],
        "allowCustom": allow_custom,
    }
    question.save(update_fields=["request"])
    return question


def test_question_choices_are_radio_buttons_and_custom_answers_need_allow_custom(agents):
    question = _with_choices(agents.a.extra["make"].question(), allow_custom=False)
    client = agents.a.client_for(agents.a.operator)
    html = client.get(detail_url(question)).content.decode()
    assert html.count('type="radio"') == 2 and 'name="custom"' not in html
    response = client.post(detail_url(question), {"decision": "answer", "choice": "trunk"})
    assert response.status_code == HTTPStatus.BAD_REQUEST
    response = client.post(detail_url(question), {"decision": "answer", "custom": "trunk"})
    assert response.status_code == HTTPStatus.BAD_REQUEST
    assert "Pick one of the choices." in response.content.decode()
    question.refresh_from_db()
    assert question.state == Interaction.State.OPEN
    client.post(detail_url(question), {"decision": "answer", "choice": "develop"})
    question.refresh_from_db()
    assert question.answer == {"value": "develop"}


def test_question_with_allow_custom_takes_another_answer(agents):
    question = _with_choices(agents.a.extra["make"].question(), allow_custom=True)
    client = agents.a.client_for(agents.a.operator)
    html = client.get(detail_url(question)).content.decode()
    assert html.count('type="radio"') == 2 and 'name="custom"' in html
    client.post(detail_url(question), {"decision": "answer", "custom": "release/7"})
    question.refresh_from_db()
    assert question.answer == {"value": "release/7"}


def test_connection_request_links_to_the_connections_page(agents):
    connection = agents.a.extra["make"].connection()
    html = agents.a.client_for(agents.a.operator).get(detail_url(connection)).content.decode()
    assert f'href="{reverse("connections:index")}#app-github"' in html


def test_bad_input_changes_nothing(agents):
    approval = agents.a.extra["make"].approval()
    client = agents.a.client_for(agents.a.operator)
    for data in (
        {"decision": "approve", "reason": "x" * 1001},
        {"decision": "answer", "custom": "yes"},
        {},
    ):
        assert client.post(detail_url(approval), data).status_code == HTTPStatus.BAD_REQUEST
    approval.refresh_from_db()
    assert approval.state == Interaction.State.OPEN
    assert not AuditEvent.objects.exists()


def test_viewers_see_but_cannot_decide(agents):
    make = agents.a.extra["make"]
    approval = make.approval()
    effect = make.uncertain()
    client = agents.a.client_for(agents.a.viewer)
    html = client.get(detail_url(approval)).content.decode()
    assert "cannot decide" in html and 'value="approve"' not in html
    assert client.post(detail_url(approval), {"decision": "approve"}).status_code == 403
    effect_url = reverse("approvals:effect", args=[effect.public_id])
    assert 'value="happened"' not in client.get(effect_url).content.decode()
    assert client.post(effect_url, {"resolution": "fail"}).status_code == 403
    approval.refresh_from_db()
    effect.refresh_from_db()
    assert approval.state == Interaction.State.OPEN
    assert effect.state == Effect.State.UNCERTAIN


def test_second_decider_is_told_who_decided_first(agents):
    approval = agents.a.extra["make"].approval()
    first = agents.a.client_for(agents.a.admin)
    second = agents.a.client_for(agents.a.operator)
    second.get(detail_url(approval))  # the second operator has the page open
    first.post(detail_url(approval), {"decision": "deny", "reason": "no"})
    response = second.post(detail_url(approval), {"decision": "approve"})
    assert response.status_code == HTTPStatus.CONFLICT
    html = response.content.decode()
    assert "Someone else decided first." in html
    assert f"user:{agents.a.admin.email}" in html
    approval.refresh_from_db()
    assert approval.answer["approved"] is False
    assert AuditEvent.objects.filter(interaction=approval).count() == 1


def test_every_form_needs_its_csrf_token(agents):
    make = agents.a.extra["make"]
    approval = make.approval()
    effect = make.uncertain()
    client = Client(enforce_csrf_checks=True)
    client.force_login(agents.a.operator)
    assert client.post(detail_url(approval), {"decision": "approve"}).status_code == 403
    effect_url = reverse("approvals:effect", args=[effect.public_id])
    assert client.post(effect_url, {"resolution": "fail"}).status_code == 403
    approval.refresh_from_db()
    assert approval.state == Interaction.State.OPEN
    # The page's own form carries the token, and with it the same post is accepted.
    html = client.get(detail_url(approval)).content.decode()
    assert 'name="csrfmiddlewaretoken"' in html
    token = html.split('name="csrfmiddlewaretoken" value="')[1].split('"')[0]
    response = client.post(
        detail_url(approval), {"decision": "approve", "csrfmiddlewaretoken": token}
    )
    assert response.status_code == HTTPStatus.FOUND


# --- uncertain effects --------------------------------------------------------------------


def effect_url(effect) -> str:
    return reverse("approvals:effect", args=[effect.public_id])


def test_uncertain_effect_that_happened_gives_the_model_its_result(agents):
    effect = agents.a.extra["make"].uncertain()
    client = agents.a.client_for(agents.a.operator)
    assert "It happened" in client.get(effect_url(effect)).content.decode()
    response = client.post(
        effect_url(effect), {"resolution": "happened", "result": '{"deploymentId": "dep-9"}'}
    )
    assert response.status_code == HTTPStatus.FOUND
    effect.refresh_from_db()
    assert effect.state == Effect.State.SUCCEEDED
    assert effect.outcome["result"] == {"deploymentId": "dep-9"}
    task = run(effect.task)
    assert task.state == TaskState.COMPLETED
    assert not DemoRecord.objects.exists()  # the operator said it ran; it is not sent again
    event = AuditEvent.objects.get(action="effect_happened")
    assert (event.actor, event.via) == (f"user:{agents.a.operator.email}", "page")
    html = client.get(effect_url(effect)).content.decode()
    assert "It happened" in html and event.actor in html and 'value="fail"' not in html


def test_uncertain_effect_that_did_not_happen_is_sent_again(agents):
    effect = agents.a.extra["make"].uncertain()
    client = agents.a.client_for(agents.a.operator)
    client.post(effect_url(effect), {"resolution": "not_happened"})
    task = run(effect.task)
    assert task.state == TaskState.COMPLETED
    assert DemoRecord.objects.filter(effect_id=effect.public_id).count() == 1


def test_operator_can_fail_the_task_of_an_uncertain_effect(agents):
    effect = agents.a.extra["make"].uncertain()
    client = agents.a.client_for(agents.a.operator)
    client.post(effect_url(effect), {"resolution": "fail"})
    effect.task.refresh_from_db()
    assert effect.task.state == TaskState.FAILED
    assert not DemoRecord.objects.exists()


def test_happened_needs_a_result_and_bad_input_changes_nothing(agents):
    effect = agents.a.extra["make"].uncertain()
    client = agents.a.client_for(agents.a.operator)
    for data in ({"resolution": "happened"}, {"resolution": "maybe"}, {}):
        assert client.post(effect_url(effect), data).status_code == HTTPStatus.BAD_REQUEST
    effect.refresh_from_db()
    assert effect.state == Effect.State.UNCERTAIN


def test_resolving_twice_says_it_is_no_longer_uncertain(agents):
    effect = agents.a.extra["make"].uncertain()
    client = agents.a.client_for(agents.a.operator)
    client.post(effect_url(effect), {"resolution": "fail"})
    response = client.post(effect_url(effect), {"resolution": "not_happened"})
    assert response.status_code == HTTPStatus.CONFLICT
    assert "only an uncertain effect can be resolved" in response.content.decode()


# --- tasks and audit ----------------------------------------------------------------------


def test_task_page_shows_states_plan_effects_interactions_and_messages(agents):
    approval = agents.a.extra["make"].approval()
    agents.a.client_for(agents.a.operator).post(detail_url(approval), {"decision": "approve"})
    task = run(approval.task)
    client = agents.a.client_for(agents.a.viewer)
    listing = client.get(reverse("approvals:tasks")).content.decode()
    assert task.public_id in listing
    html = client.get(reverse("approvals:task", args=[task.public_id])).content.decode()
    for text in ("auth required", "completed", "Get approval", "deploy / deploy_build"):
        assert text in html
    assert approval.public_id in html and "Deployed build" in html


def test_task_artifacts_download_as_files(agents):
    question = agents.a.extra["make"].question()
    agents.a.client_for(agents.a.operator).post(
        detail_url(question), {"decision": "answer", "custom": "main"}
    )
    task = run(question.task)
    artifact = task.artifacts[0]
    client = agents.a.client_for(agents.a.viewer)
    html = client.get(reverse("approvals:task", args=[task.public_id])).content.decode()
    url = reverse("approvals:artifact_download", args=[task.public_id, artifact["artifactId"]])
    assert url in html
    response = client.get(url)
    assert response["Content-Disposition"] == 'attachment; filename="review.json"'
    assert response.json()["base"] == "main"
    missing = reverse("approvals:artifact_download", args=[task.public_id, "nope"])
    assert client.get(missing).status_code == HTTPStatus.NOT_FOUND


def test_raw_and_text_artifacts_download_as_themselves(agents):
    from approvals.task_views import artifact_body

    assert artifact_body({"name": "n.txt", "parts": [{"text": "hi"}]}) == (
        b"hi",
        "text/plain",
        "n.txt",
    )
    body, kind, name = artifact_body(
        {"name": "x", "parts": [{"raw": "dGNr", "filename": "out.bin", "mediaType": "a/b"}]}
    )
    assert (body, kind, name) == (b"tck", "a/b", "out.bin")
    body, kind, _ = artifact_body({"name": "x", "parts": [{"raw": "!!not base64"}]})
    assert body == b""


def test_tasks_are_paged_newest_status_first(agents, monkeypatch):
    import approvals.task_views

    monkeypatch.setattr(approvals.task_views, "TASKS_PAGE_SIZE", 2)
    make = agents.a.extra["make"]
    oldest, middle, newest = (make.approval().task for _ in range(3))
    client = agents.a.client_for(agents.a.operator)
    first = client.get(reverse("approvals:tasks")).content.decode()
    assert first.index(newest.public_id) < first.index(middle.public_id)
    assert oldest.public_id not in first and "Page 1 of" not in first
    assert 'rel="prev"' not in first
    older = re.search(r'href="\?([^"]*)" rel="next">Older<', first)
    assert older is not None
    second = client.get(reverse("approvals:tasks") + "?" + unescape(older.group(1)))
    second = second.content.decode()
    assert oldest.public_id in second and newest.public_id not in second
    assert 'rel="prev">Newer<' in second and 'rel="next"' not in second
    assert client.get(reverse("approvals:tasks"), {"before": "zzz"}).status_code == 200
    filtered = client.get(reverse("approvals:tasks"), {"state": "TASK_STATE_COMPLETED"})
    assert newest.public_id not in filtered.content.decode()


def test_audit_lists_every_decision_newest_first_with_connections(agents):
    from connections.models import App
    from connections.services import connection_connect_token

    make = agents.a.extra["make"]
    first = make.approval()
    second = make.question()
    client = agents.a.client_for(agents.a.operator)
    client.post(detail_url(first), {"decision": "deny", "reason": "not today"})
    client.post(detail_url(second), {"decision": "answer", "custom": "main"})
    app = App.objects.create(slug="github", name="GitHub", method=App.Method.TOKEN)
    connection_connect_token(
        tenant=agents.a.tenant, app=app, token="ghp_" + "x" * 36, by=agents.a.operator
    )
    html = client.get(reverse("approvals:audit")).content.decode()
    html = html[html.index("<tbody>") :]  # the rows (the outcome filter names them all)
    assert html.index("connected GitHub") < html.index("answered") < html.index("denied")
    assert "not today" in html


def test_audit_pages_by_keyset_without_losing_rows(agents, django_assert_max_num_queries):
    from runtime.kernel.task_models import AuditEvent as Event

    Event.objects.bulk_create(
        [
            Event(tenant=agents.a.tenant, actor=f"user:{i}@x.test", action="approved")
            for i in range(120)
        ]
    )
    client = agents.a.client_for(agents.a.operator)
    seen, url = [], reverse("approvals:audit")
    while url:
        response = client.get(url)
        html = response.content.decode()
        seen += [a for a in (f"user:{i}@x.test" for i in range(120)) if f"<code>{a}</code>" in html]
        nxt = response.context["next_url"]
        url = reverse("approvals:audit") + nxt.replace("&amp;", "&") if nxt else None
    assert sorted(seen) == sorted(f"user:{i}@x.test" for i in range(120))
    with django_assert_max_num_queries(8):
        client.get(reverse("approvals:audit"))


def test_inbox_and_lists_need_a_fixed_number_of_queries(agents, django_assert_max_num_queries):
    make = agents.a.extra["make"]
    for _ in range(3):
        make.approval()
    make.question()
    make.uncertain()
    client = agents.a.client_for(agents.a.operator)
    client.get(reverse("approvals:inbox"))  # warm the session
    for name in ("approvals:inbox", "approvals:inbox_fragment", "approvals:tasks"):
        with django_assert_max_num_queries(9):
            assert client.get(reverse(name)).status_code == 200
