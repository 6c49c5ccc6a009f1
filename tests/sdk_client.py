"""A partner agent built on the a2a-sdk 1.3 client, talking JSON-RPC to a live stack
(tests/live.py), and builders/readers of the SDK's protobuf messages.

The tests are plain synchronous functions (the ORM is used between calls); each call to the
client runs on one event loop per test, so the client's HTTP connections stay on one loop.
"""

import asyncio
import time
import uuid

import httpx
from a2a.client import ClientCallContext, ClientConfig, ClientFactory
from a2a.client.service_parameters import ServiceParametersFactory, with_a2a_extensions
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from google.protobuf import json_format, struct_pb2

SETTLED = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
    TaskState.TASK_STATE_INPUT_REQUIRED,
    TaskState.TASK_STATE_AUTH_REQUIRED,
}


def user_message(
    text: str | None = None,
    *,
    task_id: str = "",
    context_id: str = "",
    metadata: dict | None = None,
    data=None,
    message_id: str | None = None,
) -> Message:
    message = Message(
        message_id=message_id or str(uuid.uuid4()),
        role=Role.ROLE_USER,
        task_id=task_id,
        context_id=context_id,
    )
    if text is not None:
        message.parts.append(Part(text=text))
    if data is not None:
        part = Part()
        part.data.CopyFrom(json_format.ParseDict(data, struct_pb2.Value()))
        message.parts.append(part)
    if metadata is not None:
        message.metadata.update(metadata)
    return message


def _with_own_connection(fn, *args):
    from django.db import connection

    try:
        return fn(*args)
    finally:
        connection.close()


def payload(event: StreamResponse):
    """The task, message, statusUpdate or artifactUpdate a StreamResponse carries."""
    return getattr(event, event.WhichOneof("payload"))


def as_dict(proto) -> dict:
    return json_format.MessageToDict(proto)


def status_text(task: Task) -> str:
    return "\n".join(p.text for p in task.status.message.parts if p.text)


STREAM_TIMEOUT_SECONDS = 90


class Partner:
    """One partner (one bearer token) calling the agents of a tenant with the SDK's client."""

    def __init__(self, base_url: str, token: str):
        self.base_url = base_url
        self.token = token
        self.loop = asyncio.new_event_loop()
        self.http = httpx.AsyncClient(
            headers={"Authorization": f"Bearer {token}"}, timeout=httpx.Timeout(60)
        )
        self._clients: dict = {}

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def client(self, agent_path: str, *, polling: bool = False, streaming: bool = False):
        key = (agent_path, polling, streaming)
        if key not in self._clients:
            config = ClientConfig(httpx_client=self.http, polling=polling, streaming=streaming)
            self._clients[key] = self.run(
                ClientFactory(config).create_from_url(f"{self.base_url}{agent_path}")
            )
        return self._clients[key]

    @staticmethod
    def context(extensions=()) -> ClientCallContext | None:
        if not extensions:
            return None
        return ClientCallContext(
            service_parameters=ServiceParametersFactory.create(
                [with_a2a_extensions(list(extensions))]
            )
        )

    def send(
        self,
        agent_path: str,
        message: Message,
        *,
        polling: bool = False,
        extensions=(),
        history_length: int | None = None,
    ):
        """SendMessage; returns the Task or the Message the server answered with."""
        configuration = SendMessageConfiguration()
        if history_length is not None:
            configuration.history_length = history_length
        request = SendMessageRequest(message=message, configuration=configuration)

        client = self.client(agent_path, polling=polling)

        async def go():
            events = [
                ev async for ev in client.send_message(request, context=self.context(extensions))
            ]
            assert len(events) == 1
            return getattr(events[0], events[0].WhichOneof("payload"))

        return self.run(go())

    def _collect(self, events, on_event, stop_when):
        """Read a stream to its end (or until ``stop_when(event)``, then disconnect), calling
        ``on_event(event)`` after each event in a thread of its own (it may use the ORM)."""

        async def go():
            seen = []
            try:
                async for event in events:
                    seen.append(event)
                    if on_event is not None:
                        await asyncio.to_thread(_with_own_connection, on_event, event)
                    if stop_when is not None and stop_when(event):
                        break
            finally:
                await events.aclose()
            return seen

        # A stream that never ends (keep-alives keep the read alive) fails the test, not CI.
        return self.run(asyncio.wait_for(go(), timeout=STREAM_TIMEOUT_SECONDS))

    def stream(
        self,
        agent_path: str,
        message: Message,
        *,
        extensions=(),
        on_event=None,
        stop_when=None,
        history_length: int | None = None,
    ) -> list[StreamResponse]:
        """SendStreamingMessage: the StreamResponses in the order they came."""
        configuration = SendMessageConfiguration()
        if history_length is not None:
            configuration.history_length = history_length
        request = SendMessageRequest(message=message, configuration=configuration)
        client = self.client(agent_path, streaming=True)
        events = client.send_message(request, context=self.context(extensions))
        return self._collect(events, on_event, stop_when)

    def subscribe(
        self, agent_path: str, task_id: str, *, extensions=(), on_event=None, stop_when=None
    ) -> list[StreamResponse]:
        """SubscribeToTask: the StreamResponses in the order they came."""
        client = self.client(agent_path, streaming=True)
        events = client.subscribe(
            SubscribeToTaskRequest(id=task_id), context=self.context(extensions)
        )
        return self._collect(events, on_event, stop_when)

    def get(self, agent_path: str, task_id: str, *, extensions=(), history_length=None) -> Task:
        request = GetTaskRequest(id=task_id)
        if history_length is not None:
            request.history_length = history_length
        client = self.client(agent_path)
        return self.run(client.get_task(request, context=self.context(extensions)))

    def list(self, agent_path: str, **fields):
        client = self.client(agent_path)
        return self.run(client.list_tasks(ListTasksRequest(**fields)))

    def cancel(self, agent_path: str, task_id: str) -> Task:
        client = self.client(agent_path)
        return self.run(client.cancel_task(CancelTaskRequest(id=task_id)))

    def wait_for(
        self, agent_path: str, task_id: str, states=SETTLED, timeout=30, predicate=None, **kw
    ) -> Task:
        """GetTask until the task is in one of ``states`` (a condition with a deadline)."""
        deadline = time.monotonic() + timeout
        while True:
            task = self.get(agent_path, task_id, **kw)
            if task.status.state in states and (predicate is None or predicate(task)):
                return task
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"task {task_id} still {TaskState.Name(task.status.state)} after {timeout}s"
                )
            time.sleep(0.1)

    def close(self) -> None:
        for client in self._clients.values():
            self.run(client.close())
        self.run(self.http.aclose())
        self.loop.close()
