"""Trees without contention (issue 28.4): what a delegated child's end costs in Firestore does not grow with its
siblings, children ending together still leave the tree's status message showing every end, write one document
the tree shares (its view) once each and never its root, and children asking their parent at once never write its
document in a transaction.

Before, each child's end refreshed the status message by reading every member of the tree (one query returning
each sibling): a tree of 8 cost its first child 7 reads more than a tree of 1 (N children ending: N² reads).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from google.cloud.firestore_v1.services.firestore.client import FirestoreClient
from google.cloud.firestore_v1.transaction import Transaction

from bench import cost, trees
from bench.firestore_ops import Ops
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import Stack
from shared.asks import tree_status
from shared.state import firestore, ids, parent_asks, sessions, tree_view
from shared.state.models import SessionStatus
from tests.poll import wait_for
from tests.rigs import asking_tree, counted_rig

pytestmark = pytest.mark.stack

ROOMY = {"TREE_MAX_TURNS": "200", "TREE_MAX_TOOL_CALLS": "400"}  # room for 8 children
TREE_MARK = ":busts_in_silhouette:"  # the status message listing a tree's delegated tasks


def _fan_out(rig: cost.Rig, children: int, *, reply: dict[str, Any] | None = None) -> tuple[str, list[str]]:
    """A parent whose one turn starts ``children`` non-blocking children and ends; returns it and its children
    (each child's model gives ``reply``, by default a text)."""
    tag = uuid.uuid4().hex[:10]
    tasks = [f"check part {n} [{tag}]" for n in range(children)]
    parent = rig.start(f"check every part {tag}")
    rig.script(FakeGemini.calls(*[("delegate", {"task": task, "blocking": False}) for task in tasks]),
               FakeGemini.text("Started them."))  # fmt: skip
    for n, task in enumerate(tasks):  # after the parent's replies: its second request holds the tasks too
        rig.gemini.script(FakeGemini.matching(task, reply or FakeGemini.text(f"part {n} is fine")))
    rig.deliver(parent)
    rig.expect(parent, SessionStatus.DONE)
    started = [ids.child_id(parent, 1, n) for n in range(children)]
    assert all(rig.session(child) for child in started)
    return parent, started


def _ending_at_once(rig: cost.Rig, child_ids: list[str]) -> Ops:
    """Every child's task delivered at once, each on a thread of its own (retried as Cloud Tasks retries); the
    operations of all of them."""
    workers = [threading.Thread(target=rig.deliver_retried, args=(child,)) for child in child_ids]

    def all_at_once() -> None:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()

    return rig.measure(all_at_once)


def _first_child_end(rig: cost.Rig, children: int) -> Ops:
    _, child_ids = _fan_out(rig, children)
    ops = rig.delivered(child_ids[0], SessionStatus.DONE)
    for child in child_ids[1:]:
        rig.deliver(child)
    return ops


@pytest.mark.timeout(300)
def test_a_childs_end_costs_the_same_in_a_tree_of_one_and_of_eight(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child that ends beside siblings still working reads the tree's view once more after its update of the
    status message (an older view's update may land after a newer one's): one read, however many siblings."""
    with counted_rig(stack, monkeypatch, **ROOMY) as rig:
        alone = _first_child_end(rig, 1)
        among_two = _first_child_end(rig, 2)
        among_eight = _first_child_end(rig, 8)
        rig.gemini.reset()  # the late results' continuations are not delivered: their replies are not asked for
    assert among_eight.billed() == among_two.billed()
    assert among_two.billed() == {**alone.billed(), "reads": alone.billed()["reads"] + 1}
    assert alone.queries == 0  # the tree is not read whole at a child's end


@pytest.mark.timeout(300)
def test_children_ending_together_leave_every_end_in_the_status_message(
    stack: Stack, fake_slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    with counted_rig(stack, monkeypatch, **ROOMY) as rig:
        parent, child_ids = _fan_out(rig, 8)
        ops = _ending_at_once(rig, child_ids)
        for child in child_ids:
            rig.expect(child, SessionStatus.DONE)
        origin = rig.session(parent).origin
        rig.gemini.reset()
    [status] = [m for m in fake_slack.bot_replies(origin.channel, origin.thread_ts) if m["text"].startswith(TREE_MARK)]
    assert "(8 of 8 finished)" in status["text"]
    assert ops.rollbacks == 0  # no child's end transacts on a document a sibling writes
    assert [line.endswith("done_") for line in status["text"].splitlines()[1:]] == [True] * 8


@pytest.mark.timeout(300)
def test_children_asking_their_parent_at_once_never_write_its_document_in_a_transaction(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, each child's ``ask_parent`` was one transaction that read its parent and wrote it (the question as a
    note, the parent's waiting record released, the siblings flipped): four children asking at once, each delivered
    on a thread of its own, contended for the parent's document (rollbacks, and in CI the parent's step commit met
    lock timeouts). Now a child's question is a record of its own: the only documents an asking child's transactions
    write are its own and that record."""
    asking = threading.local()
    written: list[tuple[str, str]] = []  # (asking child, document a transaction of its ask wrote)
    asks: list[str] = []
    lock = threading.Lock()

    def noting(write: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Transaction, reference: Any, *args: Any, **kwargs: Any) -> Any:
            if (child := getattr(asking, "child", None)) is not None:
                with lock:
                    written.append((child, reference.path))
            return write(self, reference, *args, **kwargs)

        return wrapper

    for method in ("create", "set", "update", "delete"):
        monkeypatch.setattr(Transaction, method, noting(getattr(Transaction, method)))
    ask = parent_asks.ask_parent

    def asked(child: Any, question: Any, **kwargs: Any) -> Any:
        asking.child = child.session_id
        with lock:
            asks.append(child.session_id)
        try:
            return ask(child, question, **kwargs)
        finally:
            asking.child = None

    monkeypatch.setattr(parent_asks, "ask_parent", asked)
    # The parent may take each question and each result in a turn of its own (1 + 4 + 4): the suite's 6 turns a
    # session ran out when they arrived apart (a fresh clone's CI failed so), and a child was left unanswered.
    with counted_rig(stack, monkeypatch, **trees.ROOMY, SESSION_MAX_TURNS="40") as rig:
        tree = asking_tree(rig, 4)
        rig.gemini.reset()  # the plain replies scripted with room to spare
    assert tree.failed == 0
    assert len(set(asks)) == 4
    foreign = sorted({(child, path) for child, path in written
                      if path != f"sessions/{child}" and not path.endswith(f"/asked/{child}")})  # fmt: skip
    assert not foreign, f"an asking child's transaction wrote another session's document: {foreign[:6]}"


def _written(request: Any) -> list[str]:
    """The documents a Commit request writes (an update, its transforms, a delete), by path."""
    paths = []
    for write in request["writes"] if isinstance(request, dict) else request.writes:
        name = write.update.name or write.delete or write.transform.document
        paths.append(name.split("/documents/", 1)[1])
    return paths


@pytest.mark.timeout(300)
def test_sixteen_children_ending_at_once_write_their_tree_view_once_each_and_never_its_root(
    stack: Stack, fake_slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, each child's end wrote the tree's two shared documents: its root (the allotment it did not use and its
    tokens, an increment in its ending transaction) and, after it, the tree's view (its line, for the status
    message): N children ending together queued 2N commits on two documents, the root's among its parent's step
    commits. Now its ending transaction writes its line, what it gives back and its tokens into the view in one
    write, and the refresh after it only reads: the root is written by none of their deliveries."""
    written: list[str] = []
    lock = threading.Lock()
    commit = FirestoreClient.commit

    def noting(self: FirestoreClient, request: Any = None, **kwargs: Any) -> Any:
        with lock:
            written.extend(_written(request))
        return commit(self, request, **kwargs)

    with counted_rig(stack, monkeypatch, **trees.ROOMY, SESSION_MAX_TOOL_CALLS="40") as rig:  # the suite's is 10
        parent, child_ids = _fan_out(rig, 16)
        monkeypatch.setattr(FirestoreClient, "commit", noting)
        ops = _ending_at_once(rig, child_ids)
        monkeypatch.setattr(FirestoreClient, "commit", commit)
        for child in child_ids:
            rig.expect(child, SessionStatus.DONE)
        origin = rig.session(parent).origin
        rig.gemini.reset()
    view = tree_view.view_ref(parent).path
    assert f"sessions/{parent}" not in written, "a child's end wrote its tree's root"
    assert written.count(view) == len(child_ids)  # each end once: its line, its returns and tokens together
    assert ops.rollbacks == 0
    [status] = [m for m in fake_slack.bot_replies(origin.channel, origin.thread_ts) if m["text"].startswith(TREE_MARK)]
    assert "(16 of 16 finished)" in status["text"]


@pytest.mark.timeout(300)
def test_children_ending_before_their_root_first_shows_the_tree_leave_the_whole_tree_to_its_refresh(
    stack: Stack, fake_slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Children delivered as they are created (Cloud Tasks as deployed) can end before their root's first refresh of
    the status message has stored the tree's view: each found the view incomplete and read the whole tree itself,
    with nowhere to show it (a child posts no message): N children, N queries of N+1 sessions (issue 28.4, measured
    in bench.trees under load: 32 of 32 children of a round). Now they leave it to the root's refresh, which reads
    the tree after their ends were stored and shows every one of them."""
    children = 8
    tag = uuid.uuid4().hex[:10]
    tasks = [f"check part {n} [{tag}]" for n in range(children)]
    ended = threading.Event()
    members_at = tree_view.tree_members_at
    read_by_children: list[str] = []
    root_thread: list[threading.Thread] = []

    def held_for_the_root(root_id: str) -> Any:
        if threading.current_thread() in root_thread:  # the root's first refresh: once its children have ended
            assert ended.wait(120), "the children did not end"
        else:
            read_by_children.append(root_id)
        return members_at(root_id)

    monkeypatch.setattr(tree_view, "tree_members_at", held_for_the_root)
    with counted_rig(stack, monkeypatch, **ROOMY) as rig:
        parent = rig.start(f"check every part {tag}")
        rig.script(FakeGemini.calls(*[("delegate", {"task": task, "blocking": False}) for task in tasks]),
                   *[FakeGemini.text("Noted.") for _ in range(children + 2)])  # fmt: skip
        for n, task in enumerate(tasks):
            rig.gemini.script(FakeGemini.matching(task, FakeGemini.text(f"part {n} is fine")))
        root_thread.append(threading.Thread(target=rig.deliver_retried, args=(parent,)))
        root_thread[0].start()
        child_ids = [ids.child_id(parent, 1, n) for n in range(children)]
        wait_for(lambda: all(sessions.get_session(c) for c in child_ids), what="the root's turn to create its children")
        ops = _ending_at_once(rig, child_ids)
        ended.set()
        root_thread[0].join(120)
        for child in child_ids:
            rig.expect(child, SessionStatus.DONE)
        origin = rig.session(parent).origin
        rig.gemini.reset()
    assert read_by_children == []  # no child read the whole tree
    assert ops.queries == 0
    [status] = [m for m in fake_slack.bot_replies(origin.channel, origin.thread_ts) if m["text"].startswith(TREE_MARK)]
    assert f"({children} of {children} finished)" in status["text"]
    assert [line.endswith("done_") for line in status["text"].splitlines()[1:]] == [True] * children


@pytest.mark.timeout(300)
def test_a_child_of_a_tree_shown_before_views_were_kept_still_shows_its_end(
    stack: Stack, fake_slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tree whose status message was posted before views were kept (its ts on its root session, no view stored):
    a child's end finds no view and reads the whole tree to show it, as before (only a tree not shown yet is left
    to its root's refresh)."""
    with counted_rig(stack, monkeypatch, **ROOMY) as rig:
        parent, child_ids = _fan_out(rig, 2)
        view = tree_view.view_ref(parent)
        posted = (view.get().to_dict() or {})["status_ts"]
        view.delete()
        firestore.session_ref(parent).update({"tree_status_ts": posted})
        ops = rig.delivered(child_ids[0], SessionStatus.DONE)
        origin = rig.session(parent).origin
        rig.gemini.reset()  # its late result's continuation is not delivered
    assert ops.queries == 1  # the whole tree, read by the child
    [status] = [m for m in fake_slack.bot_replies(origin.channel, origin.thread_ts) if m["text"].startswith(TREE_MARK)]
    assert status["ts"] == posted
    assert "(1 of 2 finished)" in status["text"]


@pytest.mark.timeout(300)
def test_a_child_end_whose_status_update_reaches_slack_after_its_siblings_still_leaves_every_end_shown(
    stack: Stack, fake_slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two children ending together, with real Slack latency: the first read the tree's view while its sibling
    still worked, and its chat.update reached Slack after the sibling's, which showed both ended. The message was
    left showing the sibling working (and the tree's Stop button) for good: nothing else refreshes a tree whose
    parent has ended. A child whose end it showed beside tasks still working now reads the view again after its
    update, and shows what changed meanwhile."""
    from shared.slack import client as slack_client

    update = slack_client.update
    last_landed = threading.Event()
    held: list[str] = []

    def late_for_the_first(channel: str, ts: str, text: str, **kwargs: Any) -> None:
        if "(1 of 2 finished)" in text and not held:  # the first end's update: it reaches Slack after the second's
            held.append(text)
            assert last_landed.wait(120), "the second child's end never updated the message"
        update(channel, ts, text, **kwargs)
        if "(2 of 2 finished)" in text:
            last_landed.set()

    with counted_rig(stack, monkeypatch, **ROOMY) as rig:
        parent, child_ids = _fan_out(rig, 2)
        monkeypatch.setattr(slack_client, "update", late_for_the_first)
        first = threading.Thread(target=rig.deliver, args=(child_ids[0],))
        first.start()
        wait_for(lambda: bool(held), what="the first child's end to update the message")
        rig.deliver(child_ids[1])
        first.join(120)
        for child in child_ids:
            rig.expect(child, SessionStatus.DONE)
        origin = rig.session(parent).origin
        rig.gemini.reset()  # the late results' continuations are not delivered
    [status] = [m for m in fake_slack.bot_replies(origin.channel, origin.thread_ts) if m["text"].startswith(TREE_MARK)]
    assert "(2 of 2 finished)" in status["text"]


@pytest.mark.timeout(300)
def test_a_child_whose_sibling_stored_its_line_after_it_leaves_the_status_message_to_that_sibling(
    stack: Stack, fake_slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Children ending together each updated the status message with the view they read, even one a sibling's
    later write had overtaken: a tree of 32 made 39 chat.update calls on one message within a second (bench.trees),
    where Slack allows chat.update about 50 a minute. A child whose line a sibling stored after it now leaves the
    message to that sibling, whose read of the view (after its write) holds both ends."""
    from shared.slack import client as slack_client

    read, update = tree_view.read, slack_client.update
    first: list[threading.Thread] = []
    second_shown = threading.Event()
    updates: list[str] = []

    def late_for_the_first(root_id: str) -> tree_view.View:
        if threading.current_thread() in first:  # the first end reads the view once its sibling has shown it
            assert second_shown.wait(120), "the second child's end never finished"
        return read(root_id)

    def counted(channel: str, ts: str, text: str, **kwargs: Any) -> None:
        updates.append(text)
        update(channel, ts, text, **kwargs)

    with counted_rig(stack, monkeypatch, **ROOMY) as rig:
        parent, child_ids = _fan_out(rig, 2)
        monkeypatch.setattr(tree_view, "read", late_for_the_first)
        monkeypatch.setattr(slack_client, "update", counted)
        failed: list[BaseException] = []

        def first_end() -> None:
            try:
                rig.deliver(child_ids[0])
            except BaseException as exc:  # (asserted below: a thread's failure is not the test's)
                failed.append(exc)

        first.append(threading.Thread(target=first_end))
        first[0].start()
        try:
            wait_for(lambda: rig.session(child_ids[0]).status == SessionStatus.DONE, what="the first child's end")
            rig.deliver(child_ids[1])
        finally:
            second_shown.set()
        first[0].join(120)
        assert not first[0].is_alive()
        assert failed == []
        rig.expect(child_ids[1], SessionStatus.DONE)
        origin = rig.session(parent).origin
        rig.gemini.reset()  # the late results' continuations are not delivered
    [shown] = updates  # the second end's, holding both
    assert "(2 of 2 finished)" in shown
    [status] = [m for m in fake_slack.bot_replies(origin.channel, origin.thread_ts) if m["text"].startswith(TREE_MARK)]
    assert "(2 of 2 finished)" in status["text"]


def _status_message(fake_slack: FakeSlack, rig: cost.Rig, parent: str) -> str:
    origin = rig.session(parent).origin
    [status] = [m for m in fake_slack.bot_replies(origin.channel, origin.thread_ts) if m["text"].startswith(TREE_MARK)]
    text: str = status["text"]
    return text


@pytest.mark.timeout(300)
def test_a_child_given_up_outside_its_run_shows_its_end(
    stack: Stack, fake_slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child whose worker died at the same step on every attempt is failed by its next delivery before any run
    (``give_up``): its end and its line were stored, and the status message showed it working for good. Every
    writer of a line now shows it, which a sibling that left its update to it relies on."""
    with counted_rig(stack, monkeypatch, **ROOMY) as rig:
        parent, child_ids = _fan_out(rig, 2)
        rig.deliver(child_ids[0])
        claimed = sessions.claim_session(child_ids[1], worker="dead", task="t-dead", attempt=0, lease_seconds=0)
        assert claimed.session is not None
        firestore.session_ref(child_ids[1]).update({"takeovers_without_progress": 3})
        rig.deliver(child_ids[1])  # a fourth takeover without progress: given up
        rig.expect(child_ids[1], SessionStatus.FAILED)
        text = _status_message(fake_slack, rig, parent)
        rig.gemini.reset()  # the late results' continuations are not delivered
    assert "(2 of 2 finished)" in text


@pytest.mark.timeout(300)
def test_a_childs_end_its_worker_died_before_showing_is_shown_by_its_next_delivery(
    stack: Stack, fake_slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that dies between storing its child's end and showing it (its task is delivered again, as Cloud Tasks
    retries a delivery that never answered): the retry finds the child ended and shows its end."""
    show = tree_status.show
    died: list[str] = []

    def dies_after_the_end(child: Any, surface: Any) -> None:
        if child.session_id in died or child.status != SessionStatus.DONE:
            show(child, surface)
        else:  # the first delivery's show of its end: never made
            died.append(child.session_id)

    with counted_rig(stack, monkeypatch, **ROOMY) as rig:
        parent, child_ids = _fan_out(rig, 2)
        monkeypatch.setattr(tree_status, "show", dies_after_the_end)
        rig.deliver(child_ids[0])
        assert died == [child_ids[0]]
        assert "(0 of 2 finished)" in _status_message(fake_slack, rig, parent)
        rig.deliver(child_ids[0])  # the retry
        text = _status_message(fake_slack, rig, parent)
        rig.gemini.reset()  # the late results' continuations are not delivered
    assert "(1 of 2 finished)" in text


@pytest.mark.timeout(300)
def test_children_ending_before_their_trees_message_is_known_are_shown_by_the_root_that_posts_it(
    stack: Stack, fake_slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Children delivered as they are created can end between their root's full read of the tree and its storing
    of the status message's ts: their view was complete but named no message, so they showed nothing (each later
    one leaving its update to the last), and the root posted the tree as it read it, every task working, for good.
    The root now reads the view once more after storing the ts and shows what changed."""
    children = 4
    tag = uuid.uuid4().hex[:10]
    tasks = [f"check part {n} [{tag}]" for n in range(children)]
    ended = threading.Event()
    set_status_ts = tree_view.set_status_ts
    root_thread: list[threading.Thread] = []

    def held_for_the_children(root_id: str, ts: str) -> None:
        if threading.current_thread() in root_thread:  # the message is posted: its ts stored once children ended
            assert ended.wait(120), "the children did not end"
        set_status_ts(root_id, ts)

    monkeypatch.setattr(tree_view, "set_status_ts", held_for_the_children)
    with counted_rig(stack, monkeypatch, **ROOMY) as rig:
        parent = rig.start(f"check every part {tag}")
        rig.script(FakeGemini.calls(*[("delegate", {"task": task, "blocking": False}) for task in tasks]),
                   *[FakeGemini.text("Noted.") for _ in range(children + 2)])  # fmt: skip
        for n, task in enumerate(tasks):
            rig.gemini.script(FakeGemini.matching(task, FakeGemini.text(f"part {n} is fine")))
        root_thread.append(threading.Thread(target=rig.deliver_retried, args=(parent,)))
        root_thread[0].start()
        wait_for(lambda: (tree_view.view_ref(parent).get().to_dict() or {}).get("complete"),
                 what="the root's full read of its tree")  # fmt: skip
        child_ids = [ids.child_id(parent, 1, n) for n in range(children)]
        _ending_at_once(rig, child_ids)
        ended.set()
        root_thread[0].join(120)
        for child in child_ids:
            rig.expect(child, SessionStatus.DONE)
        text = _status_message(fake_slack, rig, parent)
        rig.gemini.reset()
    assert f"({children} of {children} finished)" in text


@pytest.mark.timeout(300)
def test_a_childs_end_shown_while_slack_is_unreachable_is_still_a_delivery_done(
    stack: Stack, fake_slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Showing a child's end is best effort: Slack out of reach (the SDK's retries given up) is logged, and the
    delivery of an ended child still answers 2xx, as before it showed anything; a 5xx would have Cloud Tasks deliver
    it again for as long as Slack stays away."""
    from urllib.error import URLError

    from shared.slack import client as slack_client

    def unreachable(*args: Any, **kwargs: Any) -> None:
        raise URLError("slack.com unreachable")

    with counted_rig(stack, monkeypatch, **ROOMY) as rig:
        _, child_ids = _fan_out(rig, 2)
        rig.deliver(child_ids[0])
        monkeypatch.setattr(slack_client, "update", unreachable)
        rig.deliver(child_ids[0])  # again, as Cloud Tasks may: it shows the end once more, and cannot
        rig.expect(child_ids[0], SessionStatus.DONE)
        rig.gemini.reset()  # the late results' continuations are not delivered


@pytest.mark.timeout(300)
def test_a_child_failing_in_its_run_updates_the_status_message_once(
    stack: Stack, fake_slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child whose model stays unavailable fails in its run, which shows its end once (the run's last update), not
    again from the failure's own path, which shows ends stored outside a run."""
    from shared.slack import client as slack_client

    update = slack_client.update
    updates: list[str] = []

    def counted(channel: str, ts: str, text: str, **kwargs: Any) -> None:
        updates.append(text)
        update(channel, ts, text, **kwargs)

    with counted_rig(stack, monkeypatch, **ROOMY) as rig:
        parent, [child] = _fan_out(rig, 1, reply=FakeGemini.error(503, "UNAVAILABLE", "overloaded", times=3))
        monkeypatch.setattr(slack_client, "update", counted)
        rig.deliver(child)
        rig.expect(child, SessionStatus.FAILED)
        text = _status_message(fake_slack, rig, parent)
        rig.gemini.reset()  # the late result's continuation is not delivered
    assert "(1 of 1 finished)" in text
    assert len(updates) == 1
