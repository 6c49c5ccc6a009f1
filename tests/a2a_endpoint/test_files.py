"""files/v1 and url file parts: versions and digests of the served bytes, signed expiring
download links, incoming url parts fetched through the outbound guard, raw part limits."""

import base64
import hashlib
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from unittest import mock
from urllib.parse import urlsplit

import pytest
from django.core import signing
from django.db import connection
from django.test import Client

from runtime.agents.agent_models import Agent
from runtime.kernel import extensions as ext
from runtime.kernel.task_models import Context, Task, TaskFile, TaskState
from runtime.turn.runner import turn_run

# The A2A view is async and gives its database connection back between awaits, so these
# tests need real transactions (as the push tests do).
pytestmark = pytest.mark.django_db(transaction=True)

FIRST = b"first version of the report\n"
SECOND = "second version, with a résumé\n".encode()
WRITER = {
    "provider": "scripted",
    "script": [
        {
            "when": {"text": "twice"},
            "steps": [
                {
                    "artifact": {
                        "id": "report",
                        "name": "report.txt",
                        "raw": base64.b64encode(FIRST).decode(),
                        "filename": "report.txt",
                        "mediaType": "text/plain",
                    }
                },
                {
                    "artifact": {
                        "id": "report",
                        "name": "report.txt",
                        "raw": base64.b64encode(SECOND).decode(),
                        "filename": "report.txt",
                        "mediaType": "text/plain",
                    }
                },
                {"reply": "Written."},
            ],
        },
        {
            "when": {"text": "kinds"},
            "steps": [
                {"artifact": {"id": "note", "name": "note.txt", "text": "héllo"}},
                {"artifact": {"id": "facts", "name": "facts.json", "data": {"b": 1, "a": [2]}}},
                {"reply": "Done."},
            ],
        },
        {
            "when": {"text": "^check"},
            "steps": [{"reply": "{{ files.0.error }} / {{ files.1.text }}"}],
        },
        {"steps": [{"reply": "Read: {{ files.0.text }}"}]},
    ],
}


@pytest.fixture
def files_world(world, settings):
    settings.A2A_WAIT_MS = 100
    for side in (world.a, world.b):
        Agent.objects.create(
            tenant=side.tenant, slug="writer", name="Writer", description="w", model=WRITER
        )
    return world


class FileServer:
    """A loopback HTTP server: path -> (content type, body)."""

    def __init__(self, routes: dict[str, tuple[str, bytes]]):
        self.routes = routes

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(handler):  # noqa: N805
                found = self.routes.get(handler.path)
                if found is None:
                    handler.send_response(404)
                    handler.end_headers()
                    return
                content_type, body = found
                handler.send_response(200)
                handler.send_header("Content-Type", content_type)
                handler.send_header("Content-Length", str(len(body)))
                handler.end_headers()
                handler.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def file_server():
    server = FileServer(
        {
            "/hello.txt": ("text/plain; charset=utf-8", b"hello from a fetched file"),
            "/big.txt": ("text/plain", b"x" * 5000),
            "/fake.json": ("text/plain", b'{"not": "json"}'),
        }
    )
    yield server
    server.stop()


