"""The flashcard deck: YAML files under ``deck/``, validated on load (every lab).

One file per lab (``deck/05_zero_fsdp.yaml``) holds ``cards:``, a list of mappings:

    - id: zero1-memory               # stable, unique across the deck (progress is keyed by it)
      lab: "05"                      # "00".."12" (quote it: YAML reads 05 as a number)
      topics: [zero, memory]         # tags for filtering; misconception cards carry a myth-* tag
      front: What does ZeRO-1 keep per rank?
      back: 4N + 12N/K bytes ... {value} for 7.5B on 64 ranks.
      source: Rajbhandari et al. 2020, Sec. 5
      calc: {fn: model_state_memory, args: {...}, field: total, unit: GB, digits: 1}

Numbers in ``{placeholders}`` are computed by ``resolver`` (whitelisted calculators). A deck
with a problem (unknown field, duplicate id, missing lab, unresolvable calc) raises
``DeckError`` listing every problem with its file and card id.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import yaml

import lab_utils.cards.resolver as resolver

DECK_DIR = Path(__file__).with_name("deck")

LAB_TITLES: dict[str, str] = {
    "00": "Setup and first launch",
    "01": "What training holds in memory",
    "02": "Single-device baselines",
    "03": "Collectives",
    "04": "Data parallelism",
    "05": "ZeRO and FSDP",
    "06": "Tensor parallelism",
    "07": "Pipeline parallelism",
    "08": "3D / 4D parallelism",
    "09": "Mixture of Experts and expert parallelism",
    "10": "Scaling and bottlenecks",
    "11": "Production",
    "12": "System design and interview practice",
    "13": "Performance engineering",
    "14": "Is it correct? Silent bugs, the bisector, the layout matrix",
}

# The syllabus list of facts that interview-prep material often gets wrong: tag -> the correct
# version. Each tag must appear on at least one card (checked by ``check_deck`` and the tests).
MISCONCEPTIONS: dict[str, str] = {
    "myth-ring-latency": "ring all-reduce latency is linear in N; its bandwidth term is not",
    "myth-zero-comm": "ZeRO-1/2 move the same 2x gradient bytes per rank as DDP",
    "myth-zero1-memory": "ZeRO-1 keeps 4N + 12N/K per rank (ZeRO-2: 2N + 14N/K)",
    "myth-1f1b-bubble": "1F1B has GPipe's bubble; it saves activation memory",
    "myth-bubble-ratio": "(p-1)/m is of ideal time; (p-1)/(m+p-1) is of total time",
    "myth-pp-activations": "PP does not divide the first stage's activations by p",
    "myth-tp-sp": "TP without SP leaves LayerNorm/dropout activations replicated",
    "myth-dataparallel": "DataParallel is data parallelism, not model parallelism",
    "myth-mixed-precision": "mixed-precision Adam still keeps 16 bytes/param of model state",
}

CARD_FIELDS = {"id", "lab", "topics", "front", "back", "source", "calc"}
REQUIRED = ("id", "lab", "topics", "front", "back")
FILE_FIELDS = {"title", "cards"}
ID_RE = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")
TAG_RE = re.compile(r"[a-z0-9][a-z0-9-]*")
MIN_CARDS_PER_LAB = 5
# JupyterLab typesets the text between two unescaped "$" of an HTML output as LaTeX (a price
# vanishes into math italics): card text writes money as USD, or escapes the sign as \$.
MATH_PAIR = re.compile(r"(?<!\\)\$[^$]*(?<!\\)\$")


class DeckError(ValueError):
    """The deck has problems; ``problems`` lists each one as 'file, card id: what is wrong'."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__(
            f"{len(problems)} problem(s) in the flashcard deck:\n  " + "\n  ".join(problems)
        )


