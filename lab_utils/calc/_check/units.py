"""Unit plausibility (issue 37 item 3): a rate or a size that no real device has is almost surely
typed in the wrong unit, and the message says which unit it looks like."""

from __future__ import annotations

from lab_utils.calc._check.values import pos_num


def flop_rate(name: str, value: object, unit: str = "FLOP/s") -> float:
    """A compute rate per GPU, in ``unit`` ("FLOP/s" or "TFLOP/s"), that a real accelerator
    could run at: 1 GFLOP/s to 100 PFLOP/s. Outside that range the unit is almost surely
    wrong (140 given as FLOP/s means 140 TFLOP/s), and the message says so."""
    v = pos_num(name, value)
    flops = v * (1e12 if unit == "TFLOP/s" else 1.0)
    if flops < 1e9:
        fix = (
            f"it looks like TFLOP/s: {name} is in FLOP/s, so write {v:g}e12 for {v:g} TFLOP/s"
            if unit == "FLOP/s"
            else "check the unit"
        )
        raise ValueError(
            f"{name}={v:g} {unit} is below 1 GFLOP/s, slower than any accelerator; {fix}"
        )
    if flops > 1e17:
        fix = (
            f"it looks like FLOP/s: {name} is in TFLOP/s, so write {v / 1e12:g} for {v:g} FLOP/s"
            if unit == "TFLOP/s"
            else "check for a typo"
        )
        raise ValueError(
            f"{name}={v:g} {unit} is above 100 PFLOP/s per GPU, faster than any accelerator; {fix}"
        )
    return v


def _not_giga(name: str, value: object, floor: float, unit: str, below: str) -> float:
    """A positive size or rate in ``unit``; under ``floor`` it was typed in giga-units."""
    v = pos_num(name, value)
    if v < floor:
        giga = unit.replace("bytes", "GB")
        raise ValueError(
            f"{name}={v:g} {unit} is below {below}; it looks like {giga}: {name} "
            f"is in {unit}, so write {v:g}e9 for {v:g} {giga}"
        )
    return v


def byte_count(name: str, value: object) -> float:
    """A device's memory in bytes; below 1 MB it is a size typed in GB."""
    return _not_giga(name, value, 1e6, "bytes", "1 MB, smaller than any accelerator's memory")


def byte_rate(name: str, value: object) -> float:
    """A link or memory bandwidth in bytes/s; below 1 KB/s it is a rate typed in GB/s."""
    return _not_giga(name, value, 1e3, "bytes/s", "1 KB/s, slower than any link")
