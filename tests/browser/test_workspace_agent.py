"""The workspace page follows Slack's agent messaging experience (issues 27 item 4 and 26 item 6), in a real
browser: opening the DM with the bot is opening its Messages tab (``app_home_opened``: the product sets the
suggested prompts, shown above the composer), the DM keeps its title, and the bot's answer to a request typed
there shows in the conversation while a reply typed in a DM thread is answered in that thread; a streamed answer
that rolls over to a new message reads on across both.

The DM here is Sam's: test_workspace's DM test answers in Riley's, on the same stack, and this one counts answers."""

from __future__ import annotations

from playwright.sync_api import expect
from slack_sdk import WebClient

from infra.fakes.slack import FakeSlack
from infra.stack import BOT_TOKEN, Stack
from shared import deps
from shared.slack.stream import AnswerStream
from shared.slack.surface import ThreadSurface
from tests.browser.conftest import OpenPage
from tests.browser.test_workspace import RILEY, SAM, WAIT, open_thread, tag


def test_a_dm_in_agent_view_offers_prompts_and_answers_in_the_conversation(open_page: OpenPage) -> None:
    sam = open_page(SAM)
    sam.click("#dms li")
    title = sam.locator("#channel-title")
    expect(title).to_have_text("Agent (the bot) (direct message with Sam Guest)")
    prompts = sam.locator("#prompts")
    expect(prompts).to_be_visible()  # app_home_opened reached the product, which set them
    expect(prompts.locator("button").first).to_be_visible()
    words = f"answer: what is this {tag()}"
    sam.click("#text")
    sam.keyboard.type(words)
    sam.keyboard.press("Enter")
    answer = sam.locator("#messages .message", has_text="A plain answer")
    expect(answer).to_be_visible(timeout=WAIT)  # in the conversation, no thread to open
    request = sam.locator("#messages .message", has_text=words)
    expect(request.locator(".replies-link")).to_have_count(0)  # nothing went into a thread under the request
    expect(title).to_have_text("Agent (the bot) (direct message with Sam Guest)")  # not "# D0GUEST"
    # A reply typed inside a thread of the DM is answered in that thread, and stays there.
    request.hover()
    request.locator("button[data-thread]").click()
    sam.click("#reply-text")
    sam.keyboard.type(f"answer: and in a thread {tag()}")
    sam.keyboard.press("Enter")
    thread = sam.locator("#thread")
    expect(thread.locator(".message", has_text="A plain answer")).to_be_visible(timeout=WAIT)
    expect(sam.locator("#messages .message", has_text="A plain answer")).to_have_count(1)
    expect(request.locator(".replies-link")).to_be_visible()


def test_a_stream_that_rolls_over_reads_on_in_the_next_message(web_stack: Stack, open_page: OpenPage) -> None:
    fake = FakeSlack(web_stack.url("fake_slack"))
    words = f"a long answer is coming {tag()}"
    root = fake.user_message(RILEY, "C0LOCAL", words)["ts"]
    now = [1000.0]
    web = WebClient(token=BOT_TOKEN, base_url=web_stack.url("fake_slack") + "/api/")
    with deps.override(slack=web):
        surface = ThreadSurface("C0LOCAL", root, root)
        stream = surface.stream = AnswerStream("C0LOCAL", root, recipient=RILEY, on_open=lambda _: None,
                                               buffer_chars=1, clock=lambda: now[0])  # fmt: skip
        surface.step("1.0", "Reading the thread")
        surface.step_done("1.0", failed=False)
        stream.begin_turn()
        stream.text("The first part, before five minutes passed. ")
        now[0] += 290  # Slack would close it: the rest goes to a new message, the card carried over
        stream.text("The second part, after the roll-over.")
        text = "The first part, before five minutes passed. The second part, after the roll-over."
        surface.answer(text, key=f"{root}:answer", feedback="none")
    page = open_page(RILEY)
    thread = open_thread(page, words)
    replies = thread.locator(".message")
    expect(replies.nth(1)).to_contain_text("The first part, before five minutes passed.")
    expect(replies.nth(2)).to_contain_text("The second part, after the roll-over.")