def rpc(side, method: str, params: dict, extensions: str = "", agent: str = "writer"):
    headers = {"Authorization": f"Bearer {side.token}", "A2A-Version": "1.0"}
    if extensions:
        headers["A2A-Extensions"] = extensions
    return Client().post(
        f"/a2a/{side.tenant.slug}/{agent}",
        {"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
        content_type="application/json",
        headers=headers,
    )


def send(side, parts: list[dict], extensions: str = "") -> str:
    message = {"role": "ROLE_USER", "messageId": f"m-{time.monotonic_ns()}", "parts": parts}
    response = rpc(
        side,
        "SendMessage",
        {"message": message, "configuration": {"returnImmediately": True}},
        extensions,
    )
    body = response.json()
    assert "result" in body, body
    task_id = body["result"]["task"]["id"]
    turn_run(task_pk=Task.objects.get(public_id=task_id).pk, worker_id="test-worker")
    return task_id


def get_task(side, task_id: str, extensions: str = ""):
    return rpc(side, "GetTask", {"id": task_id}, extensions)


def download(url: str):
    return Client().get(urlsplit(url).path)


# --- files/v1 and downloads -----------------------------------------------------------------


def test_files_versions_and_sha256_match_the_served_bytes(files_world):
    a = files_world.a
    task_id = send(a, [{"text": "write it twice"}], ext.FILES)
    response = get_task(a, task_id, ext.FILES)
    task = response.json()["result"]
    assert task["status"]["state"] == TaskState.COMPLETED
    [artifact] = task["artifacts"]
    [part] = artifact["parts"]
    assert "raw" not in part
    assert part["filename"] == "report.txt" and part["mediaType"] == "text/plain"
    files = artifact["metadata"][ext.FILES]
    assert files["version"] == 2
    assert files["kind"] == "file" and files["path"] == "outputs/report.txt"

    served = download(part["url"])
    assert served.status_code == 200
    assert served.content == SECOND
    assert files["size"] == len(served.content)
    assert files["sha256"] == hashlib.sha256(served.content).hexdigest()
    assert served["Content-Type"] == "text/plain"
    digest = base64.b64encode(hashlib.sha256(SECOND).digest()).decode()
    assert served["Repr-Digest"] == f"sha-256=:{digest}:"
    # Both versions are kept; the first one's event said version 1 with its own digest.
    stored = TaskFile.objects.filter(task__public_id=task_id).order_by("version")
    assert [(f.version, f.sha256) for f in stored] == [
        (1, hashlib.sha256(FIRST).hexdigest()),
        (2, hashlib.sha256(SECOND).hexdigest()),
    ]


def test_a_new_turn_of_the_context_makes_the_next_version(files_world):
    a = files_world.a
    first = send(a, [{"text": "write it twice"}])
    context_id = Task.objects.get(public_id=first).wire_context_id
    message = {
        "role": "ROLE_USER",
        "messageId": "m-again",
        "contextId": context_id,
        "parts": [{"text": "twice again"}],
    }
    body = rpc(
        a, "SendMessage", {"message": message, "configuration": {"returnImmediately": True}}
    ).json()
    second = body["result"]["task"]["id"]
    turn_run(task_pk=Task.objects.get(public_id=second).pk, worker_id="test-worker")
    artifact = get_task(a, second, ext.FILES).json()["result"]["artifacts"][0]
    assert artifact["metadata"][ext.FILES]["version"] == 4


def test_text_and_data_artifacts_hash_their_utf8_and_canonical_json_bytes(files_world):
    a = files_world.a
    task_id = send(a, [{"text": "all kinds"}], ext.FILES)
    artifacts = get_task(a, task_id, ext.FILES).json()["result"]["artifacts"]
    by_id = {x["artifactId"]: x for x in artifacts}
    note = by_id["note"]["metadata"][ext.FILES]
    assert note["kind"] == "text"
    assert note["sha256"] == hashlib.sha256("héllo".encode()).hexdigest()
    assert note["size"] == len("héllo".encode())
    facts = by_id["facts"]["metadata"][ext.FILES]
    canonical = json.dumps(
        by_id["facts"]["parts"][0]["data"], sort_keys=True, separators=(",", ":")
    )
    assert facts["kind"] == "data"
    assert facts["sha256"] == hashlib.sha256(canonical.encode()).hexdigest()


def test_files_data_appears_only_when_activated_and_the_header_echoes_it(files_world):
    a = files_world.a
    task_id = send(a, [{"text": "twice"}])
    plain = get_task(a, task_id)
    assert "A2A-Extensions" not in plain
    artifact = plain.json()["result"]["artifacts"][0]
    assert "metadata" not in artifact and "extensions" not in artifact
    activated = get_task(a, task_id, f"{ext.FILES}, https://example.com/unknown/v1")
    assert activated["A2A-Extensions"] == ext.FILES
    artifact = activated.json()["result"]["artifacts"][0]
    assert artifact["extensions"] == [ext.FILES]
    assert set(artifact["metadata"]) == {ext.FILES}


def test_the_card_declares_files_v1_not_required(files_world):
    a = files_world.a
    card = (
        Client()
        .get(
            f"/a2a/{a.tenant.slug}/writer/.well-known/agent-card.json",
            headers={"Authorization": f"Bearer {a.token}"},
        )
        .json()
    )
    declared = {e["uri"]: e for e in card["capabilities"]["extensions"]}
    assert declared[ext.FILES]["required"] is False


def test_an_expired_download_link_is_refused(files_world, settings):
    a = files_world.a
    task_id = send(a, [{"text": "twice"}])
    an_hour_ago = signing.b62_encode(int(time.time()) - settings.FILES_URL_TTL_SECONDS - 60)
    with mock.patch.object(signing.TimestampSigner, "timestamp", return_value=an_hour_ago):
        url = get_task(a, task_id).json()["result"]["artifacts"][0]["parts"][0]["url"]
    refused = download(url)
    assert refused.status_code == 410
    assert "expired" in refused.json()["error"]
    fresh = get_task(a, task_id).json()["result"]["artifacts"][0]["parts"][0]["url"]
    assert download(fresh).content == SECOND


def test_an_altered_download_link_is_refused(files_world):
    a = files_world.a
    task_id = send(a, [{"text": "twice"}])
    url = get_task(a, task_id).json()["result"]["artifacts"][0]["parts"][0]["url"]
    path = urlsplit(url).path
    payload, rest = path.rsplit("/", 1)[1].split(":", 1)
    forged = signing.dumps(
        {"f": "file_x", "t": task_id, "s": "partner:someone-else"}, salt="another salt"
    )
    for token in (payload[:-2] + "xx:" + rest, forged):
        refused = Client().get(path.rsplit("/", 1)[0] + "/" + token)
        assert refused.status_code == 403
        assert "not valid" in refused.json()["error"]


def test_a_download_link_does_not_work_under_another_tenant(files_world):
    a, b = files_world.a, files_world.b
    task_id = send(a, [{"text": "twice"}])
    path = urlsplit(get_task(a, task_id).json()["result"]["artifacts"][0]["parts"][0]["url"]).path
    token = path.rsplit("/", 1)[1]
    assert Client().get(f"/a2a/{b.tenant.slug}/writer/files/{token}").status_code == 404
    assert get_task(b, task_id).json()["error"]["code"] == -32001


# --- raw parts in ----------------------------------------------------------------------------


def test_an_oversized_raw_part_gets_invalid_params_and_changes_nothing(files_world, settings):
    settings.A2A_MAX_RAW_PART_BYTES = 10
    a = files_world.a
    message = {
        "role": "ROLE_USER",
        "messageId": "m-big",
        "parts": [{"raw": base64.b64encode(b"x" * 11).decode(), "mediaType": "text/plain"}],
    }
    body = rpc(a, "SendMessage", {"message": message}).json()
    assert body["error"]["code"] == -32602
    assert "message.parts[0].raw" in json.dumps(body["error"])
    assert "limit is 10 bytes" in json.dumps(body["error"])
    assert not Task.objects.exists() and not Context.objects.exists()
    message["parts"][0]["raw"] = base64.b64encode(b"x" * 10).decode()
    assert (
        "result"
        in rpc(
            a, "SendMessage", {"message": message, "configuration": {"returnImmediately": True}}
        ).json()
    )


# --- url parts in ----------------------------------------------------------------------------


def status_text(side, task_id: str) -> tuple[str, str]:
    status = get_task(side, task_id).json()["result"]["status"]
    return status["state"], status["message"]["parts"][0]["text"]


def test_a_url_part_on_loopback_allowed_by_setting_is_fetched_and_seen_by_the_model(
    files_world, file_server, settings
):
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    a = files_world.a
    url = file_server.url("/hello.txt")
    task_id = send(
        a, [{"text": "read"}, {"url": url, "mediaType": "text/plain", "filename": "hello.txt"}]
    )
    assert status_text(a, task_id) == (TaskState.COMPLETED, "Read: hello from a fetched file")
    stored = TaskFile.objects.get(task__public_id=task_id, role=TaskFile.Role.INPUT)
    assert bytes(stored.content) == b"hello from a fetched file"
    assert stored.sha256 == hashlib.sha256(b"hello from a fetched file").hexdigest()


def inputs_entry(task_id: str) -> list[dict]:
    task = Task.objects.get(public_id=task_id)
    [entry] = [e for e in task.transcript if e["type"] == "inputs"]
    return entry["files"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://0177.0.0.1/x", "the host 0177.0.0.1 is not a canonical IPv4 address"),
        ("http://0177.0.0.1:8799/x", "the host 0177.0.0.1 is not a canonical IPv4 address"),
        ("ftp://files.example.com/x.txt", "the URL must be http or https with a host"),
        ("file:///etc/passwd", "the URL must be http or https with a host"),
        ("https://user:secret@files.example.com/x", "the URL must not carry credentials"),
        ("https://files.example.com:0/x", "the port '0' is not a number from 1 to 65535"),
        ("https://exa mple.com/x", "the URL contains whitespace or a control character"),
    ],
)
def test_a_url_part_that_is_not_a_canonical_url_is_refused_at_the_edge(
    files_world, settings, url, reason
):
    settings.FILES_FETCH_ALLOWED_HOSTS = ["*"]
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    a = files_world.a
    message = {
        "role": "ROLE_USER",
        "messageId": "m-bad-url",
        "parts": [{"text": "read"}, {"url": url, "mediaType": "text/plain"}],
    }
    error = rpc(a, "SendMessage", {"message": message}).json()["error"]
    assert error["code"] == -32602
    assert error["message"].startswith(f"Invalid parameters: message.parts[1].url: {reason}")
    assert not Task.objects.exists() and not Context.objects.exists()


