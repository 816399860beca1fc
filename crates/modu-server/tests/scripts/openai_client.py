"""Drives modu-server with the official OpenAI SDK; prints one JSON object with what it saw.

Usage: python openai_client.py BASE_URL API_KEY MODEL
"""
import json
import sys

import openai

base_url, api_key, model = sys.argv[1], sys.argv[2], sys.argv[3]
client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
out = {"sdk_version": openai.__version__}

out["models"] = [m.id for m in client.models.list()]

completion = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "Weather in Paris?"}],
)
out["completion"] = {
    "id": completion.id,
    "object": completion.object,
    "model": completion.model,
    "role": completion.choices[0].message.role,
    "content": completion.choices[0].message.content,
    "finish_reason": completion.choices[0].finish_reason,
    "usage": completion.usage.model_dump() if completion.usage else None,
}

chunks = []
stream = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "Weather in Paris?"}],
    stream=True,
    stream_options={"include_usage": True},
)
for chunk in stream:
    chunks.append(chunk)
text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
out["stream"] = {
    "ids": sorted({c.id for c in chunks}),
    "objects": sorted({c.object for c in chunks}),
    "content": text,
    "finish_reasons": [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason],
    "usage": next((c.usage.model_dump() for c in chunks if c.usage), None),
}

try:
    client.chat.completions.create(model="no-such-agent", messages=[{"role": "user", "content": "x"}])
    out["unknown_model"] = None
except openai.NotFoundError as e:
    out["unknown_model"] = {"status": e.status_code, "code": e.code}

bad = openai.OpenAI(base_url=base_url, api_key="wrong-key", max_retries=0)
try:
    bad.models.list()
    out["bad_key"] = None
except openai.AuthenticationError as e:
    out["bad_key"] = {"status": e.status_code}

# The SDK's default retries (2): a failed run must not be run again.
retrying = openai.OpenAI(base_url=base_url, api_key=api_key)
try:
    retrying.chat.completions.create(model="limited", messages=[{"role": "user", "content": "x"}])
    out["failed_run"] = None
except openai.APIStatusError as e:
    out["failed_run"] = {"status": e.status_code, "code": e.code}

print(json.dumps(out))
