"""The A2A hot path: per-process caches of agents and tokens that a change reaches
within one second, a GetTask of one query, and the endpoint off the middleware stack
(config/asgi.py, a2a_endpoint.lean) answering as the whole stack did."""

import asyncio
import json
import time
import urllib.error
import urllib.request

import orjson
import pytest
from django.utils import timezone

from a2a_endpoint import asyncdb, wire
from a2a_endpoint.asyncdb import StoredTask, pool_close, task_read, tasks_page_read
from a2a_endpoint.identity import agent_cache
from a2a_endpoint.jsonrpc import json_bytes
from runtime.agents.agent_models import Agent
from runtime.kernel.errors import TaskNotFound
from runtime.kernel.task_models import ANONYMOUS, Task
from runtime.kernel.task_selectors import task_for_caller, tasks_page
from tenants.lookup_cache import LOOKUP_CACHE_SECONDS
from tenants.models import ApiToken, Tenant
from tenants.tokens import api_token_create, api_token_revoke, token_cache
from tests.a2a_client import assert_error, error_info, result_of, rpc, task_of, user_message

SUPPORT = "/a2a/acme/support"


def list_tasks(client, token=None, path=SUPPORT):
    return rpc(client, path, "ListTasks", {}, token=token)


def refused_as(response) -> str:
    """The reason of a 401 (metadata.reason of its ErrorInfo)."""
    error = assert_error(response, -32000, "UNAUTHENTICATED", status=401)
    return error_info(error)["metadata"]["reason"]


def token_row(token: str) -> ApiToken:
    return ApiToken.objects.get(prefix=token.split("_")[1])


def sleep_until(deadline: float) -> None:
    time.sleep(max(0.0, deadline - time.monotonic()))


@pytest.fixture
def long_ttl(monkeypatch):
    """Caches that keep their rows for a minute: what a request reads is then certain."""
    monkeypatch.setattr(agent_cache, "seconds", 60)
    monkeypatch.setattr(token_cache, "seconds", 60)


# --- in process ----------------------------------------------------------------------------

# As the endpoint's other tests: the view closes its connection after a request
# (close_old_connections), which a test's transaction would not survive.
pytestmark = pytest.mark.django_db(transaction=True)


def test_the_ttl_is_one_second():
    assert LOOKUP_CACHE_SECONDS == 1.0
    assert agent_cache.seconds == token_cache.seconds == 1.0


def test_a_get_task_with_warm_caches_makes_one_query(
    agents, client, long_ttl, django_assert_num_queries, monkeypatch
):
    # Counted on this thread's connection: the calls run here, not on the shared threads.
    monkeypatch.setattr(asyncdb, "call_runner", asyncdb.on_the_callers_thread)
    params = {"message": user_message(), "configuration": {"returnImmediately": True}}
    task = task_of(rpc(client, SUPPORT, "SendMessage", params, token=agents.a.token))
    with django_assert_num_queries(1):
        got = result_of(rpc(client, SUPPORT, "GetTask", {"id": task["id"]}, token=agents.a.token))
    assert got["id"] == task["id"]


def test_a_token_revoked_in_this_process_is_refused_at_once(agents, client, long_ttl):
    result_of(list_tasks(client, agents.a.token))
    assert api_token_revoke(token=token_row(agents.a.token))
    assert refused_as(list_tasks(client, agents.a.token)) == "revoked"


def test_a_token_revoked_by_another_process_is_refused_within_one_second(agents, client):
    started = time.monotonic()
    result_of(list_tasks(client, agents.a.token))
    # As another process revokes it: a row written without this process's signals.
    ApiToken.objects.filter(pk=token_row(agents.a.token).pk).update(revoked_at=timezone.now())
    revoked = time.monotonic()
    response = list_tasks(client, agents.a.token)
    if time.monotonic() - started < 0.9 * LOOKUP_CACHE_SECONDS:
        # Read less than a TTL ago: the cached row still answers (so the cache is in use).
        result_of(response)
    sleep_until(revoked + LOOKUP_CACHE_SECONDS)
    assert refused_as(list_tasks(client, agents.a.token)) == "revoked"


def test_a_tenant_deactivated_by_another_process_is_refused_within_one_second(agents, client):
    result_of(list_tasks(client, agents.a.token))
    Tenant.objects.filter(pk=agents.a.tenant.pk).update(active=False)
    changed = time.monotonic()
    sleep_until(changed + LOOKUP_CACHE_SECONDS)
    # Its agents say why: the tenant is deactivated.
    assert_error(list_tasks(client, agents.a.token), -32000, "TENANT_INACTIVE", status=403)