def test_a_url_part_with_a_private_address_is_refused_at_the_edge(
    files_world, file_server, settings
):
    settings.PUSH_ALLOW_PRIVATE_HOSTS = False
    a = files_world.a
    url = file_server.url("/hello.txt")
    message = {"role": "ROLE_USER", "messageId": "m-private", "parts": [{"url": url}]}
    error = rpc(a, "SendMessage", {"message": message}).json()["error"]
    assert error["code"] == -32602
    assert error["message"] == (
        "Invalid parameters: message.parts[0].url: the address 127.0.0.1 is not a public address"
    )
    assert not Task.objects.exists() and not TaskFile.objects.exists()


def test_a_url_part_from_a_host_not_allowed_is_refused_at_the_edge(files_world, settings):
    settings.FILES_FETCH_ALLOWED_HOSTS = ["files.example.com"]
    a = files_world.a
    message = {
        "role": "ROLE_USER",
        "messageId": "m-elsewhere",
        "parts": [{"url": "https://elsewhere.example.org/x.txt", "mediaType": "text/plain"}],
    }
    error = rpc(a, "SendMessage", {"message": message}).json()["error"]
    assert error["code"] == -32602
    assert (
        "message.parts[0].url: the host elsewhere.example.org is not one this tenant allows"
        in (error["message"])
    )
    assert not Task.objects.exists()


