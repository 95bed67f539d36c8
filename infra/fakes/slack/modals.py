"""Slack's modals in the fake: ``views.open`` (with a button press's ``trigger_id``: unknown, used or over 3 s old
is refused as Slack refuses it), ``views.update``, and a person's submission (``POST /_fake/submit_view``), delivered
to the app as a signed ``view_submission``. The app's answer is Slack's: an empty body closes the modal;
``response_action: errors`` keeps it open with those errors under their fields (``update`` replaces it).

``GET /_fake/views`` lists open modals (the page shows a person theirs); ``POST /_fake/close_view`` is Cancel.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any
from urllib.parse import urlencode

from .state import Json, SlackError, Workspace, opt, req

TRIGGER_SECONDS = 3.0  # a trigger_id is good for one views.open within three seconds of the press
MAX_VIEW_BLOCKS = 100
TITLE_CHARS = 24
INITIAL_VALUE_CHARS = 3000  # a plain_text_input's initial_value


def _checked(view: Any) -> Json:
    if isinstance(view, str):
        try:
            view = json.loads(view)
        except ValueError:
            raise SlackError("invalid_arguments") from None
    if not isinstance(view, dict) or view.get("type") != "modal":
        raise SlackError("invalid_arguments")
    blocks = view.get("blocks") or []
    title = (view.get("title") or {}).get("text", "")
    if not isinstance(blocks, list) or len(blocks) > MAX_VIEW_BLOCKS or not title or len(title) > TITLE_CHARS:
        raise SlackError("invalid_arguments")
    for block in blocks:  # Slack's limit on a plain_text_input's initial value
        initial = ((block or {}).get("element") or {}).get("initial_value") if isinstance(block, dict) else None
        if isinstance(initial, str) and len(initial) > INITIAL_VALUE_CHARS:
            raise SlackError("invalid_arguments")
    return view


def views_open(ws: Workspace, args: Json) -> Json:
    trigger = req(args, "trigger_id", "invalid_trigger_id")
    issued = ws.triggers.pop(trigger, None)
    if issued is None:
        raise SlackError("invalid_trigger_id")
    user, at = issued
    if time.time() - at > TRIGGER_SECONDS:
        raise SlackError("expired_trigger_id")
    view = _checked(args.get("view"))
    shown = {**view, "id": "V" + uuid.uuid4().hex[:10].upper(), "user": user, "hash": uuid.uuid4().hex,
             "state": {"values": {}}, "errors": {}}  # fmt: skip
    ws.views[shown["id"]] = shown
    ws.touch()
    return {"ok": True, "view": shown}


def views_update(ws: Workspace, args: Json) -> Json:
    view_id = req(args, "view_id", "not_found")
    current = ws.views.get(view_id)
    if current is None:
        raise SlackError("not_found")
    given_hash = opt(args, "hash")
    if given_hash and given_hash != current["hash"]:
        raise SlackError("hash_conflict")
    view = _checked(args.get("view"))
    current.update({**view, "hash": uuid.uuid4().hex, "errors": {}})
    ws.touch()
    return {"ok": True, "view": current}


def _value(element: Json, given: Any) -> Json:
    """A field's state as Slack sends it: what the person entered, else the field's initial value."""
    kind = element.get("type")
    if kind == "static_select":
        option = element.get("initial_option") if given is None else {"text": {"type": "plain_text", "text": given},
                                                                       "value": given}  # fmt: skip
        return {"type": kind, "selected_option": option}
    return {"type": kind, "value": element.get("initial_value") if given is None else given}


def ctl_submit_view(ws: Workspace, args: Json) -> Json:
    """A person presses the modal's submit button: ``view_id``, ``user`` and ``values`` (block id to the text
    typed or the option value chosen; fields not given keep their initial values)."""
    view_id = req(args, "view_id", "not_found")
    given = args.get("values") or {}
    with ws.lock:
        view = ws.views.get(view_id)
        if view is None:
            raise SlackError("not_found")
        values = {
            b["block_id"]: {b["element"].get("action_id", "value"): _value(b["element"], given.get(b["block_id"]))}
            for b in view.get("blocks") or [] if b.get("type") == "input" and b.get("block_id")
        }  # fmt: skip
        view["state"] = {"values": values}
        cfg, profile = ws.config, ws.ensure_user(str(args.get("user") or view["user"]))
        payload = {
            "type": "view_submission", "team": {"id": cfg.team_id, "domain": "fake-workspace"},
            "user": {"id": profile["id"], "username": profile["name"], "name": profile["name"], "team_id": cfg.team_id},
            "api_app_id": cfg.app_id, "token": cfg.verification_token,
            "trigger_id": f"{int(time.time() * 1000)}.{uuid.uuid4().hex}", "view": json.loads(json.dumps(view)),
            "response_urls": [], "is_enterprise_install": False,
        }  # fmt: skip
        url = ws.config.interactivity_url
    if not url:
        return {"ok": True, "status": None, "error": "no interactivity_url configured"}
    from .server import deliver  # the one delivery path (imported here: server imports this module's routes)

    body = urlencode({"payload": json.dumps(payload)})
    record = deliver(ws, url, body, content_type="application/x-www-form-urlencoded", kind="interactivity")
    answer: Json = {}
    if record.get("status") == 200 and record.get("response"):
        try:
            answer = json.loads(record["response"])
        except ValueError:
            answer = {}
    with ws.lock:
        if record.get("status") == 200 and answer.get("response_action") == "errors":
            view["errors"] = answer.get("errors") or {}
        elif record.get("status") == 200 and answer.get("response_action") == "update":
            view.update({**_checked(answer.get("view")), "errors": {}})
        elif record.get("status") == 200:
            ws.views.pop(view_id, None)  # closed
        ws.touch()
    return {"ok": True, "status": record["status"], "error": record["error"], "answer": answer,
            "open": view_id in ws.views}  # fmt: skip


def ctl_views(ws: Workspace, args: Json) -> Json:
    user = opt(args, "user")
    with ws.lock:
        return {"ok": True, "views": [v for v in ws.views.values() if user in (None, v["user"])]}


def ctl_close_view(ws: Workspace, args: Json) -> Json:
    with ws.lock:
        ws.views.pop(req(args, "view_id", "not_found"), None)
        ws.touch()
    return {"ok": True}


API = {"views.open": views_open, "views.update": views_update}
CONTROL = {
    ("POST", "submit_view"): ctl_submit_view,
    ("GET", "views"): ctl_views,
    ("POST", "close_view"): ctl_close_view,
}
