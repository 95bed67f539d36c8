"""``python -m infra.chat``: talk to the locally running bot as a Slack user, from a terminal.

It drives the fake Slack's control API exactly as a person drives Slack: the first
line mentions the bot and starts a thread, later lines reply in it, ``/click N``
presses a button. A background thread polls the thread and prints what the bot
posts, edits and reacts, so the whole product (events, Cloud Tasks, the agent,
questions and answers) can be tried by hand without a Slack workspace.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from infra.fakes.slack.client import FakeSlack, FakeSlackError
from infra.fakes.slack.state import buttons_in
from infra.stack import CHAT_USER
from ops.names import Names

STOP_ACTION = "session_stop"  # shared/slack/blocks.py's Stop button (the chat does not import the product)

Json = dict[str, Any]
PROMPT = "you> "
HELP = """Type a message and press Enter. The first line starts a thread and mentions the bot.
  /new [text]   start a new thread (with text: send it right away)
  /click N      press button N of the bot's latest message with buttons
  /stop         press the Stop button of the session working in this thread
  /help         show this help
  /quit         leave (Ctrl-D and Ctrl-C work too)
Any other /word is refused here, as Slack refuses an unknown command: nothing is sent.
The workspace page (its URL is printed above) shows the same conversation, every channel and thread,
and lets you switch to another person."""


# -- pure helpers (tested directly) ----------------------------------------------------


def extract_buttons(message: Json) -> list[Json]:
    """The buttons of a message in reading order: ``{text, action_id, value, block_id, style}``."""
    return buttons_in(message.get("blocks"))


def block_text(blocks: list[Json] | None) -> str:
    """Readable text of section/header/context blocks, for messages posted with blocks only."""
    parts: list[str] = []
    for block in blocks or []:
        if isinstance(block.get("text"), dict):
            parts.append(str(block["text"].get("text", "")))
        for element in block.get("elements", []) if block.get("type") == "context" else []:
            if isinstance(element, dict) and "text" in element:
                parts.append(str(element["text"]))
    return "\n".join(p for p in parts if p)


def format_message(message: Json, *, edited: bool = False, names: Names | None = None) -> str:
    """One message for the terminal: who, its text (indented), then its numbered buttons; with ``names``, people
    by name and Slack's markup as it reads (``<@U0HUMAN>`` is ``@riley``)."""
    text = message.get("text") or block_text(message.get("blocks")) or "(no text)"
    who = message["user"] if message.get("user") and not message.get("bot_id") else "bot"  # another person
    if names is not None:
        text, who = names.readable(text), (names.name(who) if who != "bot" else who)
    head = f"{who} (edited)> " if edited else f"{who}> "
    lines = [head + text.replace("\n", "\n" + " " * len(head))]
    for number, button in enumerate(extract_buttons(message), start=1):
        style = f" ({button['style']})" if button.get("style") else ""
        lines.append(f"{' ' * len(head)}[{number}] {button['text']}{style}")
    return "\n".join(lines)


def streamed_lines(message: Json, shown_text: str, shown_tasks: dict[str, str]) -> list[str]:
    """What a streamed message added since it was last shown: its task cards whose state changed, then, while Slack
    still streams it, the text appended to ``shown_text`` (``bot…>``). Once it is finished the whole message is
    printed as any other."""
    stream = message.get("stream") or {}
    lines = []
    for card in stream.get("tasks") or []:
        if shown_tasks.get(card["id"]) != card["status"]:
            shown_tasks[card["id"]] = card["status"]
            sources = ", ".join(s.get("url", "") for s in card.get("sources") or [])
            lines.append(f"[task: {card['title']} — {card['status']}{f' ({sources})' if sources else ''}]")
    text = str(message.get("text") or "")
    if stream.get("streaming"):
        added = text[len(shown_text) :] if text.startswith(shown_text) else text
        if added:
            lines.append("bot…> " + added.replace("\n", "\n      "))
    return lines


def format_reactions(names: Sequence[str], *, whose: str = "your message") -> str:
    return f"[reactions on {whose}: {', '.join(names) if names else '(none)'}]"


def reaction_names(message: Json) -> tuple[str, ...]:
    return tuple(r["name"] for r in message.get("reactions", []))


def parse_command(line: str) -> tuple[str, str]:
    """Split a typed line into a command (say, new, click, stop, help, quit, unknown) and its argument."""
    stripped = line.strip()
    if not stripped.startswith("/"):
        return "say", stripped
    name, _, rest = stripped[1:].partition(" ")
    if name in ("new", "click", "stop", "help", "quit"):
        return name, rest.strip()
    if name in ("exit", "q"):
        return "quit", ""
    return "unknown", f"/{name}"  # Slack's composer refuses an unknown command too, sending nothing