@dataclass(frozen=True)
class Card:
    """One card, numbers already filled in. ``values`` holds the raw calc numbers by name."""

    id: str
    lab: str
    topics: tuple[str, ...]
    front: str
    back: str
    source: str = ""
    values: dict[str, float] = field(default_factory=dict, hash=False, compare=False)
    file: str = ""


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (YAML would silently keep the last one)."""

    def construct_mapping(self, node, deep=False):  # type: ignore[override]
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def normalise_lab(lab: object) -> str:
    """'04', '4' or 4 -> '04'; anything else -> ValueError naming the valid labs."""
    text = f"{lab:02d}" if isinstance(lab, int) and not isinstance(lab, bool) else str(lab)
    if text.isdigit() and len(text) == 1:
        text = "0" + text
    if text not in LAB_TITLES:
        raise ValueError(f"lab must be one of {', '.join(LAB_TITLES)}; got {lab!r}")
    return text


def _card(raw: object, where: str, problems: list[str]) -> Card | None:
    if not isinstance(raw, dict):
        problems.append(f"{where}: a card must be a mapping with {', '.join(REQUIRED)}")
        return None
    cid = raw.get("id")
    where = f"{where} card {cid!r}" if isinstance(cid, str) else where
    start = len(problems)
    unknown = set(raw) - CARD_FIELDS
    if unknown:
        problems.append(
            f"{where}: unknown field(s) {sorted(map(str, unknown))}; allowed: {sorted(CARD_FIELDS)}"
        )
    for name in REQUIRED:
        if raw.get(name) in (None, "", []):
            problems.append(f"{where}: missing '{name}'")
    if isinstance(cid, str) and not ID_RE.fullmatch(cid):
        problems.append(f"{where}: id must be lowercase letters, digits and dashes")
    lab = raw.get("lab")
    if lab is not None:
        try:
            lab = normalise_lab(lab)
        except ValueError as exc:
            problems.append(f"{where}: {exc}")
    topics = raw.get("topics") or []
    if not isinstance(topics, list) or not all(
        isinstance(t, str) and TAG_RE.fullmatch(t) for t in topics
    ):
        problems.append(f"{where}: topics must be a list of lowercase tags like [zero, memory]")
    for name in ("front", "back", "source"):
        if name in raw and not isinstance(raw[name], str):
            problems.append(
                f"{where}: '{name}' must be text (quote text that starts "
                "with '{{' or '[', or use a '>-' block)"
            )
    if len(problems) > start:
        return None
    front, back = raw["front"].strip(), raw["back"].strip()
    used = resolver.placeholders(front) | resolver.placeholders(back)
    rendered: dict[str, str] = {}
    values: dict[str, float] = {}
    try:
        specs = resolver.normalise_specs(raw["calc"]) if "calc" in raw else {}
        for name, spec in specs.items():
            values[name], rendered[name] = resolver.render_value(spec, f"calc {name!r}")
        front, back = resolver.fill(front, rendered, "front"), resolver.fill(back, rendered, "back")
        if set(specs) - used:
            raise ValueError(
                f"calc value(s) {sorted(set(specs) - used)} never shown: put "
                "{name} in the front or back"
            )
    except ValueError as exc:
        problems.append(f"{where}: {exc}")
        return None
    for name, text in (("front", front), ("back", back)):
        if m := MATH_PAIR.search(text):
            problems.append(
                f"{where}: '{name}' has {m.group(0)!r} between two '$' signs, which "
                "a notebook typesets as LaTeX: write USD, or escape the sign as \\$"
            )
            return None
    return Card(
        id=cid,
        lab=lab,
        topics=tuple(topics),
        front=front,
        back=back,
        source=str(raw.get("source", "")).strip(),
        values=values,
        file=where.split()[0],
    )


def parse_file(path: Path, problems: list[str]) -> list[Card]:
    """Cards of one YAML file; problems are appended, never raised here."""
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_StrictLoader)
    except (OSError, yaml.YAMLError) as exc:
        problems.append(f"{path.name}: cannot read YAML: {exc}")
        return []
    if not isinstance(data, dict) or not isinstance(data.get("cards"), list):
        problems.append(f"{path.name}: the file must be a mapping with a 'cards:' list")
        return []
    if set(data) - FILE_FIELDS:
        problems.append(f"{path.name}: unknown top-level key(s) {sorted(set(data) - FILE_FIELDS)}")
    cards = [_card(raw, f"{path.name} #{i + 1}", problems) for i, raw in enumerate(data["cards"])]
    return [c for c in cards if c is not None]


@functools.lru_cache(maxsize=8)
def _load_all(deck_dir: str) -> tuple[Card, ...]:
    files = sorted(Path(deck_dir).glob("*.yaml"))
    problems: list[str] = [] if files else [f"no *.yaml files in {deck_dir}"]
    cards: list[Card] = []
    for path in files:
        cards += parse_file(path, problems)
    first_file: dict[str, str] = {}
    for c in cards:
        if c.id in first_file:
            problems.append(f"{c.file} card {c.id!r}: duplicate id (also in {first_file[c.id]})")
        first_file.setdefault(c.id, c.file)
    if problems:
        raise DeckError(problems)
    return tuple(cards)


def _as_list(value: str | Iterable[str] | int | None) -> list | None:
    if value is None:
        return None
    return [value] if isinstance(value, (str, int)) else list(value)


def load_deck(
    labs: str | int | Iterable[str] | None = None,
    topics: str | Iterable[str] | None = None,
    deck_dir: str | Path | None = None,
) -> list[Card]:
    """Cards of the given labs ("04", 4 or a list) having ANY of the given topic tags.

    The whole deck is validated (and its numbers computed) on the first call; a problem raises
    ``DeckError``. An unknown lab or a topic no card carries raises ``ValueError``.
    """
    cards = list(_load_all(str(Path(deck_dir or DECK_DIR).resolve())))
    lab_list = _as_list(labs)
    if lab_list is not None:
        wanted = {normalise_lab(x) for x in lab_list}
        cards = [c for c in cards if c.lab in wanted]
    topic_list = _as_list(topics)
    if topic_list is not None:
        known = {t for c in _load_all(str(Path(deck_dir or DECK_DIR).resolve())) for t in c.topics}
        missing = [t for t in topic_list if t not in known]
        if missing:
            raise ValueError(
                f"no card has topic(s) {missing}; topics are: {', '.join(sorted(known))}"
            )
        cards = [c for c in cards if set(topic_list) & set(c.topics)]
    return cards


def check_deck(deck_dir: str | Path | None = None) -> list[str]:
    """Every problem of the deck, including coverage: each lab has >= 5 cards and each
    misconception tag has a card. Empty list = the deck is good (``--self-test``)."""
    _load_all.cache_clear()  # re-read the files: a self-test must see the current YAML
    try:
        cards = load_deck(deck_dir=deck_dir)
    except DeckError as exc:
        return exc.problems
    problems = [
        f"lab {lab} has {n} card(s); every lab needs at least {MIN_CARDS_PER_LAB}"
        for lab, n in counts_by_lab(cards).items()
        if n < MIN_CARDS_PER_LAB
    ]
    tags = {t for c in cards for t in c.topics}
    problems += [
        f"no card carries the misconception tag {tag!r} ({text})"
        for tag, text in MISCONCEPTIONS.items()
        if tag not in tags
    ]
    return problems


def counts_by_lab(cards: Iterable[Card]) -> dict[str, int]:
    counts = dict.fromkeys(LAB_TITLES, 0)
    for c in cards:
        counts[c.lab] += 1
    return counts