def test_a_url_part_that_cannot_be_fetched_fails_that_part_and_the_model_sees_why(
    files_world, file_server, settings
):
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    a = files_world.a
    dead = f"http://127.0.0.1:{free_port()}/gone.txt"
    good = file_server.url("/hello.txt")
    task_id = send(
        a,
        [
            {"text": "check both"},
            {"url": dead, "mediaType": "text/plain", "filename": "gone.txt"},
            {"url": good, "mediaType": "text/plain"},
        ],
    )
    state, text = status_text(a, task_id)
    assert state == TaskState.COMPLETED
    failed, fetched = inputs_entry(task_id)
    assert failed["index"] == 1 and failed["url"] == dead and failed["filename"] == "gone.txt"
    assert failed["error"].startswith(f"fetching {dead} failed: ")
    assert "fileId" not in failed and "text" not in failed
    assert fetched["index"] == 2 and fetched["text"] == "hello from a fetched file"
    assert "error" not in fetched
    # The model was told: the scripted reply renders the failed part's error.
    assert text == f"{failed['error']} / hello from a fetched file"
    assert TaskFile.objects.filter(task__public_id=task_id, role=TaskFile.Role.INPUT).count() == 1


def test_a_name_that_resolves_to_a_private_address_fails_that_part(
    files_world, file_server, settings
):
    # The edge cannot know where a name leads; the fetch's own address check refuses it.
    settings.PUSH_ALLOW_PRIVATE_HOSTS = False
    a = files_world.a
    url = file_server.url("/hello.txt").replace("127.0.0.1", "localhost")
    task_id = send(a, [{"text": "check"}, {"url": url, "mediaType": "text/plain"}])
    state, text = status_text(a, task_id)
    assert state == TaskState.COMPLETED
    [failed] = inputs_entry(task_id)
    assert "resolves only to refused addresses" in failed["error"]
    assert text.startswith(failed["error"])
    assert not TaskFile.objects.exists()


def test_an_unexpected_error_while_fetching_fails_only_that_part(
    files_world, file_server, settings
):
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    a = files_world.a
    url = file_server.url("/hello.txt")
    with mock.patch("runtime.kernel.files.fetch_part", side_effect=RuntimeError("boom")):
        task_id = send(a, [{"text": "check"}, {"url": url, "mediaType": "text/plain"}])
    state, text = status_text(a, task_id)
    assert state == TaskState.COMPLETED
    [failed] = inputs_entry(task_id)
    assert failed["error"] == "the fetch failed (RuntimeError)"
    assert text.startswith("the fetch failed (RuntimeError)")