def test_an_agent_changed_by_another_process_takes_effect_within_one_second(agents, client):
    # Anonymous callers reach a public agent only: the flag decides who gets in.
    support = Agent.objects.filter(tenant=agents.a.tenant, slug="support")
    support.update(public=True)
    assert result_of(list_tasks(client))["tasks"] == []  # the public agent is now cached
    # As another process changes it: a row written without this process's signals.
    support.update(public=False)
    changed = time.monotonic()
    sleep_until(changed + LOOKUP_CACHE_SECONDS)
    assert refused_as(list_tasks(client)) == "missing"


def test_an_agent_saved_in_this_process_takes_effect_at_once(agents, client, long_ttl):
    assert refused_as(list_tasks(client)) == "missing"
    agent = Agent.objects.get(tenant=agents.a.tenant, slug="support")
    agent.public = True
    agent.save()
    assert result_of(list_tasks(client))["tasks"] == []
    agent.delete()
    assert_error(list_tasks(client, agents.a.token), -32000, "AGENT_NOT_FOUND", status=404)


def test_a_token_minted_after_an_unknown_prefix_was_tried_works_at_once(agents, client):
    _, token = api_token_create(tenant=agents.a.tenant, subject="partner:new", name="new")
    row = token_row(token)
    row.delete()
    assert refused_as(list_tasks(client, token)) == "unknown"
    # Unknown prefixes are not cached: the row comes back without a signal (bulk_create
    # sends none), as another process would write it.
    ApiToken.objects.bulk_create([row])
    result_of(list_tasks(client, token))


def read_async(read=task_read, **scope):
    async def run():
        try:
            return await read(**scope)
        finally:
            await pool_close()

    return asyncio.run(run())


@pytest.mark.postgres
def test_get_tasks_async_read_is_the_orm_read(agents, client, postgres_only):
    params = {"message": user_message(), "configuration": {"returnImmediately": True}}
    mine = task_of(rpc(client, SUPPORT, "SendMessage", params, token=agents.a.token))
    theirs = task_of(rpc(client, "/a2a/acme/tck", "SendMessage", params))  # anonymous
    agent = Agent.objects.get(tenant=agents.a.tenant, slug="support")
    scope = {"tenant": agents.a.tenant, "agent": agent, "subject": agents.a.subject}
    orm = task_for_caller(**scope, task_id=mine["id"])
    got = read_async(**scope, task_id=mine["id"])
    # GetTask's row in ListTasks' shape: what the wire shows, its JSON as stored.
    shown = ("pk", *StoredTask.FIELDS[1:], *StoredTask.JSON_FIELDS)
    assert [getattr(got, f) for f in shown] == [getattr(orm, f) for f in shown]
    assert wire.task_wire(got) == wire.task_wire(orm) == mine | {"history": orm.history}
    assert orjson.loads(json_bytes(wire.stored_task_wire(got))) == wire.task_wire(orm)
    for length in (0, 1):
        assert orjson.loads(
            json_bytes(wire.stored_task_wire(got, history_length=length))
        ) == wire.task_wire(orm, history_length=length)
    # Another caller's task, another agent's, another tenant's: not found, as the ORM says.
    tck = Agent.objects.get(tenant=agents.a.tenant, slug="tck")
    for other in (
        {**scope, "subject": "partner:someone-else"},
        {**scope, "agent": tck},
        {**scope, "tenant": agents.b.tenant},
        {**scope, "subject": ANONYMOUS},
    ):
        with pytest.raises(TaskNotFound):
            read_async(**other, task_id=mine["id"])
    # A caller without credentials reaches what anonymous callers started, and only that.
    anonymous = {"tenant": agents.a.tenant, "agent": tck, "subject": ANONYMOUS}
    assert read_async(**anonymous, task_id=theirs["id"]).pk == (
        task_for_caller(**anonymous, task_id=theirs["id"]).pk
    )
    with pytest.raises(TaskNotFound):
        read_async(**anonymous | {"subject": agents.a.subject}, task_id=theirs["id"])


