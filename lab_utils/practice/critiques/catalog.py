"""Every critique item, and one by id."""

from __future__ import annotations

from lab_utils.practice.critiques.model import Critique


def all_critiques() -> tuple[Critique, ...]:
    """Every critique item (``bank_sizing``, ``bank_parallel``, ``bank_baselines`` and
    ``bank_correctness``), in order.
    The banks are imported on first use (they compute their numbers with ``lab_utils.calc``)."""
    from lab_utils.practice.critiques.bank_baselines import ITEMS as baselines
    from lab_utils.practice.critiques.bank_correctness import ITEMS as correctness
    from lab_utils.practice.critiques.bank_parallel import ITEMS as parallel
    from lab_utils.practice.critiques.bank_sizing import ITEMS as sizing

    return sizing() + parallel() + baselines() + correctness()


def critique(item_id: str) -> Critique:
    """One critique by id: 'amdahl-256' or 'critique:amdahl-256'."""
    want = item_id if item_id.startswith("critique:") else f"critique:{item_id}"
    for c in all_critiques():
        if c.id == want:
            return c
    raise ValueError(
        f"no critique {item_id!r}; ids: "
        + ", ".join(c.id.split(":", 1)[1] for c in all_critiques())
    )
