"""The README's course map stays true: every lab listed exists, card counts equal the deck."""
import re
from pathlib import Path

from lab_utils.cards import load_deck

ROOT = Path(__file__).resolve().parents[1]


def course_map_rows():
    text = (ROOT / "README.md").read_text()
    section = text.split("## Course map", 1)[1].split("\n## ", 1)[0]
    return [line.split(" | ") for line in section.splitlines() if re.match(r"\| \d\d ", line)]


def test_course_map_lists_every_lab_with_its_card_count():
    rows = course_map_rows()
    labs = sorted(p.name[:2] for p in (ROOT / "labs").glob("[0-9][0-9]_*.ipynb"))
    assert [row[0].strip("| ").split()[0] for row in rows] == labs
    for row in rows:
        lab = row[0].strip("| ").split()[0]
        assert int(row[2]) == len(load_deck(labs=lab)), f"README card count for lab {lab} is stale"