@pytest.mark.postgres
def test_a_burst_of_reads_waits_at_the_gate_not_inside_the_pool(
    agents, client, postgres_only, settings
):
    """More GetTasks at once than the async pool has connections: each is answered, and none
    waits inside psycopg's pool (a waiter there costs a task of its own); they queue at the
    gate of the pool's size in front of it."""
    settings.A2A_DB_ASYNC_POOL_SIZE = 2
    params = {"message": user_message(), "configuration": {"returnImmediately": True}}
    sent = task_of(rpc(client, SUPPORT, "SendMessage", params, token=agents.a.token))
    agent = Agent.objects.get(tenant=agents.a.tenant, slug="support")
    scope = {"tenant": agents.a.tenant, "agent": agent, "subject": agents.a.subject}

    async def burst(n: int) -> list:
        return await asyncio.gather(*(task_read(**scope, task_id=sent["id"]) for _ in range(n)))

    async def run():
        try:
            await burst(2)  # the pool has grown to its two connections
            pool = (await asyncdb._reads()).pool
            pool.pop_stats()
            got = await burst(30)
            return got, pool.get_stats().get("requests_queued", 0)
        finally:
            await pool_close()

    got, queued_in_pool = asyncio.run(run())
    assert [t.public_id for t in got] == [sent["id"]] * 30
    assert queued_in_pool == 0


@pytest.mark.postgres
def test_a_blocking_sends_last_read_is_the_orm_read(agents, client, postgres_only):
    params = {"message": user_message(), "configuration": {"returnImmediately": True}}
    sent = task_of(rpc(client, SUPPORT, "SendMessage", params, token=agents.a.token))
    task = Task.objects.get(public_id=sent["id"])

    def settled_read():
        async def run():
            try:
                return await asyncdb._settled_read(task.pk)
            finally:
                await pool_close()

        return asyncio.run(run())

    got = settled_read()
    shown = ("pk", *StoredTask.FIELDS[1:], *StoredTask.JSON_FIELDS, "direct", "reply_message")
    assert [getattr(got, f) for f in shown] == [getattr(task, f) for f in shown]
    assert got.reply_message is None
    assert orjson.loads(json_bytes(wire.stored_task_wire(got))) == wire.task_wire(task)
    # A turn that answered with a Message (a direct reply): send_message answers with it.
    reply = {"role": "ROLE_AGENT", "messageId": "m-1", "parts": [{"text": "done ü"}]}
    Task.objects.filter(pk=task.pk).update(reply_message=reply, direct=True)
    got = settled_read()
    assert (got.reply_message, got.direct) == (reply, True)
    Task.objects.filter(pk=task.pk).delete()
    with pytest.raises(Task.DoesNotExist):
        settled_read()


@pytest.mark.postgres
def test_list_tasks_async_read_is_the_orm_read(agents, client, postgres_only):
    params = {"configuration": {"returnImmediately": True}}
    for i in range(5):
        message = user_message(contextId=f"ctx-{i % 2}")
        rpc(client, SUPPORT, "SendMessage", {"message": message, **params}, token=agents.a.token)
    Task.objects.filter(wire_context_id="ctx-1").update(state="TASK_STATE_COMPLETED")
    agent = Agent.objects.get(tenant=agents.a.tenant, slug="support")
    scope = {"tenant": agents.a.tenant, "agent": agent, "subject": agents.a.subject}
    first = Task.objects.order_by("-status_timestamp", "-pk")[1]
    cases = [
        {},
        {"page_size": 2},
        {"page_size": 2, "cursor": (first.status_timestamp, first.pk)},
        {"context_id": "ctx-0"},
        {"state": "TASK_STATE_COMPLETED"},
        {"status_after": first.status_timestamp},
        {"context_id": "ctx-1", "state": "TASK_STATE_COMPLETED", "page_size": 1},
        {"subject": ANONYMOUS},
        {"subject": "partner:someone-else"},
        {"tenant": agents.b.tenant},
    ]
    for case in cases:
        query = {
            **scope,
            "context_id": None,
            "state": None,
            "status_after": None,
            "cursor": None,
            "page_size": 50,
            **case,
        }
        orm_tasks, orm_total, orm_more = tasks_page(**query)
        got_tasks, got_total, got_more = read_async(tasks_page_read, **query)
        assert (got_total, got_more) == (orm_total, orm_more), case
        assert [wire.task_wire(t) for t in got_tasks] == [wire.task_wire(t) for t in orm_tasks]
    # Not a comparison of empty pages: the caller has five tasks, two of them in ctx-1.
    everything = {"context_id": None, "state": None, "status_after": None, "cursor": None}
    assert tasks_page(**scope, **everything, page_size=2)[1:] == (5, True)
    assert tasks_page(**scope, **everything | {"context_id": "ctx-1"}, page_size=9)[1] == 2


