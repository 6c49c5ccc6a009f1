"""A partner on the a2a-sdk 0.3 client, as its README has one connect: run by
tests/interop/test_sdk03.py with the interpreter of .venv-sdk03 (the project's own venv has
a2a-sdk 1.x, which is the same package). Reads one JSON command on stdin, prints one JSON
answer on stdout.

Commands:
- {"do": "send", "url", "token", "text", "streaming"}: ClientFactory.connect(url) (the card
  fetched as the 0.3 client fetches it, no A2A-Version), then send_message; the events.
- {"do": "follow", "url", "token", "text", "push_url", "push_token", "answer"}: a non-blocking
  send, tasks/pushNotificationConfig/set on its task, then the answer on the same task.
- {"do": "parse_tasks", "bodies"}: each push body read as the 0.3 SDK's Task.
"""

import asyncio
import json
import sys
import uuid

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.types import (
    Message,
    Part,
    PushNotificationConfig,
    Role,
    Task,
    TaskPushNotificationConfig,
    TaskQueryParams,
    TaskState,
    TextPart,
)


def message(text: str, task_id=None, context_id=None) -> Message:
    return Message(
        role=Role.user,
        message_id=str(uuid.uuid4()),
        parts=[Part(root=TextPart(text=text))],
        task_id=task_id,
        context_id=context_id,
    )


def event_json(event) -> dict:
    if isinstance(event, tuple):  # (Task, update event or None)
        task, update = event
        out = {"kind": "task", "task": task.model_dump(mode="json", exclude_none=True)}
        if update is not None:
            out["update"] = update.model_dump(mode="json", exclude_none=True)
        return out
    return {"kind": "message", "message": event.model_dump(mode="json", exclude_none=True)}


async def send(command: dict) -> dict:
    async with httpx.AsyncClient(
        headers={"Authorization": f"Bearer {command['token']}"}, timeout=60
    ) as http:
        config = ClientConfig(httpx_client=http, streaming=command["streaming"])
        client = await ClientFactory.connect(command["url"], client_config=config)
        card = await client.get_card()
        events = [event_json(e) async for e in client.send_message(message(command["text"]))]
        return {"card_url": card.url, "transport": card.preferred_transport, "events": events}


async def follow(command: dict) -> dict:
    async with httpx.AsyncClient(
        headers={"Authorization": f"Bearer {command['token']}"}, timeout=60
    ) as http:
        config = ClientConfig(httpx_client=http, streaming=False, polling=True)
        client = await ClientFactory.connect(command["url"], client_config=config)
        [(task, _)] = [e async for e in client.send_message(message(command["text"]))]
        registered = await client.set_task_callback(
            TaskPushNotificationConfig(
                task_id=task.id,
                push_notification_config=PushNotificationConfig(
                    url=command["push_url"], token=command["push_token"]
                ),
            )
        )
        # The send returned at once: wait (with a deadline) for the question before answering.
        deadline = asyncio.get_running_loop().time() + 30
        while task.status.state != TaskState.input_required:
            assert asyncio.get_running_loop().time() < deadline, task.status.state
            await asyncio.sleep(0.1)
            task = await client.get_task(TaskQueryParams(id=task.id))
        answered = [
            event_json(e)
            async for e in client.send_message(
                message(command["answer"], task_id=task.id, context_id=task.context_id)
            )
        ]
        return {
            "task_id": task.id,
            "config": registered.model_dump(mode="json", exclude_none=True),
            "answered": answered,
        }


def parse_tasks(command: dict) -> dict:
    tasks = [Task.model_validate(body) for body in command["bodies"]]
    return {"states": [t.status.state.value for t in tasks], "ids": [t.id for t in tasks]}


def main() -> None:
    command = json.load(sys.stdin)
    if command["do"] == "send":
        answer = asyncio.run(send(command))
    elif command["do"] == "follow":
        answer = asyncio.run(follow(command))
    elif command["do"] == "parse_tasks":
        answer = parse_tasks(command)
    else:
        raise SystemExit(f"unknown command {command['do']!r}")
    json.dump(answer, sys.stdout)


if __name__ == "__main__":
    main()
