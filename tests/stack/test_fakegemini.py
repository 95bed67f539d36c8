"""The Gemini stub, driven by the real google-genai client over loopback HTTP.

If these pass, a test of the agent loop that scripts the stub exercises the same request
building, response parsing, error mapping and retrying as production does. The stub runs
as its own process (as the local stack runs it) and is stopped by its pid.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pydantic
import pytest
from google import genai
from google.genai import errors, types

from infra.fakes.gemini import demo, tour
from infra.fakes.gemini.client import FakeGemini, FakeGeminiError
from infra.fakes.gemini.state import EXHAUSTED_MESSAGE, ScriptItemError, validate_item
from shared.agent import prompts
from shared.state.models import Note, NoteKind
from tests.spawned import spawn_fake, stop_fake

KEY = "test-key"
MODEL = "gemini-2.5-flash"
READY_PREFIX = "fakegemini listening on "
FAST_RETRIES = types.HttpRetryOptions(attempts=3, initial_delay=0.1, max_delay=0.5)
NO_AFC = types.AutomaticFunctionCallingConfig(disable=True)


@dataclass
class Stub:
    """A running stub process: its URL, its control client and its stderr log."""

    proc: subprocess.Popen[str]
    url: str
    control: FakeGemini
    log_path: Path

    def client(self, *, api_key: str = KEY, **http: Any) -> genai.Client:
        return genai.Client(api_key=api_key, http_options=types.HttpOptions(base_url=self.url, **http))


def _start(log_path: Path, *flags: str) -> Stub:
    """Spawn the stub on a free port (``--port 0``) and read the URL from its ready line."""
    proc, url = spawn_fake("gemini", READY_PREFIX, log_path, *flags)
    return Stub(proc, url, FakeGemini(url), log_path)


def _serving(folder: Path, *flags: str) -> Iterator[Stub]:
    """A module's stub, stopped when the module is done with it."""
    stub = _start(folder / "stderr.log", *flags)
    try:
        yield stub
    finally:
        stop_fake(stub.proc)


@pytest.fixture(scope="module")
def stub_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stub]:
    yield from _serving(tmp_path_factory.mktemp("fakegemini"), "--api-key", KEY)


@pytest.fixture
def stub(stub_process: Stub) -> Stub:
    stub_process.control.reset()
    return stub_process


@pytest.fixture(scope="module")
def demo_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stub]:
    yield from _serving(tmp_path_factory.mktemp("fakegemini-demo"), "--demo")


@pytest.fixture
def demo_stub(demo_process: Stub) -> Stub:
    demo_process.control.reset()
    return demo_process


def get_weather(city: str, unit: str = "celsius") -> dict[str, str]:
    """Return the current weather for a city."""
    return {"city": city, "unit": unit}


def ask_operator(question: str, options: list[str] | None = None, blocking: bool = True) -> str:
    """Ask the human operator a question in the Slack thread."""
    return ""


# -- the real client against scripted replies ------------------------------------------


def test_text_reply_and_what_the_sdk_sends(stub: Stub) -> None:
    stub.control.script(FakeGemini.text("Hello from the stub"))
    config = types.GenerateContentConfig(system_instruction="Be brief.", temperature=0.2, max_output_tokens=64)

    client = stub.client()
    response = client.models.generate_content(model=MODEL, contents="Hi there", config=config)

    assert response.text == "Hello from the stub"
    assert response.candidates is not None
    assert response.candidates[0].finish_reason == types.FinishReason.STOP
    assert response.model_version == MODEL
    assert response.response_id == "fakegemini-1"
    assert response.usage_metadata is not None
    assert response.usage_metadata.total_token_count
    [sent] = stub.control.requests()
    assert sent["path"] == f"/v1/models/{MODEL}:generateContent"
    assert sent["headers"]["x-goog-api-key"] == "[redacted]"
    assert sent["headers"]["x-goog-api-client"].startswith("google-genai-sdk/")
    assert sent["body"]["contents"] == [{"role": "user", "parts": [{"text": "Hi there"}]}]
    assert sent["body"]["systemInstruction"]["parts"] == [{"text": "Be brief."}]
    assert sent["body"]["generationConfig"] == {"temperature": 0.2, "maxOutputTokens": 64}
    assert stub.control.remaining() == []


