"""The workspace page in a real browser: people type, mention, click and react, and the product answers.

One stack (as ``make dev`` starts it: the demo model, Riley the requester and Olivia operators, Sam not) and one
headless Chromium serve the whole module (tests/browser/conftest.py); each test opens its own pages, one
browser context per person, so each sees only their own ephemerals. Every action goes through the page, and so
through the fake Slack's signed events and interactivity payloads into the product's functions. A failing test
leaves a screenshot of each of its pages under ``.local/``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
from playwright.sync_api import Browser, Locator, Page, expect
from slack_sdk import WebClient

from infra import procs
from infra.fakes.slack import FakeSlack
from infra.procs import free_port, http_answers
from infra.stack import BOT_TOKEN, BOT_USER_ID, ROOT, Stack
from ops.console import main as console_main
from shared import config
from shared.slack.blocks import answer_blocks
from tests import poll
from tests.browser.conftest import OpenPage

WAIT = 45_000  # ms: a session's turn through Cloud Tasks and the model, with room for a busy machine
RILEY, OLIVIA, SAM = "U0HUMAN", "U0OPERATOR", "U0GUEST"


def tag() -> str:
    return uuid.uuid4().hex[:8]


def mention_the_bot(page: Page, text: str) -> Locator:
    """Type "@age", pick the bot from the autocomplete, finish the message and send it; returns the message."""
    page.click("#text")
    page.keyboard.type("@age")
    expect(page.locator("#autocomplete li.selected")).to_contain_text("@agent")
    page.keyboard.press("Enter")
    page.keyboard.type(text)
    page.keyboard.press("Enter")
    message = page.locator("#messages .message", has_text=re.sub(r"[*_~`]", "", text))  # as shown: markup rendered
    expect(message.locator(".mention")).to_have_text("@agent")  # <@U0LOCALBOT> shown as the bot's name
    return message


def open_thread(page: Page, text: str) -> Locator:
    """Open the thread of the channel message holding ``text`` once it has replies; returns the thread pane."""
    page.locator("#messages .message", has_text=text).locator(".replies-link").click(timeout=WAIT)
    thread = page.locator("#thread")
    expect(thread.locator(".message").first).to_contain_text(text)
    return thread


def pinned(pane: Locator, text: str | re.Pattern[str]) -> Locator:
    """The message in ``pane`` that now holds ``text`` (a string matches in any case, a pattern as written), found
    again by its ts however it is edited later."""
    message = pane.locator(".message", has_text=text)
    expect(message).to_be_visible(timeout=WAIT)
    return pane.locator(f".message[data-ts='{message.get_attribute('data-ts')}']")


def test_a_mention_a_question_a_button_and_the_answer(open_page: OpenPage) -> None:
    page = open_page(RILEY)
    request = f"please pick a *database* for {tag()}"
    mention_the_bot(page, request)
    expect(page.locator("#messages b", has_text="database").first).to_be_visible()  # mrkdwn bold
    thread = open_thread(page, "please pick a")
    question = pinned(thread, "Which database should I use")
    expect(question).not_to_contain_text("@agent")  # the question does not quote the raw request and its mention
    expect(question.locator(".reaction", has_text="💬")).to_be_visible(timeout=WAIT)  # the open question's mark
    expect(question.locator(".block-button")).to_have_text(["PostgreSQL", "SQLite"])  # options say what they are
    question.get_by_role("button", name="SQLite").click()
    expect(thread.locator(".message", has_text="the operator answered: SQLite")).to_be_visible(timeout=WAIT)
    expect(question).to_contain_text("chose: SQLite")  # the card, edited in place
    expect(question.locator(".edited")).to_be_visible()


def test_a_non_operators_click_is_refused_and_only_they_see_why(open_page: OpenPage) -> None:
    riley, sam = open_page(RILEY), open_page(RILEY)
    expect(sam.locator("#who-role")).to_have_text("operator")
    sam.select_option("#user", label="Sam Guest")  # the switcher
    expect(sam.locator("#who-role")).to_have_text("not an operator")
    request = f"which region for {tag()}"
    mention_the_bot(riley, request)
    open_thread(riley, request)
    expect(riley.locator("#thread .block-button", has_text="europe-west1")).to_be_visible(timeout=WAIT)
    sam_thread = open_thread(sam, request)  # Sam's page saw it arrive, without a reload
    sam_thread.get_by_role("button", name="europe-west1").click()
    refusal = sam_thread.locator(".message.ephemeral", has_text="Only the operators can answer")
    expect(refusal).to_be_visible(timeout=WAIT)
    expect(refusal).to_contain_text("Only visible to you")
    riley.locator("#thread .block-button", has_text="us-central1").click()
    expect(sam_thread.locator(".message", has_text="the operator answered: us-central1")).to_be_visible(timeout=WAIT)
    expect(riley.locator("#thread")).not_to_contain_text("Only the operators can answer")


def test_an_approval_approved_and_another_denied(open_page: OpenPage) -> None:
    riley, olivia = open_page(RILEY), open_page(OLIVIA)
    billing = f"restart billing in staging {tag()}"
    mention_the_bot(riley, billing)
    card = pinned(open_thread(olivia, billing), "who may decide")
    expect(card).to_contain_text("restart_service")
    card.get_by_role("button", name="Approve").click()
    result = olivia.locator("#thread .message", has_text="The tool restart_service returned")
    expect(result).to_be_visible(timeout=WAIT)
    expect(card).to_contain_text("approved by @olivia")
    expect(card.locator(".block-button")).to_have_count(0)  # a decided card keeps no buttons

    olivia.click("#close-thread")
    search = f"restart search in production {tag()}"
    mention_the_bot(riley, search)
    card = pinned(open_thread(olivia, search), "who may decide")
    card.get_by_role("button", name="Deny").click()
    expect(card).to_contain_text("🚫 denied by @olivia", timeout=WAIT)
    # The model hears the denial and says so; the tool never ran (it would have posted "Restarting …" first).
    expect(olivia.locator("#thread")).to_contain_text("It did not run", timeout=WAIT)
    expect(olivia.locator("#thread")).not_to_contain_text("Restarting")


def test_a_reaction_lands_on_the_message_it_was_given_to(open_page: OpenPage) -> None:
    page = open_page(RILEY)
    page.click("#text")
    words = f"just saying hello {tag()}"  # no mention: the bot stays out of it
    page.keyboard.type(words)
    page.keyboard.press("Enter")
    message = page.locator("#messages .message", has_text=words)
    message.hover()
    message.locator("[data-add-reaction='tada']").click()
    expect(message.locator(".reaction.mine", has_text="🎉 1")).to_be_visible()


def test_a_click_whose_message_is_redrawn_between_press_and_release_still_opens_the_thread(
    open_page: OpenPage,
) -> None:
    """A live update that redraws the list while the button is held replaces the pressed element, and the browser
    then fires no click at all (a CI run lost its "1 reply" click so, while the bot replied in the thread): the
    release acts as the click when what is under the pointer is the same thing redrawn (not when it moved away)."""
    page = open_page(RILEY)
    page.click("#text")
    words, reply, later = f"a note {tag()}", f"its reply {tag()}", f"another {tag()}"  # no mention: no bot
    page.keyboard.type(words)
    page.keyboard.press("Enter")
    root = page.locator("#messages .message", has_text=words)
    ts = root.get_attribute("data-ts")
    page.evaluate("([text, ts]) => send(text, ts)", [reply, ts])
    link = root.locator(".replies-link")
    expect(link).to_have_text("1 reply")
    pressed = link.element_handle()
    link.hover()
    page.mouse.down()
    page.evaluate("([text, ts]) => send(text, ts)", [later, ts])  # as the bot's reply did: "2 replies", in place
    page.wait_for_function("link => !link.isConnected", arg=pressed)  # the list was redrawn under the pointer
    page.mouse.up()
    expect(page.locator("#thread .message").last).to_contain_text(later)


def test_the_demo_tour_a_delegated_task_and_its_sessions_timeline(open_page: OpenPage) -> None:
    page = open_page(RILEY)
    expect(page.locator("#notice")).to_contain_text("Scripted demo")
    mention_the_bot(page, f"demo {tag()}")
    menu = open_thread(page, "demo").locator(".message", has_text="This is a scripted demo")
    expect(menu.locator("code", has_text="delegate the release notes")).to_be_visible(timeout=WAIT)
    page.click("#close-thread")

    marker = tag()
    mention_the_bot(page, f"delegate the release notes {marker}")
    thread = open_thread(page, marker)
    # One status message, edited as the helpers progress; the final answer ("Results of my delegated tasks") may
    # already be there, and a string would match it too, in any case.
    status = pinned(thread, re.compile("Delegated tasks"))
    expect(status).to_contain_text("(2 of 2 finished)", timeout=WAIT)
    expect(status.locator("b", has_text="Delegated tasks")).to_be_visible()
    expect(status.locator("i", has_text="✅ done")).to_have_count(2)  # each task's state, in italics
    expect(status.locator(".emoji").first).to_have_text("👥")
    expect(status.locator(".edited")).to_be_visible()
    expect(thread.locator(".message", has_text="Results of my delegated tasks")).to_be_visible(timeout=WAIT)
    task = f"Look into the first half of: delegate the release notes {marker}"

    page.click("#views a[data-view='console']")
    rows = page.locator("#sessions tr.conversation", has_text=f"delegate the release notes {marker}")
    expect(rows).to_have_count(1)  # one row for the conversation, whatever sessions and children worked on it
    conversation = rows.first
    expect(conversation.locator(".status")).to_have_text("done", timeout=WAIT)
    expect(conversation.locator(".who")).to_have_text("@riley")  # people by name, the bot too
    expect(conversation.locator(".request")).to_contain_text(f"@agent delegate the release notes {marker}")
    width = conversation.locator(".request").evaluate("(cell) => cell.getBoundingClientRect().width")
    conversation.click()
    members = page.locator("#sessions tr.detail tr.session")
    expect(members.first).to_contain_text("the request")
    children = members.filter(has_text="a delegated task")
    expect(children).to_have_count(2)
    expect(children.first).to_contain_text("↳")
    expect(children.first).to_contain_text(task)
    expect(children.first.locator(".status")).to_have_text("done")
    expect(children.nth(1)).to_contain_text("Look into the second half of")
    timeline = page.locator("#timeline")
    expect(timeline.locator(".audit[data-type='tool']", has_text="delegate").first).to_contain_text(task, timeout=WAIT)
    expect(timeline.locator(".audit[data-type='tool']", has_text="answer_child")).to_be_visible()  # a child asked
    expect(timeline.locator(".audit[data-type='model']").first).to_contain_text("tokens")
    opened = conversation.locator(".request").evaluate("(cell) => cell.getBoundingClientRect().width")
    assert opened >= width * 0.9  # the open timeline does not squeeze the list into narrow columns
    timeline.locator(".audit[data-type='post'] .slack-link").last.click()  # back to the message in Slack
    expect(page.locator("#thread .message", has_text="Results of my delegated tasks")).to_be_visible()


def test_a_direct_message_needs_no_mention_and_is_only_for_its_person(open_page: OpenPage) -> None:
    riley, sam = open_page(RILEY), open_page(SAM)
    riley.click("#dms li")
    expect(riley.locator("#channel-title")).to_contain_text("direct message with Riley Requester")
    words = f"answer: what is this {tag()}"
    riley.click("#text")
    riley.keyboard.type(words)
    riley.keyboard.press("Enter")
    answer = riley.locator("#messages .message", has_text="A plain answer")
    expect(answer).to_be_visible(timeout=WAIT)  # a DM's top-level request is answered in the conversation
    sam.click("#dms li")
    expect(sam.locator("#channel-title")).to_contain_text("direct message with Sam Guest")
    expect(sam.locator("#messages")).not_to_contain_text(words)


def test_slack_markup_is_rendered_as_slack_shows_it(open_page: OpenPage) -> None:
    page = open_page(RILEY)
    html = page.evaluate(
        "([text]) => mrkdwn(text, names)",
        ["*bold* _it_ ~gone~ `x<y` <https://example.com|a link> <@U0OPERATOR> :eyes: :nope: &lt;b&gt;\n&gt; quoted"],
    )
    assert "<b>bold</b> <i>it</i> <s>gone</s> <code>x&lt;y</code>" in html
    assert '<a href="https://example.com" target="_blank" rel="noopener">a link</a>' in html
    assert '<span class="mention" data-user="U0OPERATOR">@olivia</span>' in html
    assert ">👀</span> :nope: &lt;b&gt;<blockquote>quoted</blockquote>" in html  # unknown shortcodes stay text
    italic = page.evaluate("([text]) => mrkdwn(text, names)", ["— _:white_check_mark: done_"])
    assert italic == '— <i><span class="emoji" title=":white_check_mark:">✅</span> done</i>'
    waiting = page.evaluate("([text]) => mrkdwn(text, names)", ["— _:raising_hand: waiting for the parent's answer_"])
    assert waiting == '— <i><span class="emoji" title=":raising_hand:">🙋</span> waiting for the parent\'s answer</i>'
    blocks = [
        {"type": "header", "text": {"type": "plain_text", "text": "Deploy"}},
        {"type": "divider"},
        {"type": "section", "text": {"type": "mrkdwn", "text": "*ready*"}, "fields": [{"type": "mrkdwn", "text": "a"}]},
        {"type": "markdown", "text": "**strong** and [docs](https://example.com/d)\n- one"},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": "by <@U0HUMAN>"}]},
        {"type": "actions", "elements": [{"type": "button", "text": {"type": "plain_text", "text": "Go"},
                                          "action_id": "go", "style": "primary"}]},
        {"type": "video"},
    ]  # fmt: skip
    body = page.evaluate("([blocks]) => messageBody({text: 'fallback', blocks}, names)", [blocks])
    assert "fallback" not in body  # blocks replace the text, as in Slack
    assert '<div class="block header"><span class="plain">Deploy</span></div><hr class="block divider">' in body
    assert '<div class="fields"><div>a</div></div>' in body
    assert "<b>strong</b> and <a" in body
    assert '<span class="md-li">• one</span>' in body
    assert '<div class="block context"><span>by <span class="mention" data-user="U0HUMAN">@riley</span>' in body
    assert 'class="block-button primary" data-action="go"' in body
    assert "[video block]" in body


HOSTILE_LINKS = (
    "<javascript:alert(document.domain)|click me> <JavaScript:alert(1)> <data:text/html,<b>x</b>|data> "
    "<vbscript:msgbox|vb> < javascript:alert(2)|spaced> <https://example.com/ok?a=1&amp;b=2|fine> "
    "<mailto:ops@example.com|mail us> <http://example.com|plain>"
)


def test_only_http_https_and_mailto_links_are_rendered(web_stack: Stack, open_page: OpenPage) -> None:
    marker = tag()
    fake = FakeSlack(web_stack.url("fake_slack"))
    fake.user_message(RILEY, "C0LOCAL", f"<@{BOT_USER_ID}> answer: {marker} {HOSTILE_LINKS}")  # a session too
    web = WebClient(token=BOT_TOKEN, base_url=web_stack.url("fake_slack") + "/api/")
    markdown = f"[md click](javascript:alert(3)) [md fine](https://example.com/md) {marker}"
    blocks = [
        {"type": "markdown", "text": markdown},
        {"type": "image", "image_url": "javascript:alert(4)", "alt_text": "bad image"},
    ]
    web.chat_postMessage(channel="C0LOCAL", text=markdown, blocks=blocks)
    page = open_page(RILEY)
    page.on("dialog", lambda dialog: pytest.fail(f"script ran: {dialog.message}"))
    message = page.locator("#messages .message", has_text="click me")
    expect(message).to_contain_text("<javascript:alert(document.domain)|click me>")  # shown as the text it is
    hrefs = message.locator(".body a").evaluate_all("(links) => links.map((a) => a.getAttribute('href'))")
    assert hrefs == ["https://example.com/ok?a=1&b=2", "mailto:ops@example.com", "http://example.com"]
    message.locator(".body", has_text="click me").click()  # a click on the text runs nothing
    posted = page.locator("#messages .message", has_text="md fine")
    expect(posted).to_contain_text("[md click](javascript:alert(3))")
    md_hrefs = posted.locator("a").evaluate_all("(links) => links.map((a) => a.getAttribute('href'))")
    assert md_hrefs == ["https://example.com/md"]
    expect(posted.locator("img")).to_have_count(0)
    expect(posted).to_contain_text("[image: bad image]")

    page.click("#views a[data-view='console']")  # the console tab renders the request's text the same way
    row = page.locator("#sessions tr.conversation", has_text=marker)
    expect(row).to_contain_text("click me", timeout=WAIT)
    row_hrefs = row.locator("a:not(.slack-link)").evaluate_all("(links) => links.map((a) => a.getAttribute('href'))")
    assert all(h.startswith(("https:", "http:", "mailto:")) for h in row_hrefs), row_hrefs


def answers(url: str) -> bool:
    try:
        return http_answers(url)
    except OSError:  # not listening yet
        return False


@contextmanager
def make_console(web_stack: Stack, tmp_path: Path) -> Iterator[str]:
    """``make console`` against the web stack's emulator (standing in for a project's Firestore); yields the URL
    it printed (with this run's key)."""
    port = free_port()
    env = {**os.environ, **web_stack.product_env()}
    log_path = tmp_path / "console.log"
    log = log_path.open("w")
    argv = [sys.executable, "-m", "ops.console", "--port", str(port)]
    console = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True)
    try:
        printed = poll.wait_for(
            lambda: re.search(r"http://\S+", log_path.read_text()), timeout=30, what="the console's URL"
        )
        yield printed.group(0)
    finally:
        procs.stop_group(console.pid, timeout=5, reap=console.poll)
        log.close()


