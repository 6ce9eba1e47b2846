"""Number formatting, defined once for every renderer: the report's (an en dash where a number is
unknown; links and units are the caller's) and the console's (a hyphen where unknown)."""

from __future__ import annotations

MIB = 2**20


def gbps(x: float | None) -> str:
    return "–" if x is None else f"{x:.3g}"


def mib(nbytes: float | None) -> str:
    if nbytes is None:
        return "–"
    x = nbytes / MIB
    return f"{x:,.0f}" if x == int(x) else f"{x:,.2f}"


def ms(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"


def pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}"


def times(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}×"


def us(x: float | None) -> str:
    return "–" if x is None else f"{x:,.0f}"


def significant(x: float | None) -> str:
    """4 significant digits (a difference of two runs)."""
    return "–" if x is None else f"{x:,.4g}"


def fixed(x: float | None, spec: str = ".2f", unit: str = "", *, missing: str = "-") -> str:
    """`x` in `spec`, with `unit`; `missing` ("-" on the console, "–" in a report) when unknown."""
    return missing if x is None else f"{x:{spec}}{unit}"


def grouped(x: float | None, digits: int = 1) -> str:
    """Console: thousands grouped, `digits` decimals; "-" when unknown."""
    return "-" if x is None else f"{x:,.{digits}f}"


def us_as_ms(x_us: float | None) -> str:
    """Console: µs of the analysis record in ms, one decimal; "-" when unknown."""
    return "-" if x_us is None else f"{x_us / 1e3:.1f}"


def nbytes(n: int | None) -> str:
    """Console: a byte count in GiB, MiB or KiB (two decimals), or B; "-" when unknown."""
    if n is None:
        return "-"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{n} B"