def test_function_call_is_parsed_from_a_callable_tool(stub: Stub) -> None:
    stub.control.script(FakeGemini.call("get_weather", city="Paris"))
    config = types.GenerateContentConfig(
        tools=[get_weather],
        automatic_function_calling=NO_AFC,
        tool_config=types.ToolConfig(
            function_calling_config=types.FunctionCallingConfig(mode=types.FunctionCallingConfigMode.AUTO)
        ),
    )

    client = stub.client()
    response = client.models.generate_content(model=MODEL, contents="Weather in Paris?", config=config)

    assert response.function_calls is not None
    [call] = response.function_calls
    assert (call.name, call.args, call.id) == ("get_weather", {"city": "Paris"}, "fakegemini-call-1")
    body = stub.control.requests()[0]["body"]
    [declaration] = body["tools"][0]["functionDeclarations"]
    assert declaration["name"] == "get_weather"
    assert declaration["description"] == "Return the current weather for a city."
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "AUTO"}}


def test_multi_turn_carries_the_function_response(stub: Stub) -> None:
    client = stub.client()
    # from_callable(client=...) is typed for the internal BaseApiClient; this is its public twin.
    declaration = types.FunctionDeclaration.from_callable_with_api_option(
        callable=get_weather, api_option="GEMINI_API", use_json_schema=True
    )
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[declaration])], automatic_function_calling=NO_AFC
    )
    stub.control.script(
        FakeGemini.calls(("get_weather", {"city": "Oslo"}), text="Let me check."),
        FakeGemini.text("It is 3 degrees in Oslo."),
    )
    contents: list[types.Content] = [types.Content(role="user", parts=[types.Part.from_text(text="Oslo?")])]

    first = client.models.generate_content(model=MODEL, contents=contents, config=config)
    assert first.candidates is not None
    assert first.candidates[0].content is not None
    assert first.function_calls is not None
    [call] = first.function_calls
    contents.append(first.candidates[0].content)
    result = types.FunctionResponse(id=call.id, name="get_weather", response={"result": {"temp": 3}})
    contents.append(types.Content(role="user", parts=[types.Part(function_response=result)]))
    second = client.models.generate_content(model=MODEL, contents=contents, config=config)

    assert second.text == "It is 3 degrees in Oslo."
    sent = stub.control.requests()[1]["body"]["contents"]
    assert sent[1] == {
        "role": "model",
        "parts": [
            {"text": "Let me check."},
            {"functionCall": {"id": call.id, "name": "get_weather", "args": {"city": "Oslo"}}},
        ],
    }
    assert sent[2]["parts"] == [
        {"functionResponse": {"id": call.id, "name": "get_weather", "response": {"result": {"temp": 3}}}}
    ]


def test_the_connection_stays_open_between_replies(stub: Stub) -> None:
    """As Gemini's endpoint keeps it: two model requests on one connection, each answered in turn (round 3's session
    14: HTTP/1.0, every reply closed its connection, so every model request of the product opened a new one); one
    whose body cannot be read is answered and its connection closed, its leftover never read as a request."""
    stub.control.script(FakeGemini.text("one"), FakeGemini.text("two"))
    host = stub.url.split("//", 1)[1]
    connection = http.client.HTTPConnection(host, timeout=10)
    path = f"/v1beta/models/{MODEL}:generateContent"
    body = json.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
    headers = {"x-goog-api-key": KEY, "Content-Type": "application/json"}
    try:
        texts = []
        for _ in range(2):
            connection.request("POST", path, body=body, headers=headers)
            reply = connection.getresponse()
            assert reply.status == 200
            assert not reply.will_close
            texts.append(json.loads(reply.read())["candidates"][0]["content"]["parts"][0]["text"])
        assert texts == ["one", "two"]
        connection.request("POST", path, body=body, headers={**headers, "Content-Length": "-1"})
        refused = connection.getresponse()
        assert refused.status == 400
        assert refused.will_close
    finally:
        connection.close()