def test_make_console_serves_the_console_alone(web_stack: Stack, browser: Browser, tmp_path: Path) -> None:
    words = f"answer: hello {tag()}"
    FakeSlack(web_stack.url("fake_slack")).user_message(RILEY, "C0LOCAL", f"<@{BOT_USER_ID}> {words}")
    with make_console(web_stack, tmp_path) as url:
        page = browser.new_page()
        page.goto(url)
        expect(page.locator("#console")).to_be_visible()
        assert "key=" not in page.url  # traded for a cookie: the key does not stay in the address bar or history
        expect(page.locator("#workspace")).to_be_hidden()  # no workspace behind a real project's console
        expect(page.locator("#sessions tr.conversation", has_text=words)).to_be_visible(timeout=WAIT)
        cookies = {c["name"]: c["value"] for c in page.context.cookies()}
        origin = url.split("/?")[0]
        post = requests.post(f"{origin}/_console/overview", cookies=cookies, timeout=5)
        assert post.status_code == 501  # GET only: nothing is written
        page.close()


def test_make_console_answers_only_its_printed_origin_with_its_key(web_stack: Stack, tmp_path: Path) -> None:
    with make_console(web_stack, tmp_path) as url:
        origin, key = url.split("/?key=")[0], url.split("key=")[1].split("#")[0]
        host = origin.removeprefix("http://")
        overview = f"{origin}/_console/overview"
        got = requests.get(f"{origin}/?key={key}", allow_redirects=False, timeout=5)
        assert got.status_code == 303
        assert got.headers["Location"] == "/"
        cookie = got.cookies.items()[0]
        assert requests.get(overview, cookies=dict([cookie]), timeout=10).status_code == 200
        assert requests.get(f"{overview}?key={key}", allow_redirects=False, timeout=10).status_code == 303
        refused = [
            requests.get(overview, timeout=5),  # no key
            requests.get(f"{origin}/", timeout=5),  # not even the page
            requests.get(overview, cookies={cookie[0]: key[:-1] + "x"}, timeout=5),  # a wrong key
            requests.post(overview, timeout=5),
            # DNS rebinding: a page at evil.example:<port> resolved to 127.0.0.1 sends its own name, key or not
            requests.get(
                overview, cookies=dict([cookie]), headers={"Host": f"evil.example:{host.split(':')[1]}"}, timeout=5
            ),
            requests.get(f"{overview}?key={key}", headers={"Host": "localhost:" + host.split(":")[1]}, timeout=5),
            requests.get(overview, cookies=dict([cookie]), headers={"Host": host.split(":")[0]}, timeout=5),
        ]
        assert [r.status_code for r in refused] == [403] * len(refused)
        assert "sessions" not in refused[-1].text


