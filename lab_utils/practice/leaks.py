"""Does an executed notebook show any practice answer before its submit? (lab 12's test)

    leaks = find_leaks(nbformat.read("executed.ipynb", 4), extra_ids=[...])
    assert leaks == []

Searched, in document order: every output of every code cell (stream text, text/plain, text/html,
text/markdown, tracebacks), then the saved widget state (the FINAL state of every widget: its
public traits, i.e. the strings a browser renders; private ``_*`` traits such as a JavaScript
bundle are skipped). Markdown cells are searched for answer sentences.

Items checked: those whose id tag appears (``[drill:...]``, ...) plus the ``extra_ids`` the
caller names (every bank item and the notebook's drill deck, so a printed answer is found even
without its id). A LEAK is one of an item's ``secrets()`` found
  * in an output BEFORE the item's first ``submitted [<id>]`` marker;
  * in the widget state of an item that was never submitted (the state is the final one, so in a
    notebook where nothing is submitted - full mode - it is also the state at display time);
  * in a markdown cell (sentences only).
A secret is:
  * a sentence of the answer of 7 words or more, compared as lowercase words;
  * a numeric answer printed at any precision with >= 4 significant digits (41.96, 41.9656,
    8.812, 21.88), or with 3 followed by its unit (42.0x, 16.4%, 21.9 GB), when the answer
    itself has >= 3 significant digits. Round answers (48, 80, 1.0) and bare 3-digit numbers
    look like the numbers every lab prints (a planner table's 1.33 is not a drill's 4/3), so for
    those the answer's sentences are what is searched.
Two exceptions keep it honest rather than noisy: a secret that another item shares (a generic
sentence such as "16 B/param ...") is not a leak where that other item was submitted earlier;
and "you said <value>;", the learner's own input echoed back, is not searched for numbers.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from typing import Any, Iterable

from lab_utils.practice.items import ID_PATTERN, submitted_mark

MIN_WORDS = 7
NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)")
TAG = re.compile(r"\[(" + ID_PATTERN + r")\]")
ECHO = re.compile(r"you said [^;\n]*;", re.I)
WIDGET_STATE = "widget state"


@dataclass(frozen=True)
class Leak:
    item_id: str
    where: str  # "cell 12 output 0", "widget state", "markdown cell 3"
    what: str  # the secret found
    context: str  # text around it

    def __str__(self) -> str:
        return f"{self.item_id}: {self.what!r} in {self.where}: ...{self.context}..."


def _join(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _text_of(output: dict) -> str:
    if output.get("output_type") == "stream":
        return _join(output.get("text", ""))
    if output.get("output_type") == "error":
        return "\n".join(output.get("traceback", [])) + f"\n{output.get('evalue', '')}"
    data = output.get("data", {})
    return "\n".join(
        _join(data[k])
        for k in ("text/plain", "text/html", "text/markdown", "text/latex")
        if k in data
    )


def _public_strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _public_strings(v)]
    if isinstance(value, dict):
        return [
            s for k, v in value.items() if not str(k).startswith("_") for s in _public_strings(v)
        ]
    return (
        [json.dumps(value)]
        if isinstance(value, (int, float)) and not isinstance(value, bool)
        else []
    )


def chunks(nb: Any) -> list[tuple[str, str]]:
    """(where, text as a reader sees it) for every output in order, then the widget state."""
    out = []
    for ci, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        for oi, o in enumerate(cell.get("outputs", [])):
            out.append((f"cell {ci} output {oi}", plain(_text_of(o))))
    state = (
        nb.get("metadata", {})
        .get("widgets", {})
        .get("application/vnd.jupyter.widget-state+json", {})
        .get("state", {})
    )
    if state:
        strings = [s for model in state.values() for s in _public_strings(model.get("state", {}))]
        out.append((WIDGET_STATE, plain("\n".join(strings))))
    return out


def plain(text: str) -> str:
    """What a reader sees: repr escapes undone, HTML unescaped, tags removed."""
    text = text.replace("\\n", "\n").replace("\\'", "'").replace('\\"', '"')
    return html.unescape(re.sub(r"<[^>]+>", " ", html.unescape(text)))


def words(text: str) -> str:
    return " " + " ".join(re.findall(r"[a-z0-9]+", text.lower())) + " "


def sentences(secret: str) -> list[str]:
    """The secret and its sentences (or clauses) of MIN_WORDS words or more, as word strings."""
    parts = [secret] + re.split(r"(?<=[.;:!?])\s+", secret)
    found = [words(p) for p in parts if len(words(p).split()) >= MIN_WORDS]
    return list(dict.fromkeys(found))


def sig_digits(token: str) -> int:
    t = token.replace(",", "")
    digits = t.replace(".", "").lstrip("0") if "." in t else t.lstrip("0").rstrip("0")
    return len(digits)


def searchable(value: float) -> bool:
    """An answer precise enough to search for: 3 or more significant digits (not 48, 1.0)."""
    return sig_digits(f"{abs(value):.6g}") >= 3 if "e" not in f"{abs(value):.6g}" else True


def number_matches(token: str, value: float) -> bool:
    """Is ``token`` the value printed at the token's precision (rounded or truncated)?"""
    t = token.replace(",", "")
    decimals = len(t.split(".")[1]) if "." in t else 0
    x, scale = float(t), 10**decimals
    candidates = (round(value * scale) / scale, int(value * scale) / scale)
    return any(abs(x - c) <= 1e-9 * max(1.0, abs(x)) for c in candidates)


