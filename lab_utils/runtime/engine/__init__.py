"""The runtime's engine: pools, processes, the zygote, the ranks' side, failure forensics.
Only ``lab_utils/runtime/`` imports it; the index is in ``lab_utils/runtime/__init__.py``."""
