"""Drives modu-server's A2A endpoint with the official a2a-sdk client; prints one JSON object.

Usage: python a2a_client.py BASE_URL TOKEN
(BASE_URL serves the agents `weather` and `approval`, whose tool needs approval.)
"""

import asyncio
import json
import sys
import uuid

import httpx
from google.protobuf import json_format

from a2a.client import ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    SendMessageRequest,
    SubscribeToTaskRequest,
)


def request(parts, task_id=None, context_id=None):
    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": parts}
    if task_id:
        message["taskId"] = task_id
    if context_id:
        message["contextId"] = context_id
    return json_format.ParseDict({"message": message}, SendMessageRequest())


async def collect(client, req):
    """Every stream response of one message, as dicts."""
    return [json_format.MessageToDict(r) async for r in client.send_message(req)]


def summary(responses):
    kinds = [next(iter(r)) for r in responses]
    last_state = None
    task_id = None
    context_id = None
    text = ""
    answer = None
    for r in responses:
        if "task" in r:
            task_id = r["task"]["id"]
            context_id = r["task"].get("contextId")
            last_state = r["task"]["status"]["state"]
            for artifact in r["task"].get("artifacts", []):
                answer = "".join(p.get("text", "") for p in artifact["parts"])
        if "statusUpdate" in r:
            last_state = r["statusUpdate"]["status"]["state"]
        if "artifactUpdate" in r:
            update = r["artifactUpdate"]
            chunk = "".join(p.get("text", "") for p in update["artifact"]["parts"])
            text = text + chunk if update.get("append") else chunk
            answer = text
    return {"kinds": kinds, "state": last_state, "taskId": task_id, "contextId": context_id, "answer": answer}


async def main():
    base, token = sys.argv[1], sys.argv[2]
    out = {}
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        blocking = ClientFactory(ClientConfig(httpx_client=http, streaming=False))
        streaming = ClientFactory(ClientConfig(httpx_client=http, streaming=True))

        weather = await blocking.create_from_url(f"{base}/a2a/weather")
        out["card"] = (await http.get(f"{base}/a2a/weather/.well-known/agent-card.json")).json()
        sent = await collect(
            weather,
            request([{"text": "Weather in Paris?"}, {"data": {"mcp": {"servers": []}}}]),
        )
        out["send"] = summary(sent)
        task = await weather.get_task(GetTaskRequest(id=out["send"]["taskId"]))
        out["get"] = json_format.MessageToDict(task)
        listed = await weather.list_tasks(ListTasksRequest(page_size=10, include_artifacts=True))
        out["list"] = json_format.MessageToDict(listed)

        weather_stream = await streaming.create_from_url(f"{base}/a2a/weather")
        out["stream"] = summary(await collect(weather_stream, request([{"text": "And tomorrow?"}])))

        approval = await streaming.create_from_url(f"{base}/a2a/approval")
        paused = await collect(approval, request([{"text": "Weather?"}]))
        out["paused"] = summary(paused)
        out["pausedMessage"] = next(
            (r["statusUpdate"]["status"].get("message") for r in reversed(paused) if "statusUpdate" in r), None
        )
        resumed = await collect(
            approval,
            request([{"text": "approve"}], task_id=out["paused"]["taskId"], context_id=out["paused"]["contextId"]),
        )
        out["resumed"] = summary(resumed)

        # A second paused task, rejected with a data part, and a third one cancelled.
        second = summary(await collect(approval, request([{"text": "Weather?"}])))
        rejected = await collect(
            approval,
            request([{"data": {"approved": False, "message": "not now"}}], task_id=second["taskId"]),
        )
        out["rejected"] = summary(rejected)
        third = summary(await collect(approval, request([{"text": "Weather?"}])))
        cancelled = await approval.cancel_task(CancelTaskRequest(id=third["taskId"]))
        out["cancelled"] = json_format.MessageToDict(cancelled)
        try:
            await approval.cancel_task(CancelTaskRequest(id=out["resumed"]["taskId"] or out["paused"]["taskId"]))
            out["cancelEnded"] = "no error"
        except Exception as e:  # noqa: BLE001 - the SDK's typed error is what is checked
            out["cancelEnded"] = type(e).__name__
        try:
            await approval.get_task(GetTaskRequest(id="no-such-task"))
            out["missing"] = "no error"
        except Exception as e:  # noqa: BLE001
            out["missing"] = type(e).__name__

        # SubscribeToTask: the sender of a slow task goes away after its first response; a
        # subscriber follows the task to its end. An ended task cannot be subscribed to.
        slow = await streaming.create_from_url(f"{base}/a2a/slow")
        sending = slow.send_message(request([{"text": "Weather?"}]))
        first = json_format.MessageToDict(await sending.__anext__())
        await sending.aclose()
        out["slowTask"] = first["task"]["id"]
        followed = [
            json_format.MessageToDict(r) async for r in slow.subscribe(SubscribeToTaskRequest(id=out["slowTask"]))
        ]
        out["subscribed"] = summary(followed)
        try:
            async for _ in slow.subscribe(SubscribeToTaskRequest(id=out["slowTask"])):
                pass
            out["subscribeEnded"] = "no error"
        except Exception as e:  # noqa: BLE001
            out["subscribeEnded"] = type(e).__name__

        # A polling client (its requests say returnImmediately): the task comes back while
        # the slow tool still works; GetTask then follows it to its end.
        polling = ClientFactory(ClientConfig(httpx_client=http, streaming=False, polling=True))
        slow_polled = await polling.create_from_url(f"{base}/a2a/slow")
        out["polled"] = summary(await collect(slow_polled, request([{"text": "Weather?"}])))
        polls = 0
        while polls < 100:
            polls += 1
            task = await slow_polled.get_task(GetTaskRequest(id=out["polled"]["taskId"]))
            out["polledEnd"] = json_format.MessageToDict(task)
            if out["polledEnd"]["status"]["state"] not in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"):
                break
            await asyncio.sleep(0.1)
        out["polls"] = polls
    print(json.dumps(out))


asyncio.run(main())
