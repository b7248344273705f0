"""Tooling around the course: the pre-flight check, notebook housekeeping, the static site."""