@pytest.mark.postgres
def test_tasks_are_read_on_the_async_pool_once_the_server_has_opened_it(postgres_only):
    from a2a_endpoint.asyncdb import async_reads, pool_open

    async def served():
        before = async_reads()
        await pool_open()  # as config.asgi's lifespan does at the server's start
        try:
            return before, async_reads()
        finally:
            await pool_close()

    async def elsewhere():  # Django's test client: an event loop of each request's own
        return async_reads()

    assert asyncio.run(served()) == (False, True)
    assert asyncio.run(elsewhere()) is False


# --- against the live stack (uvicorn in another process, config/asgi.py) --------------------


def live_call(url: str, body: dict | None = None, token: str | None = None, headers=None):
    """(status, headers, JSON body) of a POST (body) or GET to the live server."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method="POST" if data else "GET")
    request.add_header("A2A-Version", "1.0")
    if data:
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    for key, value in (headers or {}).items():
        request.add_header(key, value)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, _json(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, _json(exc.read())


def _json(raw: bytes):
    try:
        return json.loads(raw)
    except ValueError:
        return None  # an HTML error page of the whole stack


LIST = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}


def until_one_second_after(changed: float, call) -> list[tuple[float, int]]:
    """Call repeatedly from now until a little past ``changed`` + one TTL; (sent at, status)."""
    seen = []
    while (sent := time.monotonic()) < changed + LOOKUP_CACHE_SECONDS + 0.3:
        seen.append((sent - changed, call()))
        time.sleep(0.05)
    return seen


def test_a_token_revoked_here_is_refused_by_the_live_server_within_one_second(live_stack, demo):
    url = f"{live_stack.url}{demo['agents']['support']}"
    _, token = api_token_create(
        tenant=Tenant.objects.get(slug=demo["tenant"]), subject="partner:revoked", name="r"
    )
    assert live_call(url, LIST, token)[0] == 200  # now in the server's cache
    assert api_token_revoke(token=token_row(token))  # this process's caches, not the server's
    seen = until_one_second_after(time.monotonic(), lambda: live_call(url, LIST, token)[0])
    late = [status for at, status in seen if at >= LOOKUP_CACHE_SECONDS]
    assert late and set(late) == {401}, seen
    status, _, body = live_call(url, LIST, token)
    assert body["error"]["data"][0]["metadata"]["reason"] == "revoked"


def test_an_agent_changed_here_reaches_the_live_server_within_one_second(live_stack, demo):
    url = f"{live_stack.url}{demo['agents']['support']}"
    support = Agent.objects.filter(tenant__slug=demo["tenant"], slug="support")
    support.update(public=True)
    try:
        assert live_call(url, LIST)[0] == 200  # anonymous: the public agent is in the cache
        support.update(public=False)
        seen = until_one_second_after(time.monotonic(), lambda: live_call(url, LIST)[0])
        late = [status for at, status in seen if at >= LOOKUP_CACHE_SECONDS]
        assert late and set(late) == {401}, seen
        card = live_call(f"{url}/.well-known/agent-card.json")
        assert card[0] == 401  # the card is read fresh
    finally:
        support.update(public=False)


def test_the_live_endpoint_answers_with_the_stacks_headers_and_checks_the_host(live_stack, demo):
    url = f"{live_stack.url}{demo['agents']['support']}"
    status, headers, body = live_call(url, LIST, demo["token"])
    assert status == 200 and body["result"]["tasks"] == []
    assert headers["Content-Type"] == "application/json"
    assert int(headers["Content-Length"]) > 0
    # What SecurityMiddleware, the CSP and XFrameOptionsMiddleware set on every response.
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["Content-Security-Policy"]
    assert headers["Referrer-Policy"]
    # ALLOWED_HOSTS, as CommonMiddleware checks it on the whole stack.
    status, _, _ = live_call(url, LIST, demo["token"], headers={"Host": "evil.example"})
    assert status == 400
    # A path under /a2a/ that is no endpoint goes through the whole stack.
    status, _, _ = live_call(f"{live_stack.url}/a2a/{demo['tenant']}/support/nothing-here")
    assert status == 404