def test_an_oversized_fetched_url_part_fails_that_part(files_world, file_server, settings):
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    settings.FILES_FETCH_MAX_BYTES = 1000
    a = files_world.a
    url = file_server.url("/big.txt")
    task_id = send(a, [{"text": "check"}, {"url": url, "mediaType": "text/plain"}])
    assert status_text(a, task_id) == (
        TaskState.COMPLETED,
        f"{url} is larger than 1000 bytes / ",
    )
    assert not TaskFile.objects.exists()


def test_a_url_part_of_the_wrong_media_type_is_refused(files_world, file_server, settings):
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    a = files_world.a
    url = file_server.url("/fake.json")
    task_id = send(a, [{"text": "check"}, {"url": url, "mediaType": "application/json"}])
    state, text = status_text(a, task_id)
    assert state == TaskState.COMPLETED
    [failed] = inputs_entry(task_id)
    assert failed["error"] == "the part declares application/json but the server sent text/plain"
    assert text.startswith(failed["error"])


def test_a_url_part_of_an_unsupported_media_type_is_refused_before_fetching(
    files_world, file_server, settings
):
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    a = files_world.a
    url = file_server.url("/hello.txt")
    task_id = send(a, [{"text": "check"}, {"url": url, "mediaType": "application/x-msdownload"}])
    state, _ = status_text(a, task_id)
    assert state == TaskState.COMPLETED
    [failed] = inputs_entry(task_id)
    assert failed["error"] == (
        "the media type application/x-msdownload is not one this server accepts"
    )


class SlowFileServer(FileServer):
    """Answers after ``delay`` seconds, as a far or overloaded host does."""

    def __init__(self, delay: float):
        super().__init__({"/slow.txt": ("text/plain", b"slow but here")})
        handler = self.server.RequestHandlerClass
        serve = handler.do_GET

        def do_get(h):
            time.sleep(delay)
            serve(h)

        handler.do_GET = do_get


@pytest.mark.django_db(transaction=True)
def test_the_lease_is_kept_while_url_parts_are_fetched(files_world, settings):
    # Each part may take the fetch timeout; without the heartbeat, slow parts outlast the
    # lease, the sweep hands the turn to another worker, and that one fetches them again.
    from runtime.turn.batch import RunBatch
    from runtime.turn.claim import turn_claim
    from runtime.turn.runner import TurnRunner
    from tests import core

    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    settings.TURN_LEASE_SECONDS = 1
    server = SlowFileServer(delay=2.5)
    try:
        url = server.url("/slow.txt")
        task = core.send(
            files_world.a,
            "writer",
            "read",
            parts=[{"text": "read"}, {"url": url, "mediaType": "text/plain"}],
        )
        batch = RunBatch(task_pk=task.pk, worker_id="first")
        with batch.claimed() as claimed:
            runner = TurnRunner(batch, claimed)
            fetch = runner.step(claimed)  # the url parts' fetch, made once this block commits
        taken = {}

        def second_worker():
            time.sleep(1.8)  # the first lease (1 s) has long run out by now
            taken["task"] = turn_claim(task_pk=task.pk, worker_id="second")
            connection.close()

        rival = threading.Thread(target=second_worker)
        rival.start()
        fetched = runner.wait(fetch)
        with batch.locked() as task:  # raises LeaseLost if the turn was taken
            fetch.then(task, fetched)
        rival.join()
    finally:
        server.stop()
    assert taken["task"] is None
    task.refresh_from_db()
    assert task.lease_owner == "first"
    [fetched] = inputs_entry(task.public_id)
    assert fetched["text"] == "slow but here"


def test_a_message_with_more_url_parts_than_the_limit_is_refused_at_the_edge(files_world, settings):
    settings.A2A_MAX_URL_PARTS = 2
    parts = [{"text": "many"}] + [
        {"url": f"https://files.example.test/{i}.txt", "mediaType": "text/plain"} for i in range(3)
    ]
    message = {"role": "ROLE_USER", "messageId": "m-many", "parts": parts}
    body = rpc(files_world.a, "SendMessage", {"message": message}).json()
    assert body["error"]["code"] == -32602
    assert "message.parts" in body["error"]["message"] and "limit is 2" in body["error"]["message"]
    assert not Task.objects.exists()
