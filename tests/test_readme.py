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


def test_time_estimates_agree_between_readme_and_notebooks():
    """One estimate per lab: the README's 'X / Y min' is the notebook's opening line (T3)."""
    import json

    for row in course_map_rows():
        lab = row[0].strip("| ").split()[0]
        read, full = re.fullmatch(r"(\d+) / (\d+) min", row[3].strip()).groups()
        nb = json.loads(next((ROOT / "labs").glob(f"{lab}_*.ipynb")).read_text())
        opening = "".join(nb["cells"][0]["source"])
        expected = f"*Time: about {read} minutes to read and run ({full} with the exercises)."
        assert expected in opening, f"lab {lab}: README says {read} / {full} min, the notebook not"
