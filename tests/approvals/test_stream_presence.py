"""The task page says whether a caller watches the task on an A2A stream."""

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient
from django.urls import reverse

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_task_page_says_while_a_stream_is_attached(agents):
    task = agents.a.extra["make"].approval().task
    page = agents.a.client_for(agents.a.viewer)
    url = reverse("approvals:task", args=[task.public_id])
    endpoint = f"/a2a/{task.tenant.slug}/{task.agent.slug}"

    def streams_line() -> str:
        html = page.get(url).content.decode()
        return html[html.index("<dt>Streams</dt>") :].split("</dd>")[0]

    assert "none attached" in streams_line()

    async def watch():
        response = await AsyncClient().post(
            endpoint,
            data=json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "SubscribeToTask",
                    "params": {"id": task.public_id},
                }
            ),
            content_type="application/json",
            headers={"Authorization": f"Bearer {agents.a.token}", "A2A-Version": "1.0"},
        )
        stream = aiter(response.streaming_content)
        first = json.loads((await anext(stream)).decode().removeprefix("data: "))
        during = await sync_to_async(streams_line, thread_sensitive=False)()
        # The client goes away.
        await stream.aclose()
        await sync_to_async(response.close, thread_sensitive=False)()
        return first, during

    first, during = asyncio.run(watch())
    assert first["result"]["task"]["id"] == task.public_id
    assert "1 attached" in during
    assert "none attached" in streams_line()
    task.refresh_from_db()
    assert task.state == "TASK_STATE_AUTH_REQUIRED"  # watching ended, the task did not
