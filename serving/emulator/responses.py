"""HTTP responses of an emulated replica: the SSE stream and the whole JSON body of a request's
``n`` choices, in vLLM 0.32's shapes (a role chunk per choice first, one chunk per new token and
choice, the finishing chunk with ``finish_reason``, then the usage chunk with ``choices: []``).

Where it sits: used by server.py (live replicas). ``srv`` is the ReplicaServer, ``h`` its _Handle.
A stream the client drops, or an HTTP client that hangs up, aborts every choice still running.
"""

from __future__ import annotations

import asyncio
import json
import time

from starlette.responses import JSONResponse, Response

from serving.emulator.openai_api import _WORDS, CRASH_MESSAGE, REJECT_MESSAGE, error_body, error_response, sse_chunk, usage


async def stream_response(srv, h, chat: bool, model: str, include_usage: bool, continuous: bool):
    created = int(time.time())
    reqs = h.reqs
    sent = [0] * len(reqs)
    closed = [False] * len(reqs)
    rid = h.request_id
    try:
        if chat:
            for i, req in enumerate(reqs):
                yield sse_chunk(rid, chat, model, created, text="", role="assistant", index=i,
                                usage=usage(reqs, [0] * len(reqs)) if continuous else None)
        while True:
            await h.event.wait()
            h.event.clear()
            if h.crashed or any(r.finish_reason == "error" for r in reqs):
                msg = CRASH_MESSAGE if h.crashed else REJECT_MESSAGE
                yield "data: " + json.dumps(error_body(msg, 500)) + "\n\n"
                yield "data: [DONE]\n\n"
                return
            for i, req in enumerate(reqs):
                if closed[i]:
                    continue
                n = srv.n_out(req)
                done = req.finish_reason is not None
                while sent[i] < n:
                    sent[i] += 1
                    last = done and sent[i] == n
                    yield sse_chunk(rid, chat, model, created, text=_WORDS[sent[i] % len(_WORDS)], index=i,
                                    finish=req.finish_reason if last else None,
                                    usage=usage(reqs, list(sent)) if continuous else None)
                if done:
                    if sent[i] == 0:  # finished before any token
                        yield sse_chunk(rid, chat, model, created, text="", finish=req.finish_reason, index=i)
                    closed[i] = True
            if h.done:
                if include_usage:
                    yield sse_chunk(rid, chat, model, created, usage=usage(reqs, list(sent)), choices=False)
                yield "data: [DONE]\n\n"
                return
    finally:
        srv._abort_soon(h)


async def unary_response(srv, h, chat: bool, model: str, headers: dict, request):
    created = int(time.time())
    waiter = asyncio.ensure_future(_wait_done(h))
    try:
        while not waiter.done():
            # a client that hangs up aborts the request (vLLM aborts on disconnect)
            done, _ = await asyncio.wait({waiter}, timeout=0.25)
            if not done and await request.is_disconnected():
                waiter.cancel()
                srv._abort_soon(h)
                return Response(status_code=499)
    finally:
        if not waiter.done():
            waiter.cancel()
    if h.crashed:
        return error_response(CRASH_MESSAGE, 500, headers=headers)
    if any(r.finish_reason == "error" for r in h.reqs):
        return error_response(REJECT_MESSAGE, 500, headers=headers)
    choices = []
    for i, req in enumerate(h.reqs):
        text = "".join(_WORDS[j % len(_WORDS)] for j in range(1, req.out + 1))
        if chat:
            choices.append({"index": i, "message": {"role": "assistant", "content": text, "tool_calls": []},
                            "logprobs": None, "finish_reason": req.finish_reason, "stop_reason": None})
        else:
            choices.append({"index": i, "text": text, "logprobs": None, "finish_reason": req.finish_reason,
                            "stop_reason": None})
    obj = "chat.completion" if chat else "text_completion"
    return JSONResponse({"id": h.request_id, "object": obj, "created": created, "model": model, "choices": choices,
                         "usage": usage(h.reqs, [r.out for r in h.reqs])}, headers=headers)


async def _wait_done(h):
    while not (h.done or h.crashed):
        await h.event.wait()
        h.event.clear()
