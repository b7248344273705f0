"""The learner's side: join a live class from a notebook, and leave it.

    from lab_utils import classroom
    classroom.join("http://10.0.0.5:8765", "K7QX2P", "otter")   # URL and code from the instructor
    ...                                                          # predict(...), check_...(fn)
    classroom.leave()

Or set ``LAB_CLASS=http://10.0.0.5:8765/?code=K7QX2P&name=otter`` before starting Jupyter: the
first commit joins. From then on every prediction the learner commits (and what its reveal
showed) and every exercise result (passed, or the grader's message) go to the class server under
the pseudonym. Nothing is sent before joining or after leaving. Predictions committed before
joining stay private.

If the server cannot be reached the notebook goes on exactly as before: it says once that the class
is offline, keeps the messages (a commit is in ``predictions.json`` anyway) and sends them when the
server answers again (a background thread retries every few seconds).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

from lab_utils.classroom.messages import PSEUDONYM

ENV = "LAB_CLASS"
TIMEOUT_S = 2.0  # a request to the server; loopback or the room's network answer in ms
RETRY_S = 3.0
MAX_OUTBOX = 500
STARTED = time.time()  # with LAB_CLASS, commits from this process on are sent


class ClassError(Exception):
    """The server refused a request (wrong code, a bad field...): its message, as it said it."""


@dataclass
class Membership:
    url: str
    code: str
    pseudonym: str
    joined_at: float = field(default_factory=time.time)
    sent: dict = field(default_factory=dict)  # prediction key -> entry as last sent
    outbox: list = field(default_factory=list)  # (path, message) not yet delivered
    offline: bool = False
    told_offline: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    retrying: threading.Thread | None = None


_member: Membership | None = None
_env_tried = False


def post(url: str, code: str, path: str, msg: dict) -> dict:
    """POST one message; ClassError if refused, OSError if the server cannot be reached."""
    req = urllib.request.Request(
        url.rstrip("/") + path,
        data=json.dumps(msg).encode(),
        headers={"Content-Type": "application/json", "X-Class-Code": code},
    )
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        try:
            reason = json.loads(exc.read()).get("error", exc.reason)
        except ValueError:
            reason = exc.reason
        raise ClassError(f"the class server refused it ({exc.code}): {reason}") from None


def join(url: str, code: str, pseudonym: str) -> Membership:
    """Join the class at ``url`` with its ``code`` under ``pseudonym`` (no real name needed)."""
    global _member
    if not re.fullmatch(r"https?://[^\s/]+/?", url or ""):
        raise ValueError(f"url must look like 'http://10.0.0.5:8765', got {url!r}")
    if not isinstance(pseudonym, str) or not PSEUDONYM.fullmatch(pseudonym.strip()):
        raise ValueError(
            f"pseudonym must be 1-32 letters, digits or ' _.-' (no real name "
            f"needed), got {pseudonym!r}"
        )
    member = Membership(url.rstrip("/"), str(code).strip().upper(), pseudonym.strip())
    try:
        post(member.url, member.code, "/api/join", {"pseudonym": member.pseudonym})
        print(
            f"joined the class as {member.pseudonym!r}: your commits and exercise results "
            "are shared with the instructor (classroom.leave() stops it)"
        )
        _member = member
    except OSError:  # unreachable: joined here all the same, the server hears of it later
        member.offline = True
        member.outbox.append(("/api/join", {"pseudonym": member.pseudonym}))
        _member = member  # before the retry thread starts: it runs while this is the member
        _say_offline(member)
        _retry_later(member)
    return member


def leave() -> None:
    """Stop sending. The server keeps what it received; your notebook keeps everything."""
    global _member
    member, _member = _member, None
    if member is None:
        print("not in a class")
        return
    try:
        post(member.url, member.code, "/api/leave", {"pseudonym": member.pseudonym})
    except (OSError, ClassError):
        pass  # leaving works offline too: nothing more will be sent
    print(
        f"left the class; {len(member.outbox)} unsent message(s) dropped"
        if member.outbox
        else "left the class"
    )


def status() -> str:
    if _member is None:
        return "not in a class"
    state = "offline, retrying" if _member.offline else "online"
    return f"in the class at {_member.url} as {_member.pseudonym!r} ({state})"


def current() -> Membership | None:
    """The membership (joining from LAB_CLASS on first use), or None: then nothing is sent."""
    global _env_tried
    if _member is None and os.environ.get(ENV) and not _env_tried:
        _env_tried = True  # a bad LAB_CLASS is reported once, and never breaks a commit
        parts = urlsplit(os.environ[ENV])
        query = parse_qs(parts.query)
        try:
            member = join(
                f"{parts.scheme}://{parts.netloc}",
                (query.get("code") or [""])[0],
                (query.get("name") or [""])[0],
            )
            member.joined_at = STARTED  # the variable was set before this Python started
        except (ValueError, ClassError) as exc:
            print(f"class: not joined from {ENV}={os.environ[ENV]!r}: {exc}")
    return _member


# ---------------------------------------------------------------- hooks (the exercises call these)
def predictions_saved(store: dict) -> None:
    """Called with the learner's whole predictions.json each time it is saved: sends the entries
    committed since joining that the server has not seen in this form (a commit, then its
    reveal)."""
    member = current()
    if member is None:
        return
    for key, entry in store.items():
        if not isinstance(entry, dict) or entry.get("time", 0) < member.joined_at:
            continue
        if member.sent.get(key) != entry:
            member.sent[key] = dict(entry)
            msg = {
                "pseudonym": member.pseudonym,
                "key": key,
                **{
                    k: entry.get(k)
                    for k in ("question", "unit", "guess", "formula", "measured", "answer")
                },
                "choices": entry.get("choices", []),
            }
            _send(member, "/api/prediction", msg)


def exercise_checked(name: str, passed: bool, message: str) -> None:
    """Called with each exercise verdict the learner sees."""
    member = current()
    if member is not None:
        _send(
            member,
            "/api/result",
            {
                "pseudonym": member.pseudonym,
                "exercise": name,
                "passed": passed,
                "misconception": misconception(message),
            },
        )


def misconception(message: str) -> str:
    """The grader's message as a label the room's answers group by: no rank list, no numbers."""
    first = message.split("\n", 1)[0]
    first = re.sub(r"^(every rank|ranks? [\d, ]+):\s*", "", first)
    return re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "#", first)[:200]


# ---------------------------------------------------------------- delivery
def _send(member: Membership, path: str, msg: dict) -> None:
    with member.lock:
        if len(member.outbox) < MAX_OUTBOX:
            member.outbox.append((path, msg))
    if not member.offline:
        _flush(member)
    if member.offline:
        _say_offline(member)
        _retry_later(member)


def _flush(member: Membership) -> None:
    """Deliver the outbox in order; stop at the first unreachable attempt."""
    with member.lock:
        while member.outbox:
            path, msg = member.outbox[0]
            try:
                post(member.url, member.code, path, msg)
            except ClassError as exc:
                print(f"class: {exc}")  # refused for good (a closed question): not resent
            except OSError:
                member.offline = True
                return
            member.outbox.pop(0)
        member.offline = False


def _say_offline(member: Membership) -> None:
    if not member.told_offline:
        member.told_offline = True
        print(
            f"the class server at {member.url} is offline: your notebook works as usual and "
            "your commits will be sent when it is back"
        )


def _retry_later(member: Membership) -> None:
    if member.retrying is not None and member.retrying.is_alive():
        return

    def retry() -> None:
        while member.offline and _member is member:
            time.sleep(RETRY_S)
            _flush(member)

    member.retrying = threading.Thread(target=retry, name="classroom-retry", daemon=True)
    member.retrying.start()
