"""The statistics of the reports: mean and 95% confidence interval over seeds,
and Welch's t-test between two configurations (scipy.stats).

The interval is Student's t: ``mean ± t(0.975, n-1) · s / sqrt(n)`` with ``s``
the sample standard deviation (n-1). With one sample there is no interval,
and a difference is never called significant without two samples on each side.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

LEVEL = 0.95  # the confidence level of every interval and test in psbench


@dataclass(frozen=True)
class Estimate:
    mean: float | None
    half_width: float | None  # None when n < 2
    n: int

    @property
    def low(self) -> float | None:
        return None if self.half_width is None else self.mean - self.half_width

    @property
    def high(self) -> float | None:
        return None if self.half_width is None else self.mean + self.half_width


def clean(values: Iterable) -> list[float]:
    """The numbers among ``values`` (None, NaN and non-numbers dropped)."""
    out = []
    for v in values:
        if isinstance(v, bool) or v is None:
            continue
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(f):
            out.append(f)
    return out


def t_quantile(n: int, level: float = LEVEL) -> float:
    from scipy import stats  # about 1 s to import: only when an interval is computed

    return float(stats.t.ppf(0.5 + level / 2, n - 1))


def mean_ci(values: Iterable, level: float = LEVEL) -> Estimate:
    """Mean and the half-width of its two-sided ``level`` confidence interval."""
    xs = clean(values)
    n = len(xs)
    if n == 0:
        return Estimate(None, None, 0)
    mean = sum(xs) / n
    if n < 2:
        return Estimate(mean, None, 1)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    return Estimate(mean, t_quantile(n, level) * sd / math.sqrt(n), n)


@dataclass(frozen=True)
class Test:
    p: float | None       # Welch's two-sided p-value; None when it cannot be computed
    significant: bool | None  # None: not testable
    why: str              # "p = 0.012", "p < 0.001", "n=1", "no variance"

    def text(self) -> str:
        if self.significant is None:
            return f"n/a ({self.why})"
        return f"{'yes' if self.significant else 'no'} ({self.why})"


def welch(a: Iterable, b: Iterable, level: float = LEVEL) -> Test:
    """Welch's t-test (unequal variances) of mean(a) == mean(b)."""
    xs, ys = clean(a), clean(b)
    if len(xs) < 2 or len(ys) < 2:
        return Test(None, None, f"n={min(len(xs), len(ys))}")
    if _constant(xs) and _constant(ys):
        if xs[0] == ys[0]:
            return Test(1.0, False, "identical values")
        return Test(None, None, "no variance")
    from scipy import stats  # about 1 s to import: only when a test is computed

    p = float(stats.ttest_ind(xs, ys, equal_var=False).pvalue)
    if not math.isfinite(p):
        return Test(None, None, "no variance")
    return Test(p, p < 1 - level, format_p(p))


def format_p(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def _constant(xs: list[float]) -> bool:
    return all(x == xs[0] for x in xs)


def diff_ci(a: Iterable, b: Iterable, level: float = LEVEL) -> Estimate:
    """mean(a) - mean(b) with its Welch (unequal variances, Welch-Satterthwaite df) confidence
    interval; no interval without two samples on each side."""
    xs, ys = clean(a), clean(b)
    if not xs or not ys:
        return Estimate(None, None, 0)
    diff = sum(xs) / len(xs) - sum(ys) / len(ys)
    if len(xs) < 2 or len(ys) < 2:
        return Estimate(diff, None, min(len(xs), len(ys)))
    va = sum((x - sum(xs) / len(xs)) ** 2 for x in xs) / (len(xs) - 1) / len(xs)
    vb = sum((y - sum(ys) / len(ys)) ** 2 for y in ys) / (len(ys) - 1) / len(ys)
    if va + vb == 0:
        return Estimate(diff, 0.0, min(len(xs), len(ys)))
    df = (va + vb) ** 2 / (va ** 2 / (len(xs) - 1) + vb ** 2 / (len(ys) - 1))
    from scipy import stats  # about 1 s to import: only when an interval is computed

    return Estimate(diff, float(stats.t.ppf(0.5 + level / 2, df)) * math.sqrt(va + vb), min(len(xs), len(ys)))
