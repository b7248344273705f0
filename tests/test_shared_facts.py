"""Every statement of a shared fact (lab_utils.calc.facts) agrees with the calculators, in every
notebook cell, card and practice item: one source, checked everywhere (issue 36, item 3)."""

import json
import re
from pathlib import Path

from lab_utils.calc.facts import SHARED_FACTS

ROOT = Path(__file__).resolve().parents[1]


def texts() -> dict[str, str]:
    """Where a fact can be stated: notebook cells (markdown and code), the card deck, the
    practice bank (yaml) and the practice modules (critiques, drills: strings in code)."""
    out = {}
    for nb in sorted((ROOT / "labs").glob("*.ipynb")):
        for i, cell in enumerate(json.loads(nb.read_text())["cells"]):
            out[f"{nb.name}[{i}]"] = "".join(cell["source"])
    for pattern in (
        "lab_utils/cards/deck/*.yaml",
        "lab_utils/practice/**/*.yaml",
        "lab_utils/practice/**/*.py",
    ):
        out.update({str(p.relative_to(ROOT)): p.read_text() for p in ROOT.glob(pattern)})
    return out


def paragraphs(text: str) -> list[str]:
    return [p for p in re.split(r"\n\s*\n|\n\s*- id:", text) if p.strip()]


def violations(sources: dict[str, str] | None = None) -> list[str]:
    found = []
    for name, fact in SHARED_FACTS.items():
        for where, text in (sources if sources is not None else texts()).items():
            if "pattern" in fact:
                for m in re.finditer(fact["pattern"], text):
                    around = text[max(0, m.start() - 400) : m.end() + 400]
                    if fact.get("context") and fact["context"] not in around:
                        continue
                    value = float(m.group(1).replace(",", ""))
                    if not any(abs(value - v) <= fact.get("tolerance", 0) for v in fact["values"]):
                        found.append(
                            f"{where}: {name} stated as {m.group(1)}, calc says "
                            f"{[round(v, 1) for v in fact['values']]}"
                        )
            elif "label" in fact:
                for para in paragraphs(text):
                    for m in re.finditer(fact["label"], para):
                        if not any(word in para.lower() for word in fact["near"]):
                            found.append(
                                f"{where}: {m.group(0)} without saying of what "
                                f"({' or '.join(fact['near'])}): {para.strip()[:80]!r}"
                            )
            else:
                for para in paragraphs(text):
                    if (
                        re.search(fact["claim"], para)
                        and re.search(fact["says"], para)
                        and not any(word in para.lower() for word in fact["near"])
                    ):
                        found.append(f"{where}: {name}: {para.strip()[:120]!r}")
    return found


def test_every_statement_of_a_shared_fact_agrees_with_calc():
    assert violations() == []


def test_the_check_can_fail():
    """A wrong mantissa count and a caveat-free ZeRO-2 claim are caught."""
    found = violations({"x": "bf16 keeps 8 mantissa bits.\n\nZeRO-2 sends the same bytes as DDP."})
    assert len(found) == 2 and "calc says [7]" in found[0] and "ZeRO-2" in found[1]