def test_503_then_success_is_retried_by_the_sdk(stub: Stub) -> None:
    stub.control.script(FakeGemini.error(503, "UNAVAILABLE", "The model is overloaded."), FakeGemini.text("ok"))

    client = stub.client(retry_options=FAST_RETRIES)
    response = client.models.generate_content(model=MODEL, contents="hi")

    assert response.text == "ok"
    assert [r["reply"]["status"] for r in stub.control.requests()] == [503, 200]


def test_persistent_503_raises_server_error(stub: Stub) -> None:
    stub.control.script(FakeGemini.error(503, "UNAVAILABLE", "The model is overloaded.", times=5))

    client = stub.client(retry_options=FAST_RETRIES)
    with pytest.raises(errors.ServerError) as caught:
        client.models.generate_content(model=MODEL, contents="hi")

    assert (caught.value.code, caught.value.status) == (503, "UNAVAILABLE")
    assert caught.value.message == "The model is overloaded."
    assert len(stub.control.requests()) == 3
    assert stub.control.remaining()[0]["times"] == 2


def test_429_is_a_client_error_with_retry_info(stub: Stub) -> None:
    stub.control.script(FakeGemini.error(429, "RESOURCE_EXHAUSTED", "Quota exceeded.", retry_after=7))

    client = stub.client()
    with pytest.raises(errors.ClientError) as caught:
        client.models.generate_content(model=MODEL, contents="hi")

    assert (caught.value.code, caught.value.status) == (429, "RESOURCE_EXHAUSTED")
    assert caught.value.response.headers["retry-after"] == "7"
    assert caught.value.details["error"]["details"][0]["retryDelay"] == "7s"


def test_context_overflow_is_not_retried(stub: Stub) -> None:
    stub.control.script(FakeGemini.context_overflow(), FakeGemini.text("never sent"))

    client = stub.client(retry_options=FAST_RETRIES)
    with pytest.raises(errors.ClientError) as caught:
        client.models.generate_content(model=MODEL, contents="hi")

    assert caught.value.code == 400
    assert "exceeds the maximum number of tokens" in str(caught.value.message)
    assert len(stub.control.requests()) == 1