def test_the_workspace_console_reads_only_the_emulator_and_only_for_loopback(web_stack: Stack, tmp_path: Path) -> None:
    fake = web_stack.url("fake_slack")
    port = fake.rsplit(":", 1)[1]
    assert requests.get(f"{fake}/_console/overview", timeout=10).status_code == 200  # make dev's Console tab
    assert requests.get(f"{fake}/_console/overview", headers={"Host": "localhost:" + port}, timeout=10).ok
    rebound = requests.get(f"{fake}/_console/overview", headers={"Host": f"evil.example:{port}"}, timeout=5)
    assert rebound.status_code == 403
    assert "sessions" not in rebound.text
    # A fake Slack given a real project's settings (no emulator) would read it with credentials: it refuses.
    env = {k: v for k, v in {**os.environ, **web_stack.product_env()}.items() if k != "FIRESTORE_EMULATOR_HOST"}
    other = free_port()
    argv = [sys.executable, "-m", "infra.fakes.slack", "--port", str(other), "--bot-token", "x",
            "--signing-secret", "y", "--console"]  # fmt: skip
    log = (tmp_path / "fakeslack.log").open("w")
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True)
    try:
        poll.wait_for(lambda: answers(f"http://127.0.0.1:{other}/_fake/health"), timeout=30, what="the fake Slack")
        refused = requests.get(f"http://127.0.0.1:{other}/_console/overview", timeout=10)
        assert refused.status_code == 403
        assert "emulator" in refused.json()["error"]
    finally:
        procs.stop_group(proc.pid, timeout=5, reap=proc.poll)
        log.close()