def find_secrets(text: str, item: Any, numbers: bool = True) -> list[tuple[int, str, str, bool]]:
    """The secrets of ``item`` in ``text`` (already ``plain``): (offset, secret, context,
    is_number). Offsets of sentences are approximate (found in the word string), enough for
    ordering."""
    found = []
    flat, sec = words(text), item.secrets()
    for secret in sec.texts:
        for s in sentences(secret):
            i = flat.find(s)
            if i >= 0:
                found.append(
                    (
                        int(i * len(text) / max(1, len(flat))),
                        s.strip(),
                        flat[max(0, i - 40) : i + len(s) + 40],
                        False,
                    )
                )
                break
    if numbers:
        units = sec.units or ("",) * len(sec.numbers)
        values = [(v, u) for v, u in zip(sec.numbers, units) if searchable(v)]
        scrubbed = ECHO.sub(
            lambda m: " " * len(m.group()),
            TAG.sub(
                lambda m: " " * len(m.group()),
                re.sub(ID_PATTERN, lambda m: " " * len(m.group()), text),
            ),
        )
        for m in NUMBER.finditer(scrubbed):
            token = m.group(1)
            after = scrubbed[m.end() : m.end() + 16].lstrip().lower()
            if any(
                number_matches(token, v)
                and (
                    sig_digits(token) >= 4
                    or sig_digits(token) == 3
                    and u
                    and after.startswith(u.lower())
                )
                for v, u in values
            ):
                found.append(
                    (m.start(), token, scrubbed[max(0, m.start() - 60) : m.end() + 30], True)
                )
    return found


def shown_ids(nb: Any) -> list[str]:
    """Ids of the items whose tag appears in the notebook's outputs (and widget state)."""
    return list(dict.fromkeys(m.group(1) for _, text in chunks(nb) for m in TAG.finditer(text)))


def _marks(parts: list[tuple[str, str]]) -> dict[str, tuple[int, int]]:
    """item id -> (chunk index, offset) of its first submit marker."""
    mark = re.compile(re.escape("submitted [") + "(" + ID_PATTERN + r")\]")
    first: dict[str, tuple[int, int]] = {}
    for k, (_, text) in enumerate(parts):
        for m in mark.finditer(text):
            first.setdefault(m.group(1), (k, m.start()))
    return first


def submitted_ids(nb: Any) -> list[str]:
    return list(_marks(chunks(nb)))


def find_leaks(nb: Any, extra_ids: Iterable[str] = ()) -> list[Leak]:
    """Every secret of every shown (or named) item found where its submit does not explain it."""
    from lab_utils.practice import lookup

    parts = chunks(nb)
    ids = list(
        dict.fromkeys([m.group(1) for _, t in parts for m in TAG.finditer(t)] + list(extra_ids))
    )
    items = {i: lookup(i) for i in ids}
    marks = _marks(parts)
    last = len(parts)

    def explained(item_id: str, secret: str, is_number: bool, k: int, pos: int) -> bool:
        for other, it in items.items():
            at = marks.get(other)
            if other == item_id or at is None or (parts[k][0] != WIDGET_STATE and at >= (k, pos)):
                continue
            if is_number:
                if any(number_matches(secret, v) for v in it.secrets().numbers):
                    return True
            elif any(f" {secret} " in words(t) for t in it.secrets().texts):
                return True
        return False

    leaks = []
    for item_id, item in items.items():
        for ci, cell in enumerate(nb["cells"]):
            if cell["cell_type"] == "markdown":
                leaks += [
                    Leak(item_id, f"markdown cell {ci}", s, c)
                    for _, s, c, _ in find_secrets(
                        plain(_join(cell["source"])), item, numbers=False
                    )
                ]
        stop = marks.get(item_id, (last, 0))
        for k, (where, text) in enumerate(parts):
            if where == WIDGET_STATE and item_id in marks:
                continue  # submitted: its final state may show the answer
            if (k, 0) > stop:
                break
            region = text[: stop[1]] if k == stop[0] else text
            leaks += [
                Leak(item_id, where, s, c)
                for pos, s, c, num in find_secrets(region, item)
                if not explained(item_id, s, num, k, pos)
            ]
    return leaks


def answers_after_submit(nb: Any) -> int:
    """How many (item, secret) pairs appear AFTER their submit marker: proof the search sees
    answers when they are there (a test that finds no leaks should also find these)."""
    from lab_utils.practice import lookup

    parts, count = chunks(nb), 0
    text = "\n".join(t for _, t in parts)
    for item_id in _marks(parts):
        cut = text.find(submitted_mark(item_id))
        count += len(find_secrets(text[cut:], lookup(item_id))) if cut >= 0 else 0
    return count