def load_stack(path: Path) -> Json:
    """The stack runner's ``stack.json``, or nothing when the stack is not running."""
    try:
        data: Json = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    return data


# -- the session ------------------------------------------------------------------------


class ChatSession:
    """One person in one channel; remembers the thread and what has been shown already."""

    def __init__(
        self, fake: FakeSlack, *, user: str, channel: str, bot_user_id: str, out: Callable[[str], None] = print
    ) -> None:
        self.fake, self.user, self.channel, self.bot_user_id, self.out = fake, user, channel, bot_user_id, out
        self.names = Names(self._handle)
        self.lock = threading.Lock()
        self.warned = False
        self.new_thread()

    def _handle(self, user_id: str) -> str | None:
        """A person's handle, from the workspace's directory (the page's people and the bot)."""
        try:
            directory = self.fake.snapshot(self.user)
        except FakeSlackError:
            return None
        people = [directory.get("bot") or {}, *(directory.get("people") or [])]
        return next((str(p.get("name")) for p in people if p.get("id") == user_id), None)

    def new_thread(self) -> None:
        with self.lock:
            self.thread_ts: str | None = None
            self.shown: dict[str, str] = {}  # ts -> fingerprint of what was printed
            self.streamed: dict[str, str] = {}  # a streamed message's ts -> its text as printed
            self.tasks: dict[str, str] = {}  # a task card's id -> its state as printed
            self.reactions: dict[str, tuple[str, ...]] = {}
            self.ephemerals: set[str] = set()
            self.buttons: tuple[str, list[Json]] | None = None
            self.status = ""  # the bot's status under the thread, as last shown

    def say(self, text: str) -> None:
        with self.lock:
            starting = self.thread_ts is None
            if starting:
                text = f"<@{self.bot_user_id}> {text}"
            result = self.fake.user_message(self.user, self.channel, text, thread_ts=self.thread_ts)
            if starting:
                self.thread_ts = result["ts"]
        if starting:
            self.out(f"[new thread {result['ts']} in {self.channel}]")
        if not result["deliveries"] and not self.warned:
            self.warned = True  # once: the stack may simply be running without the functions
            self.out("[no events URL is configured: the bot will not see this]")
        for delivery in result["deliveries"]:
            if delivery.get("error") or not 200 <= (delivery.get("status") or 0) < 300:
                why = delivery.get("error") or f"HTTP {delivery.get('status')}"
                self.out(f"[the app did not accept the {delivery['type']} event: {why}]")

    def click(self, argument: str) -> None:
        with self.lock:
            buttons = self.buttons
        if buttons is None:
            self.out("[no bot message with buttons in this thread yet]")
            return
        message_ts, choices = buttons
        if not argument.isdigit() or not 1 <= int(argument) <= len(choices):
            self.out(f"[choose a button from 1 to {len(choices)}: /click N]")
            return
        button = choices[int(argument) - 1]
        result = self.fake.click(
            self.user,
            self.channel,
            message_ts,
            button["action_id"],
            value=button.get("value"),
            block_id=button.get("block_id"),
        )
        outcome = result.get("error") or f"HTTP {result.get('status')}"
        self.out(f"[clicked {button['text']!r}: {outcome}]")

    def stop(self) -> None:
        """Press the Stop button of the session working in this thread (the latest one shown)."""
        with self.lock:
            thread = self.thread_ts
        messages = self.fake.messages(self.channel, thread) if thread else []
        for message in reversed(messages):
            for button in extract_buttons(message):
                if button["action_id"] == STOP_ACTION:
                    result = self.fake.click(self.user, self.channel, message["ts"], button["action_id"],
                                             value=button.get("value"), block_id=button.get("block_id"))  # fmt: skip
                    self.out(f"[pressed Stop: {result.get('error') or 'HTTP ' + str(result.get('status'))}]")
                    return
        self.out("[no Stop button in this thread: nothing is working here now]")

    def poll(self) -> list[str]:
        """What changed in the thread since the last poll, as lines to print."""
        with self.lock:
            if self.thread_ts is None:
                return []
            lines: list[str] = []
            for message in self.fake.messages(self.channel, self.thread_ts):
                lines.extend(self._changes(message))
            status = self.fake.status(self.channel, self.thread_ts)
            if status != self.status and status:
                lines.append(f"[bot {status}]")  # Slack's line under the thread: "is thinking…"
            self.status = status
            for ephemeral in self.fake.ephemerals(self.channel, self.user):
                if ephemeral["thread_ts"] in (None, self.thread_ts) and ephemeral["ts"] not in self.ephemerals:
                    self.ephemerals.add(ephemeral["ts"])
                    lines.append("[only visible to you] " + format_message(ephemeral, names=self.names))
            return lines

    def _changes(self, message: Json) -> list[str]:
        lines: list[str] = []
        ts, mine = message["ts"], message.get("user") == self.user and not message.get("bot_id")
        if message.get("stream") is not None:  # a streamed answer: its task cards and new text as they come
            lines.extend(streamed_lines(message, self.streamed.get(ts, ""), self.tasks))
            self.streamed[ts] = str(message.get("text") or "")
            if message["stream"].get("streaming"):
                return lines
        if not mine:
            fingerprint = json.dumps([message.get("text"), message.get("blocks")], sort_keys=True)
            if self.shown.get(ts) != fingerprint:
                lines.append(format_message(message, edited=ts in self.shown, names=self.names))
                self.shown[ts] = fingerprint
            if extract_buttons(message):
                self.buttons = (ts, extract_buttons(message))
        names = reaction_names(message)
        if names != self.reactions.get(ts, ()):
            lines.append(format_reactions(names, whose="your message" if mine else "the bot's message"))
        self.reactions[ts] = names
        return lines

    def handle(self, line: str) -> bool:
        """Act on one typed line; False means the person wants to leave."""
        command, argument = parse_command(line)
        if command == "quit":
            return False
        if command == "help":
            self.out(HELP)
        elif command == "new":
            self.new_thread()
            if argument:
                self.say(argument)
            else:
                self.out("[the next message starts a new thread]")
        elif command == "click":
            self.click(argument)
        elif command == "stop":
            self.stop()
        elif command == "unknown":
            self.out(f"[{argument} is not a command here: nothing was sent. /help lists the commands.]")
        elif argument:
            self.say(argument)
        return True