def test_make_console_without_a_project_says_what_it_needs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    config.reset()
    try:
        assert console_main([]) == 2
    finally:
        config.reset()
    err = capsys.readouterr().err
    assert "set GOOGLE_CLOUD_PROJECT" in err
    assert "the Console tab of `make dev`'s workspace page" in err  # the local equivalent


def test_the_bots_status_shows_under_its_thread_until_cleared(web_stack: Stack, open_page: OpenPage) -> None:
    words = f"a thread the bot works in {tag()}"
    root = FakeSlack(web_stack.url("fake_slack")).user_message(RILEY, "C0LOCAL", words)["ts"]
    web = WebClient(token=BOT_TOKEN, base_url=web_stack.url("fake_slack") + "/api/")
    web.chat_postMessage(channel="C0LOCAL", thread_ts=root, text="on it")
    page = open_page(RILEY)
    open_thread(page, words)
    status = page.locator("#thread-status")
    expect(status).to_be_hidden()
    web.assistant_threads_setStatus(channel_id="C0LOCAL", thread_ts=root, status="is reading the runbook…")
    expect(status).to_have_text("Agent (the bot) is reading the runbook…")  # live, without a reload
    web.assistant_threads_setStatus(channel_id="C0LOCAL", thread_ts=root, status="")
    expect(status).to_be_hidden()