def test_environment_variables_reach_the_stub(stub: Stub, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GOOGLE_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", stub.url)
    monkeypatch.setenv("GEMINI_API_KEY", KEY)  # the stub refuses any other key
    stub.control.script(FakeGemini.text("configured by env"))

    client = genai.Client()
    response = client.models.generate_content(model=MODEL, contents="hi")

    assert response.text == "configured by env"


def test_wrong_api_key_is_refused_like_google(stub: Stub) -> None:
    stub.control.script(FakeGemini.text("kept for the right key"))

    client = stub.client(api_key="wrong-key")
    with pytest.raises(errors.ClientError) as caught:
        client.models.generate_content(model=MODEL, contents="hi")

    assert (caught.value.code, caught.value.status) == (400, "INVALID_ARGUMENT")
    assert caught.value.details["error"]["details"][0]["reason"] == "API_KEY_INVALID"
    assert len(stub.control.remaining()) == 1
    assert stub.control.requests()[0]["reply"] == {"status": 400, "source": "auth"}


def _post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(  # noqa: S310 - a loopback http URL built by the test
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_missing_key_is_forbidden_and_query_key_works(stub: Stub) -> None:
    stub.control.script(FakeGemini.text("via query key"))
    path = f"{stub.url}/v1beta/models/{MODEL}:generateContent"
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}

    assert _post(path, body)[0] == 403
    status, answer = _post(f"{path}?key={KEY}", body)

    assert status == 200
    assert answer["candidates"][0]["content"]["parts"] == [{"text": "via query key"}]
    assert stub.control.requests()[1]["query"] == "key=[redacted]"
    assert KEY not in stub.log_path.read_text()


def test_exhausted_script_is_a_500(stub: Stub) -> None:
    client = stub.client()
    with pytest.raises(errors.ServerError) as caught:
        client.models.generate_content(model=MODEL, contents="one call too many")

    assert caught.value.code == 500
    assert caught.value.message == EXHAUSTED_MESSAGE


def test_delay_lets_the_client_time_out(stub: Stub) -> None:
    stub.control.script(FakeGemini.delayed(1.5, FakeGemini.text("too late")))

    client = stub.client(timeout=300)
    with pytest.raises(httpx2.TimeoutException):
        client.models.generate_content(model=MODEL, contents="hi")


def test_raw_replies_reach_the_sdk_verbatim(stub: Stub) -> None:
    bad_args = {"functionCall": {"name": "get_weather", "args": "not-an-object"}}
    stub.control.script(
        FakeGemini.raw({"candidates": [{"content": {"role": "model", "parts": [bad_args]}}]}),
        FakeGemini.text("cut off", finish_reason="MAX_TOKENS"),
    )
    client = stub.client()

    with pytest.raises(pydantic.ValidationError):
        client.models.generate_content(model=MODEL, contents="hi")
    truncated = client.models.generate_content(model=MODEL, contents="hi")

    assert truncated.candidates is not None
    assert truncated.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS


def test_stream_count_tokens_and_vertex_paths(stub: Stub) -> None:
    stub.control.script(FakeGemini.text("streamed"), FakeGemini.text("vertex style"))
    client = stub.client()

    chunks = [chunk.text for chunk in client.models.generate_content_stream(model=MODEL, contents="hi")]
    count = client.models.count_tokens(model=MODEL, contents="sixteen chars!!!")
    vertex = genai.Client(vertexai=True, api_key=KEY, http_options=types.HttpOptions(base_url=stub.url))
    answer = vertex.models.generate_content(model=MODEL, contents="hi")

    assert chunks == ["streamed"]
    assert count.total_tokens == 4
    assert answer.text == "vertex style"
    paths = [r["path"] for r in stub.control.requests()]
    assert paths == [
        f"/v1/models/{MODEL}:streamGenerateContent",
        f"/v1/models/{MODEL}:countTokens",
        f"/v1beta1/publishers/google/models/{MODEL}:generateContent",
    ]


def test_match_answers_the_request_that_contains_the_text(stub: Stub) -> None:
    stub.control.script(
        FakeGemini.matching("postgres", FakeGemini.text("postgres answer")), FakeGemini.text("default answer")
    )
    client = stub.client()

    assert client.models.generate_content(model=MODEL, contents="sqlite please").text == "default answer"
    assert client.models.generate_content(model=MODEL, contents="use postgres").text == "postgres answer"


def test_control_rejects_malformed_items_atomically(stub: Stub) -> None:
    with pytest.raises(FakeGeminiError) as caught:
        stub.control.script(FakeGemini.text("fine"), {"text": "x", "error": {"code": 500}})

    assert caught.value.status == 400
    assert stub.control.remaining() == []
    with pytest.raises(ScriptItemError, match="args"):
        validate_item({"function_calls": [{"name": "f", "args": "nope"}]})


def test_log_is_one_json_object_per_line(stub: Stub) -> None:
    stub.control.script(FakeGemini.text("logged"))
    client = stub.client()
    client.models.generate_content(model=MODEL, contents="hi")
    stub.control.wait_for_requests(1)

    lines = [json.loads(line) for line in stub.log_path.read_text().splitlines()]

    assert any(line.get("action") == "generateContent" and line["status"] == 200 for line in lines)
    assert KEY not in stub.log_path.read_text()


def test_sigterm_stops_the_stub_cleanly(tmp_path: Path) -> None:
    stub = _start(tmp_path / "stderr.log")
    assert stub.control.healthy()

    assert stop_fake(stub.proc) == 0
    assert not stub.control.healthy()


# -- demo mode -------------------------------------------------------------------------

ASK_DECLARATION = {"name": "ask_operator", "parameters": {"type": "OBJECT"}}


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": text}]}


def test_demo_asks_once_on_a_fresh_message() -> None:
    body = {
        "contents": [_user("Set up   the\ndatabase " + "x" * 100)],
        "tools": [{"functionDeclarations": [ASK_DECLARATION]}],
    }

    item = demo.demo_item(body)

    [call] = item["function_calls"]
    assert call["name"] == "ask_operator"
    assert call["args"]["question"] == "[demo model] Which database should I use for: Set up the database…?"
    assert call["args"]["options"] == ["PostgreSQL", "SQLite"]  # options that say what they are
    asked = {"role": "model", "parts": [{"functionCall": {"name": "ask_operator", "args": {}}}]}
    again = {**body, "contents": [_user("a"), asked, _user("and now?")]}
    assert demo.demo_item(again)["text"] == (
        '[demo model] I read your message: "and now?". (This is a scripted offline stand-in, not Gemini.)'
    )


def test_demo_asks_to_restart_a_service_which_needs_an_approval() -> None:
    restart = {"name": "restart_service", "parameters": {"type": "OBJECT"}}
    request = (
        'The request you are working on now (data, as JSON):\n{"from": "<@U1>", "text": "restart web in production"}'
    )
    body = {"contents": [_user(request)], "tools": [{"functionDeclarations": [ASK_DECLARATION, restart]}]}
    [call] = demo.demo_item(body)["function_calls"]
    assert call == {"name": "restart_service", "args": {"name": "web", "environment": "production"}}


@pytest.mark.parametrize(
    ("last_part", "expected"),
    [
        (
            {"functionResponse": {"name": "ask_operator", "response": {"result": "sqlite"}}},
            "[demo model] Thanks — the operator answered: sqlite. Done.",
        ),
        (
            {"functionResponse": {"name": "ask_operator", "response": {"answer": "Option B"}}},
            "[demo model] Thanks — the operator answered: Option B. Done.",
        ),
        (
            {"functionResponse": {"name": "read_url", "response": {"result": "<html>"}}},
            "[demo model] The tool read_url returned: <html>.",
        ),
    ],
)
def test_demo_answers_function_responses(last_part: dict[str, Any], expected: str) -> None:
    body = {"contents": [_user("q"), {"role": "user", "parts": [last_part]}]}

    assert demo.demo_item(body)["text"].startswith(expected)


def test_demo_without_tools_summarises_and_never_pretends() -> None:
    summary = demo.demo_item({"contents": [_user("first"), _user("please wrap up")]})
    plain = demo.demo_item({"contents": [_user("hello")], "tools": [{"functionDeclarations": [{"name": "x"}]}]})

    assert summary["text"].startswith('[demo model] Summary: 2 message(s) so far; the latest says: "please wrap up"')
    assert plain["text"].startswith("[demo model] I read your message: ")
    assert demo.demo_item({})["text"].startswith("[demo model]")


def test_demo_round_trip_through_the_sdk(demo_stub: Stub) -> None:
    client = demo_stub.client(api_key="any-key")
    config = types.GenerateContentConfig(tools=[ask_operator], automatic_function_calling=NO_AFC)
    contents: list[types.Content] = [types.Content(role="user", parts=[types.Part.from_text(text="Pick a DB")])]

    first = client.models.generate_content(model=MODEL, contents=contents, config=config)
    assert first.function_calls is not None
    assert first.candidates is not None
    [call] = first.function_calls
    assert call.name == "ask_operator"
    assert call.id
    assert call.args is not None
    assert str(call.args["question"]).startswith("[demo model] ")
    assert first.candidates[0].content is not None
    contents.append(first.candidates[0].content)
    answer = types.FunctionResponse(id=call.id, name="ask_operator", response={"result": "Option A"})
    contents.append(types.Content(role="user", parts=[types.Part(function_response=answer)]))
    second = client.models.generate_content(model=MODEL, contents=contents, config=config)
    demo_stub.control.script(FakeGemini.text("scripted wins"))
    third = client.models.generate_content(model=MODEL, contents="hi", config=config)

    assert second.text == "[demo model] Thanks — the operator answered: Option A. Done."
    assert third.text == "scripted wins"
    assert [r["reply"]["source"] for r in demo_stub.control.requests()] == ["demo", "demo", "script"]


def _framed(request: str) -> str:
    """A person's request as the product frames it for the model (the thread, then the request as JSON)."""
    return prompts.thread_prompt([], request=request, requester="U0HUMAN")


def test_the_demo_tour_walks_through_every_flow_on_request() -> None:
    tools = [{"functionDeclarations": [ASK_DECLARATION, {"name": "delegate"}, {"name": "restart_service"}]}]

    def turn(request: str) -> dict[str, Any]:
        return demo.demo_item({"contents": [_user(_framed(request))], "tools": tools})

    menu = turn("<@U0LOCALBOT> demo")["text"]
    assert menu.startswith("[demo model] This is a *scripted demo*")
    for flow in ("`answer:", "`pick a database", "`restart billing", "`delegate the release notes`"):
        assert flow in menu
    assert turn("<@U0LOCALBOT> answer: what is it?")["text"].startswith("[demo model] A plain answer")
    assert turn("<@U0LOCALBOT> pick a database")["function_calls"][0]["name"] == "ask_operator"
    assert turn("<@U0LOCALBOT> restart billing in staging")["function_calls"][0]["name"] == "restart_service"
    calls = turn("<@U0LOCALBOT> delegate the release notes")["function_calls"]  # the demo's delegation path
    assert [c["name"] for c in calls] == ["delegate", "delegate"]
    assert tour.item(prompts.child_task("answer: the release notes", depth=1)) is None  # a helper is no request


def _declared(*names: str) -> list[dict[str, Any]]:
    return [{"functionDeclarations": [{"name": n, "parameters": {"type": "OBJECT"}} for n in names]}]


def test_demo_delegates_two_tasks_and_the_second_asks_its_parent() -> None:
    """The demo's delegation path, turn by turn: the parent splits the request, the second child asks it which
    half comes first, the parent answers that child, and each side reports."""
    from shared.agent import prompts

    parent_tools = _declared("ask_operator", "delegate", "answer_child")
    request = 'The request you are working on now (data, as JSON):\n{"text": "please delegate the release notes"}'
    calls = demo.demo_item({"contents": [_user(request)], "tools": parent_tools})["function_calls"]
    assert [c["name"] for c in calls] == ["delegate", "delegate"]
    first, second = (c["args"]["task"] for c in calls)
    assert demo.ASKS_PARENT not in first
    assert demo.ASKS_PARENT in second

    child_tools = _declared("delegate", "ask_parent")
    opening = _user(prompts.child_task(second, depth=1))
    [ask] = demo.demo_item({"contents": [opening], "tools": child_tools})["function_calls"]
    assert ask == {"name": "ask_parent", "args": {"question": "[demo model] Which half should come first?",
                                                  "blocking": True}}  # fmt: skip
    asked = {"role": "model", "parts": [{"functionCall": ask}]}
    answered = {"role": "user", "parts": [{"functionResponse": {"name": "ask_parent", "response": {
        "result": {"answer": demo.DEMO_PARENT_ANSWER}}}}]}  # fmt: skip
    done = demo.demo_item({"contents": [opening, asked, answered], "tools": child_tools})["text"]
    assert done.startswith(f"[demo model] The parent said: {demo.DEMO_PARENT_ANSWER}")
    plain = demo.demo_item({"contents": [_user(prompts.child_task(first, depth=1))], "tools": child_tools})["text"]
    assert plain.startswith("[demo model] Done with: Look into the first half of")

    notes = prompts.notes_text([Note(kind=NoteKind.CHILD_QUESTION, text="Which half should come first?",
                                     user="child-x-1-1", ts="pq", question_id="pq", question=second)])  # fmt: skip
    [answer] = demo.demo_item({"contents": [_user(request), _user(notes)], "tools": parent_tools})["function_calls"]
    assert answer == {"name": "answer_child", "args": {"child_id": "child-x-1-1", "answer": demo.DEMO_PARENT_ANSWER}}
    results = prompts.notes_text([Note(kind=NoteKind.CHILD_RESULT, text="[demo model] Done.", user="", ts="c",
                                       question_id="c", question=first, matched_option="done")])  # fmt: skip
    summary = demo.demo_item({"contents": [_user(request), _user(results)], "tools": parent_tools})["text"]
    assert summary.startswith("[demo model] Results of my delegated tasks:\n• Look into the first half")


def test_a_stream_sends_its_text_in_pieces_then_the_calls_and_usage(stub: Stub) -> None:
    text = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen"
    stub.control.script({"text": text, "function_calls": [{"name": "fetch_url", "args": {"url": "https://a.b"}}]})
    client = stub.client()

    chunks = list(client.models.generate_content_stream(model=MODEL, contents="hi"))

    pieces = [p.text for c in chunks for p in (c.candidates[0].content.parts or []) if p.text]  # type: ignore[index,union-attr]
    assert len(pieces) == 8
    assert "".join(pieces) == text
    assert chunks[-1].function_calls is not None
    assert chunks[-1].function_calls[0].name == "fetch_url"
    assert chunks[-1].usage_metadata is not None
    assert chunks[-1].usage_metadata.prompt_token_count


@pytest.mark.parametrize(
    ("request_text", "question", "options"),
    [
        ("<@U0LOCALBOT> pick a cache: redis or memcached", "Which should I use for: pick a cache: redis or memcached?",
         ["redis", "memcached"]),
        ("<@U0LOCALBOT> please pick a database for billing", "Which database should I use for: please pick a database "
         "for billing?", ["PostgreSQL", "SQLite"]),
        ("<@U0LOCALBOT> tidy the wiki", "Should I go ahead with: tidy the wiki?", ["Yes, go ahead", "No, leave it"]),
    ],
)  # fmt: skip
def test_the_demo_question_names_its_options_and_leaves_out_the_mention(
    request_text: str, question: str, options: list[str]
) -> None:
    assert demo.demo_question(request_text) == (f"[demo model] {question}", options)


def test_a_delegations_summary_is_one_line_per_task_without_nested_labels_or_cut_words() -> None:
    long = "[demo model] Done with: Look into the first half of: delegate the release notes for the winter release " * 2
    notes = "\n".join(json.dumps(item) for item in (
        {"kind": "child_result", "task": "first half", "result": long},
        {"kind": "child_result", "task": "second half", "result": "[demo model] Done with: b."},
    ))  # fmt: skip
    body = {"contents": [_user(notes)], "tools": [{"functionDeclarations": [{"name": "delegate"}]}]}
    text = demo.demo_item(body)["text"]
    assert text.count("[demo model]") == 1
    first, second = text.splitlines()[1:]
    assert first.startswith("• first half: Done with: Look into the first half of")
    assert first.endswith("…")
    assert first.removesuffix("…").split()[-1] in long.split()  # cut at a word's end, not inside one
    assert second == "• second half: Done with: b."
