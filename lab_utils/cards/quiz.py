"""Terminal quiz: ``python -m lab_utils cards [--lab 04] [--topic zero] [--n 10] [--progress
PATH]``.

Shows a card's front; on a terminal, Enter shows the back; then ``y`` (I knew it) or ``n``
(I didn't) moves the card between Leitner boxes and saves the progress. ``q`` stops.

When stdin is not a terminal (a pipe, CI) the back is shown right after the front and one
y/n line is read per card, so ``printf 'y\\nn\\n' | python -m lab_utils cards --n 2`` works;
the quiz stops quietly at the end of input. ``--list`` prints the selected cards with their
answers, ``--self-test`` validates the whole deck (exit 0 if good, 1 if not).

Exit status: 0 done, 1 the deck is broken, 2 a bad command line (unknown lab or topic).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import warnings
from typing import Sequence, TextIO

from lab_utils.cards.deck import (
    LAB_TITLES,
    MISCONCEPTIONS,
    Card,
    DeckError,
    check_deck,
    counts_by_lab,
    load_deck,
)
from lab_utils.cards.leitner import ENV_VAR, ProgressStore
from lab_utils.cards.session import ReviewSession

WIDTH = 88


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m lab_utils cards",
        description="Flashcard review with Leitner boxes (spaced repetition).",
        epilog=f"Progress file: --progress, else ${ENV_VAR}, else "
        "~/.distributed_labs/cards_progress.json.",
    )
    p.add_argument(
        "--lab",
        action="append",
        metavar="NN",
        help="only this lab (00-11); repeat or comma-separate for several",
    )
    p.add_argument(
        "--topic",
        action="append",
        metavar="TAG",
        help="only cards with this topic tag (e.g. zero, pipeline, misconception)",
    )
    p.add_argument("--n", type=int, help="at most this many cards (quiz default 10; --list: all)")
    p.add_argument(
        "--all",
        action="store_true",
        help="review every selected card, not only those due (practice)",
    )
    p.add_argument("--shuffle", type=int, metavar="SEED", help="shuffle with this seed")
    p.add_argument("--progress", metavar="PATH", help="progress JSON file")
    p.add_argument("--list", action="store_true", help="print the selected cards and exit")
    p.add_argument(
        "--self-test",
        action="store_true",
        help="validate the deck (fields, ids, numbers, coverage); exit 0 or 1",
    )
    p.add_argument("--deck", metavar="DIR", help=argparse.SUPPRESS)  # another deck (tests)
    return p


def _split(values: list[str] | None) -> list[str] | None:
    if values is None:
        return None
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def _wrap(text: str, prefix: str) -> str:
    pad = " " * len(prefix)
    lines = []
    for i, para in enumerate(text.splitlines() or [""]):
        first = prefix if i == 0 else pad
        lines.append(
            textwrap.fill(para, WIDTH, initial_indent=first, subsequent_indent=pad) if para else ""
        )
    return "\n".join(lines)


def format_card(card: Card, with_back: bool = True) -> str:
    lines = [f"[{card.lab}] {card.id}  ({', '.join(card.topics)})", _wrap(card.front, "  Q: ")]
    if with_back:
        lines.append(_wrap(card.back, "  A: "))
        if card.source:
            lines.append(_wrap(card.source, "     source: "))
    return "\n".join(lines)


def self_test(deck_dir: str | None, out: TextIO) -> int:
    problems = check_deck(deck_dir)
    if problems:
        print(f"deck self-test FAILED: {len(problems)} problem(s)", file=out)
        for problem in problems:
            print(f"  - {problem}", file=out)
        return 1
    cards = load_deck(deck_dir=deck_dir)
    per_lab = ", ".join(f"{lab}: {n}" for lab, n in counts_by_lab(cards).items())
    print(
        f"deck self-test OK: {len(cards)} cards, every number computed by lab_utils.calc, "
        f"{len(MISCONCEPTIONS)} misconceptions covered\n  per lab: {per_lab}",
        file=out,
    )
    return 0


def _ask(prompt: str, stdin: TextIO, out: TextIO, echo: bool) -> str | None:
    """One line of input (lowercased, stripped), or None at end of input. ``echo`` repeats
    piped input after the prompt, so a non-interactive transcript reads like a session."""
    print(prompt, end="", file=out, flush=True)
    line = stdin.readline()
    if echo or not line:
        print(line.strip(), file=out)
    return line.strip().lower() if line else None


def quiz(session: ReviewSession, stdin: TextIO, out: TextIO, interactive: bool) -> None:
    """Ask every card of the session; stop at 'q' or at the end of input."""
    while (card := session.current) is not None:
        print(
            f"\nCard {session.position + 1} of {len(session.queue)}  "
            f"(box {session.store.progress.box_of(card.id) or 'new'})",
            file=out,
        )
        print(format_card(card, with_back=False), file=out)
        if interactive and _ask("  [Enter] show the answer, q to quit: ", stdin, out, False) in (
            "q",
            None,
        ):
            return
        session.reveal()
        print(_wrap(card.back, "  A: "), file=out)
        while True:
            reply = _ask("  Did you know it? [y/n, q to quit]: ", stdin, out, not interactive)
            if reply in (None, "q", "quit"):
                return
            if reply in ("y", "yes", "n", "no"):
                session.answer(reply.startswith("y"))
                break
            print("  please answer y or n (or q to quit)", file=out)


def cli_main(
    argv: Sequence[str] | None = None, stdin: TextIO | None = None, stdout: TextIO | None = None
) -> int:
    """Entry point of ``python -m lab_utils cards``; returns the exit status."""
    stdin, out = stdin or sys.stdin, stdout or sys.stdout
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a malformed command line (2)
        return int(exc.code or 0)
    if args.self_test:
        return self_test(args.deck, out)
    try:
        cards = load_deck(labs=_split(args.lab), topics=_split(args.topic), deck_dir=args.deck)
        with warnings.catch_warnings():  # a corrupted progress file: reported below instead
            warnings.simplefilter("ignore")
            store = ProgressStore(args.progress)
        session = ReviewSession(
            cards,
            store,
            due_only=not args.all,
            limit=10 if args.n is None else args.n,
            seed=args.shuffle,
        )
    except DeckError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.list:
        for card in cards if args.n is None else cards[: args.n]:
            print(format_card(card) + "\n", file=out)
        return 0
    if store.progress.notice:
        print(f"note: {store.progress.notice}", file=sys.stderr)
    if not session.queue:
        wait = session.next_due_in()
        print(
            "No card matches."
            if wait is None
            else f"No card is due (next in {wait} session(s)); use --all to practise anyway.",
            file=out,
        )
        return 0
    labs = sorted({c.lab for c in session.queue})
    print(
        f"{len(session.queue)} card(s) from lab(s) "
        f"{', '.join(f'{x} {LAB_TITLES[x]}' for x in labs)}",
        file=out,
    )
    try:
        quiz(session, stdin, out, interactive=stdin.isatty())
    except KeyboardInterrupt:
        print(f"\ninterrupted. {session.summary()}", file=out)
        return 130
    print(
        f"\n{session.summary()}"
        + (f" Progress saved in {store.path}." if session.answered else ""),
        file=out,
    )
    return 0