def test_feedback_buttons_show_and_a_press_reaches_the_product(web_stack: Stack, open_page: OpenPage) -> None:
    words = f"a thread with an answer {tag()}"
    root = FakeSlack(web_stack.url("fake_slack")).user_message(RILEY, "C0LOCAL", words)["ts"]
    web = WebClient(token=BOT_TOKEN, base_url=web_stack.url("fake_slack") + "/api/")
    shown = [b.to_dict() for b in answer_blocks("Here is *the* answer", "no-such-session")]
    web.chat_postMessage(channel="C0LOCAL", thread_ts=root, text="Here is *the* answer", blocks=shown)
    page = open_page(RILEY)
    pane = open_thread(page, words)
    answer = pinned(pane, "Here is the answer")
    expect(answer.locator(".block.feedback button")).to_have_text(["👍", "👎"])
    expect(answer.locator(".block.feedback button.chosen")).to_have_count(0)
    answer.locator(".block.feedback button", has_text="👍").click()
    # The product checks the press against its store: this message is no session's final answer.
    expect(pane.locator(".message.ephemeral")).to_contain_text("Feedback is taken on my final answers only.")
    expect(answer.locator(".block.feedback button.chosen")).to_have_text("👍")  # the person sees their vote
    answer.locator(".block.feedback button", has_text="👎").click()
    expect(answer.locator(".block.feedback button.chosen")).to_have_text("👎")  # changed their mind