# -- terminal ---------------------------------------------------------------------------


class Terminal:
    """Prints from the polling thread without tearing the line being typed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.interactive = sys.stdin.isatty() and sys.stdout.isatty()
        self.readline: Any = None
        self.reading = False  # only a line being typed needs its prompt drawn again
        if self.interactive:
            try:
                import readline  # line editing and history; absent on some platforms

                self.readline = readline
            except ImportError:
                pass

    def print(self, text: str) -> None:
        if not text:
            return
        with self.lock:
            if self.interactive and self.reading:
                typed = self.readline.get_line_buffer() if self.readline is not None else ""
                sys.stdout.write(f"\r\033[K{text}\n{PROMPT}{typed}")
            else:
                sys.stdout.write(text + "\n")
            sys.stdout.flush()

    def read(self) -> str:
        self.reading = True
        try:
            return input(PROMPT if self.interactive else "")
        finally:
            self.reading = False


def poll_forever(session: ChatSession, terminal: Terminal, stop: threading.Event, interval: float) -> None:
    unreachable = False
    while not stop.wait(interval):
        try:
            lines = session.poll()
        except (OSError, FakeSlackError) as exc:
            if not unreachable:
                terminal.print(f"[cannot reach the fake Slack: {exc}]")
            unreachable = True
            continue
        unreachable = False
        for line in lines:
            terminal.print(line)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m infra.chat", description=__doc__.splitlines()[0])
    parser.add_argument("--stack-file", type=Path, default=Path(".local/stack.json"))
    parser.add_argument("--fake-slack", help="fake Slack root URL (default: from the stack file)")
    parser.add_argument("--bot-user-id", help="the bot's user id (default: from the stack file or the fake)")
    parser.add_argument("--user", default=CHAT_USER, help="who you are in Slack (an operator on the local stack)")
    parser.add_argument("--channel", default="C0LOCAL", help="where you talk (a D... id is a DM)")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between polls")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    stack = load_stack(args.stack_file)
    url = args.fake_slack or stack.get("fake_slack")
    if not url:
        print(
            f"No fake Slack: {args.stack_file} does not exist. Start the local stack, "
            "or pass --fake-slack http://127.0.0.1:PORT.",
            file=sys.stderr,
        )
        return 2
    fake = FakeSlack(url)
    try:
        bot_user_id = args.bot_user_id or stack.get("bot_user_id") or fake.config()["bot_user_id"]
    except (OSError, FakeSlackError) as exc:
        print(f"Cannot reach the fake Slack at {url}: {exc}", file=sys.stderr)
        return 1
    terminal = Terminal()
    session = ChatSession(fake, user=args.user, channel=args.channel, bot_user_id=bot_user_id, out=terminal.print)
    terminal.print(f"Chatting in {args.channel} as {args.user} with <@{bot_user_id}> via {url}. /help for help.")
    stop = threading.Event()
    poller = threading.Thread(target=poll_forever, args=(session, terminal, stop, args.interval), daemon=True)
    poller.start()
    try:
        while True:
            try:
                if not session.handle(terminal.read()):
                    break
            except (OSError, FakeSlackError) as exc:
                terminal.print(f"[that did not go through: {exc}]")
    except (EOFError, KeyboardInterrupt):
        print()
    finally:
        stop.set()
        poller.join(timeout=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
