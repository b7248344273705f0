"""Tooling around the course: the pre-flight check (doctor), notebook housekeeping (nbtools,
nbaudit, giveaways, answer_leaks), the static site, and the size budgets' measure (size)."""