def test_the_operators_channel_says_what_it_is_for(open_page: OpenPage) -> None:
    page = open_page(OLIVIA)
    page.locator("#channels li", has_text="operators").click()
    expect(page.locator("#channel-title")).to_have_text("# operators")
    expect(page.locator("#channel-purpose")).to_contain_text("For the operators")


def test_an_edit_with_a_schema_error_then_a_valid_one(open_page: OpenPage) -> None:
    """Issue 25.2: Edit opens Slack's modal of the call's arguments; a bad value is answered in the modal, and a
    valid edit is the editor's approval: the edited call runs, and the card shows both calls."""
    riley, olivia = open_page(RILEY), open_page(OLIVIA)
    request = f"restart ledger in staging {tag()}"
    mention_the_bot(riley, request)
    card = pinned(open_thread(olivia, request), "who may decide")
    card.get_by_role("button", name="Edit").click()
    modal = olivia.locator("#modal")
    expect(modal).to_be_visible(timeout=WAIT)
    environment = modal.locator("[data-block='arg:environment'] input")
    expect(environment).to_have_value("staging")
    environment.fill("")  # a required argument left out: the schema says no
    modal.get_by_role("button", name="Approve edited").click()
    error = modal.locator("[data-block='arg:environment'] .modal-error")
    expect(error).to_contain_text("required", timeout=WAIT)
    expect(modal).to_be_visible()
    environment.fill("dev")
    modal.get_by_role("button", name="Approve edited").click()
    expect(modal).to_be_hidden(timeout=WAIT)
    expect(card).to_contain_text("Edited by @olivia", timeout=WAIT)
    expect(olivia.locator("#thread")).to_contain_text("Restarting ledger in dev", timeout=WAIT)
    expect(card.locator(".block-button")).to_have_count(0, timeout=WAIT)
