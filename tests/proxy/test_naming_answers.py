"""Session naming order and tool-call detection (pure functions, no servers)."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest

from ramakv_proxy.answers import StreamScanner, read_json_answer
from ramakv_proxy.naming import SOURCES, Named, named_request, session_of


def body(**fields: object) -> bytes:
    return json.dumps({"model": "m", "messages": [], **fields}).encode()


@pytest.mark.parametrize(
    ("header", "fields", "want"),
    [
        ("h", {"session_id": "b", "user": "u"}, ("h", "header")),
        (None, {"session_id": "b", "vllm_xargs": {"session_id": "x"}}, ("b", "session_id")),
        (
            None,
            {"vllm_xargs": {"session_id": "x"}, "conversation_id": "c", "user": "u"},
            ("x", "vllm_xargs.session_id"),
        ),
        (None, {"conversation_id": "c", "user": "u"}, ("c", "conversation_id")),
        (None, {"user": "u"}, ("u", "user")),
        # empty or non-string values are skipped, the next source wins
        (None, {"session_id": "", "vllm_xargs": {"session_id": 5}, "user": "u"}, ("u", "user")),
        (None, {"vllm_xargs": "not-an-object", "conversation_id": "c"}, ("c", "conversation_id")),
        ("", {"user": "u"}, ("u", "user")),
        (None, {}, None),
    ],
)
def test_session_naming_order(header: str | None, fields: dict, want: object) -> None:
    assert session_of(header, body(**fields)) == want


def test_naming_sources_are_documented_in_order() -> None:
    assert SOURCES == ("header", "session_id", "vllm_xargs.session_id", "conversation_id", "user")


def test_bodies_that_are_not_json_objects_name_nothing() -> None:
    assert session_of(None, b'["user"]') is None
    assert session_of(None, b'{"user": ') is None


TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
USED = [
    {"role": "user", "content": "do it"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "done"},
]


@pytest.mark.parametrize(
    ("fields", "step"),
    [
        ({"tools": [TOOL], "messages": USED}, True),  # tools offered and in use
        ({"tools": [TOOL], "messages": USED[:2]}, True),  # a call, its result still to come
        ({"tools": [TOOL], "messages": [USED[0], {"role": "tool", "content": "x"}]}, True),
        ({"tools": [TOOL], "messages": USED[:1]}, False),  # offered, never used: a chat
        ({"tools": [], "messages": USED}, False),  # none offered
        ({"messages": USED}, False),
        ({"tools": "f", "messages": USED}, False),
        ({"tools": [TOOL], "messages": "not a list"}, False),
        (
            {
                "tools": [TOOL],
                "messages": [{"role": "assistant", "content": "", "tool_calls": []}],
            },
            False,
        ),
    ],
)
def test_an_agent_step_offers_tools_and_carries_their_use(fields: dict, step: bool) -> None:
    raw = json.dumps({"model": "m", "user": "u", **fields}).encode()
    assert named_request(None, raw) == Named("u", "user", step)
    assert named_request("h", raw) == Named("h", "header", step)


def test_a_header_named_request_is_parsed_only_when_it_offers_tools() -> None:
    assert named_request("h", b"not json at all") == Named("h", "header", False)
    assert named_request("h", b'{"tools": [') == Named("h", "header", False)
    assert named_request(None, b'{"tools": [1], "messages": []}') is None  # no name


def chat(message: dict, finish: str) -> bytes:
    answer = {"choices": [{"index": 0, "message": message, "finish_reason": finish}]}
    return json.dumps(answer).encode()


def test_json_answers_calling_a_tool() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    named = chat({"role": "assistant", "content": "", "tool_calls": [call]}, "stop")
    auto = chat({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls")
    plain = chat({"role": "assistant", "content": "the word tool_calls", "tool_calls": []}, "stop")
    assert read_json_answer(named).tool_call  # vLLM's named tool_choice: finish_reason stop
    assert read_json_answer(auto).tool_call
    assert not read_json_answer(plain).tool_call
    assert not read_json_answer(b'{"choices": "tool_calls"}').tool_call


def test_stream_scanner_sees_tool_calls_split_across_chunks() -> None:
    delta = {
        "tool_calls": [
            {"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}
        ]
    }
    lines = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    raw = (
        b"".join(b"data: " + json.dumps(x).encode() + b"\n\n" for x in lines) + b"data: [DONE]\n\n"
    )
    scanner = StreamScanner()
    for i in range(0, len(raw), 7):  # network chunks that cut lines anywhere
        scanner.feed(raw[i : i + 7])
    scanner.close()
    assert scanner.answer.tool_call and scanner.done and scanner.params is None
    text = StreamScanner()
    text.feed(b'data: {"choices": [{"delta": {"content": "no tool_calls here"}}]}\n\n')
    assert not text.answer.tool_call


DATA = Path(__file__).with_name("data")


def sse_objects(raw: bytes) -> list[dict]:
    lines = [ln[6:] for ln in raw.decode().split("\n") if ln.startswith("data: ")]
    return [json.loads(ln) for ln in lines if ln != "[DONE]"]


def test_the_real_engines_tool_calls_are_seen() -> None:
    """vLLM 0.32 CPU's own answers to a named tool_choice (captured once from the real
    engine, --enable-auto-tool-choice --tool-call-parser pythonic): the tiny model with
    dummy weights runs out of max_tokens inside the arguments (finish_reason "length"), so
    only the tool_calls in the message / deltas say a tool is called."""
    plain = (DATA / "vllm032_named_tool_call.json").read_bytes()
    assert read_json_answer(plain).tool_call
    scanner = StreamScanner()
    scanner.feed((DATA / "vllm032_named_tool_call.sse").read_bytes())
    scanner.close()
    assert scanner.answer.tool_call and scanner.done


async def test_the_stand_in_answers_tool_calls_in_the_real_engines_shape(engine) -> None:
    real_plain = json.loads((DATA / "vllm032_named_tool_call.json").read_bytes())
    real_stream = sse_objects((DATA / "vllm032_named_tool_call.sse").read_bytes())
    named = {"type": "function", "function": {"name": "list_files"}}
    body = {"model": "m", "messages": [{"role": "user", "content": "ls"}], "tool_choice": named}
    body["tools"] = [
        {
            "type": "function",
            "function": {
                "name": "list_files",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
        }
    ]
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{engine.url}/v1/chat/completions", json=body) as r:
            plain = await r.json()
        async with http.post(
            f"{engine.url}/v1/chat/completions", json={**body, "stream": True}
        ) as r:
            stream = sse_objects(await r.read())
    message, real_message = plain["choices"][0]["message"], real_plain["choices"][0]["message"]
    assert set(message) == set(real_message)
    call, real_call = message["tool_calls"][0], real_message["tool_calls"][0]
    assert set(call) == set(real_call) and set(call["function"]) == set(real_call["function"])
    assert call["id"].startswith("chatcmpl-tool-") and real_call["id"].startswith("chatcmpl-tool-")
    assert len(call["id"]) == len(real_call["id"])
    assert json.loads(call["function"]["arguments"]) == {"path": "stand-in"}
    assert plain["choices"][0]["finish_reason"] == "stop"  # named: stop, as vLLM (not length)

    def deltas(objs: list[dict]) -> list[dict]:
        return [o["choices"][0]["delta"] for o in objs]

    ours, real = deltas(stream), deltas(real_stream)
    assert ours[0] == real[0] == {"role": "assistant", "content": ""}
    head, real_head = ours[1]["tool_calls"][0], real[1]["tool_calls"][0]
    assert set(head) == set(real_head) and set(head["function"]) == set(real_head["function"])
    for d, r in zip(ours[2:], real[2:], strict=False):
        assert set(d["tool_calls"][0]) == set(r["tool_calls"][0]) == {"index", "function"}
    # the last delta still carries a piece of the arguments, with the finish reason
    assert "tool_calls" in ours[-1] and "tool_calls" in real[-1]
    assert stream[-1]["choices"][0]["finish_reason"] == "stop"
    assert all(o["choices"][0]["finish_reason"] is None for o in stream[:-1])
    args = head["function"]["arguments"] + "".join(
        d["tool_calls"][0]["function"]["arguments"] for d in ours[2:]
    )
    assert json.loads(args) == {"path": "stand-in"}
