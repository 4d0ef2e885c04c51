"""Statistics for comparing policies, with the standard library only.

Student's t distribution (the regularized incomplete beta function, by a continued fraction), the
paired t-test and Welch's t-test with confidence intervals from the same distribution (an interval
excludes 0 exactly when the test is significant), means with t intervals, and the sessions a
comparison needs for 80 % power (the normal approximation). The percentile bootstrap is kept for
the benchmark scripts that report it.
"""

from __future__ import annotations

import math
import random
import statistics
from typing import Callable, Sequence

import attrs


@attrs.frozen
class Estimate:
    """A mean (or a difference of means) with its bootstrap confidence interval."""

    mean: float
    low: float
    high: float
    n: int
    paired: bool = True


def bootstrap_ci(
    values: Sequence[float],
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    statistic: Callable[[Sequence[float]], float] = statistics.fmean,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` over ``values``; seeded, so reproducible."""
    if not values:
        raise ValueError("bootstrap of no values")
    if len(values) == 1:
        return values[0], values[0]
    rng = random.Random(seed)
    n = len(values)
    stats = sorted(statistic([values[rng.randrange(n)] for _ in range(n)]) for _ in range(resamples))
    return _percentile(stats, (1 - confidence) / 2), _percentile(stats, 1 - (1 - confidence) / 2)


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default method)."""
    position = q * (len(sorted_values) - 1)
    lo = math.floor(position)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (position - lo)


def paired_difference(
    treatment: Sequence[float], control: Sequence[float], *, resamples: int = 2000, seed: int = 0
) -> Estimate:
    """Mean of ``treatment[i] - control[i]`` with a bootstrap CI over the pairs."""
    if len(treatment) != len(control):
        raise ValueError("paired samples must have the same length")
    diffs = [t - c for t, c in zip(treatment, control, strict=False)]
    low, high = bootstrap_ci(diffs, resamples=resamples, seed=seed)
    return Estimate(statistics.fmean(diffs), low, high, len(diffs), True)


def unpaired_difference(
    treatment: Sequence[float], control: Sequence[float], *, resamples: int = 2000, seed: int = 0
) -> Estimate:
    """Difference of means of two independent samples, each resampled on its own."""
    if not treatment or not control:
        raise ValueError("bootstrap of an empty sample")
    rng = random.Random(seed)
    nt, nc = len(treatment), len(control)
    stats = sorted(
        statistics.fmean([treatment[rng.randrange(nt)] for _ in range(nt)])
        - statistics.fmean([control[rng.randrange(nc)] for _ in range(nc)])
        for _ in range(resamples)
    )
    return Estimate(
        statistics.fmean(treatment) - statistics.fmean(control),
        _percentile(stats, 0.025),
        _percentile(stats, 0.975),
        min(nt, nc),
        False,
    )


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) (a continued fraction, Lentz's method)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1) / (a + b + 2):  # the fraction converges fast on this side only
        return 1.0 - _betainc(b, a, 1 - x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 500):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * f / a


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return _betainc(df / 2, 0.5, df / (df + t * t))


def t_quantile(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t with ``df`` degrees of freedom (bisection on the CDF)."""
    if not 0 < q < 1:
        raise ValueError(f"quantile must be in (0, 1), got {q}")
    if q < 0.5:
        return -t_quantile(1 - q, df)
    target = 2 * (1 - q)  # the two-sided tail that |T| > t leaves
    low, high = 0.0, 1.0
    while t_two_sided_p(high, df) > target:
        high *= 2
    for _ in range(200):
        mid = (low + high) / 2
        if t_two_sided_p(mid, df) > target:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def _z(q: float) -> float:
    return statistics.NormalDist().inv_cdf(q)


@attrs.frozen
class Summary:
    """One variant's values of one metric over its sessions."""

    n: int
    mean: float | None
    low: float | None
    """Student-t confidence interval of the mean (None with fewer than 2 sessions)."""
    high: float | None
    total: float | None
    """Sum over the sessions (None for a share, where a sum means nothing)."""
    sd: float | None


def summarize(values: Sequence[float], alpha: float = 0.05, *, summable: bool = True) -> Summary:
    """Mean with its t confidence interval at level ``1 - alpha``, total and standard deviation."""
    n = len(values)
    if n == 0:
        return Summary(0, None, None, None, None, None)
    mean = statistics.fmean(values)
    total = math.fsum(values) if summable else None
    if n < 2:
        return Summary(n, mean, None, None, total, None)
    sd = statistics.stdev(values)
    half = t_quantile(1 - alpha / 2, n - 1) * sd / math.sqrt(n)
    return Summary(n, mean, mean - half, mean + half, total, sd)


@attrs.frozen
class Difference:
    """One variant against the control on one metric: the test and its verdict."""

    mean: float
    """Treatment minus control: the mean of the per-session differences (paired), or the
    difference of the two means (unpaired)."""
    low: float | None
    high: float | None
    """Confidence interval of ``mean`` at level ``1 - alpha``, from the test's t distribution."""
    p: float | None
    """Two-sided p-value (None: too few sessions to test)."""
    test: str
    """``paired t-test`` or ``Welch t-test``."""
    paired: bool
    n: int
    """Pairs (paired), or the variant's sessions (unpaired)."""
    n_control: int
    df: float | None
    se: float | None
    """Standard error of ``mean``."""
    alpha: float
    control_mean: float | None = None
    """The control's mean over the sessions compared."""

    @property
    def significant(self) -> bool:
        return self.p is not None and self.p < self.alpha

    @property
    def relative(self) -> float | None:
        """``mean`` as a share of the control's mean (None when that is 0)."""
        return self.mean / self.control_mean if self.control_mean else None

    @property
    def relative_low(self) -> float | None:
        return None if self.low is None or not self.control_mean else self.low / self.control_mean

    @property
    def relative_high(self) -> float | None:
        return None if self.high is None or not self.control_mean else self.high / self.control_mean

    @property
    def verdict(self) -> str:
        if self.p is None:
            return "too few sessions"
        if self.se == 0 and self.mean == 0:
            return "no difference"
        if not self.significant:
            return "not significant"
        return "significant: lower" if self.mean < 0 else "significant: higher"


ROUNDING = 1e-12
"""A spread of values below this share of their magnitude is the rounding of sums of floats (costs
equal but for it), taken as no spread: a t-test on rounding alone finds anything significant."""


def _no_spread(values: Sequence[float], magnitude_of: Sequence[float]) -> bool:
    """Whether ``values`` are all equal but for rounding, at the magnitude of ``magnitude_of``."""
    return max(values) - min(values) <= ROUNDING * max(abs(x) for x in magnitude_of)


def paired_t(treatment: Sequence[float], control: Sequence[float], alpha: float = 0.05) -> Difference:
    """Paired t-test of ``treatment[i] - control[i]``, with its confidence interval."""
    if len(treatment) != len(control):
        raise ValueError("paired samples must have the same length")
    n = len(treatment)
    diffs = [t - c for t, c in zip(treatment, control, strict=False)]
    mean = statistics.fmean(diffs)
    control_mean = statistics.fmean(control)
    if n < 2:
        return Difference(mean, None, None, None, "paired t-test", True, n, n, None, None, alpha, control_mean)
    se = 0.0 if _no_spread(diffs, [*treatment, *control]) else statistics.stdev(diffs) / math.sqrt(n)
    return _t_result(mean, se, n - 1, "paired t-test", True, n, n, alpha, control_mean)


def welch_t(treatment: Sequence[float], control: Sequence[float], alpha: float = 0.05) -> Difference:
    """Welch's t-test of two independent samples (unequal variances), with its interval."""
    nt, nc = len(treatment), len(control)
    if not nt or not nc:
        raise ValueError("a t-test needs values on both sides")
    mean = statistics.fmean(treatment) - statistics.fmean(control)
    control_mean = statistics.fmean(control)
    if nt < 2 or nc < 2:
        return Difference(mean, None, None, None, "Welch t-test", False, nt, nc, None, None, alpha, control_mean)
    vt = 0.0 if _no_spread(treatment, treatment) else statistics.variance(treatment) / nt
    vc = 0.0 if _no_spread(control, control) else statistics.variance(control) / nc
    se = math.sqrt(vt + vc)
    df = (vt + vc) ** 2 / (vt**2 / (nt - 1) + vc**2 / (nc - 1)) if se > 0 else float(nt + nc - 2)
    return _t_result(mean, se, df, "Welch t-test", False, nt, nc, alpha, control_mean)


def _t_result(
    mean: float, se: float, df: float, test: str, paired: bool, n: int, nc: int, alpha: float, control_mean: float
) -> Difference:
    if se == 0:  # no spread (every pair differs alike; each side one value): a test that needs none
        if mean == 0:
            p = 1.0
        elif paired:  # the sign test: all n differences of one sign
            p = min(1.0, 2 * 0.5**n)
        else:  # the permutation test: the sides apart, as 2 of the C(n + nc, n) splits are
            p = min(1.0, 2 / math.comb(n + nc, n))
        return Difference(mean, mean, mean, p, test, paired, n, nc, df, 0.0, alpha, control_mean)
    half = t_quantile(1 - alpha / 2, df) * se
    p = t_two_sided_p(mean / se, df)
    return Difference(mean, mean - half, mean + half, p, test, paired, n, nc, df, se, alpha, control_mean)


POWER = 0.8
"""The power sample sizes are computed for."""


@attrs.frozen
class SampleSize:
    """How many sessions a live experiment needs to detect a difference in cost."""

    effect: float
    """The difference to detect (USD per session): the observed one, or the one asked for."""
    relative_effect: float | None
    observed: bool
    """Whether ``effect`` is the observed difference (else it was given)."""
    per_variant: int | None
    """Sessions per variant for a live experiment (each session on one variant, unpaired) to
    detect ``effect`` with 80 % power at ``alpha`` (None: no effect to detect, or no spread)."""
    pairs: int | None
    """Sessions for a paired comparison (every session under both variants, as a replay)."""
    power: float | None
    """The power this comparison had to detect ``effect``."""
    paired: bool

    @property
    def underpowered(self) -> bool:
        """An unpaired comparison with less than 80 % power for ``effect`` (meaningful for an
        effect chosen beforehand; the power for the observed difference says little)."""
        return not self.paired and (self.power is None or self.power < POWER)


def sample_size(
    treatment: Sequence[float],
    control: Sequence[float],
    difference: Difference,
    *,
    relative_effect: float | None = None,
) -> SampleSize | None:
    """Sessions per variant needed to detect the observed difference (or ``relative_effect`` of
    the control's mean) with 80 % power in a two-sided test at the difference's level (the
    normal approximation), and the power the comparison had."""
    if len(treatment) < 2 or len(control) < 2:
        return None
    control_mean = statistics.fmean(control)
    if relative_effect is not None:
        effect = abs(relative_effect) * abs(control_mean)
    else:
        effect = abs(difference.mean)
    z = _z(1 - difference.alpha / 2) + _z(POWER)
    pooled = (statistics.variance(treatment) + statistics.variance(control)) / 2
    per_variant = pairs = None
    if effect > 0 and pooled > 0:
        per_variant = max(2, math.ceil(2 * z * z * pooled / effect**2))
    if effect > 0 and difference.paired and difference.se:
        sd_diff = difference.se * math.sqrt(difference.n)
        pairs = max(2, math.ceil(z * z * sd_diff**2 / effect**2))
    power = None
    if difference.se is not None:
        if difference.se == 0:  # no spread: the exact test finds an effect iff its smallest p can pass
            n, nc = difference.n, difference.n_control
            smallest = 2 * 0.5**n if difference.paired else 2 / math.comb(n + nc, n)
            power = (1.0 if smallest < difference.alpha else 0.0) if effect > 0 else None
        else:
            power = statistics.NormalDist().cdf(effect / difference.se - _z(1 - difference.alpha / 2))
    return SampleSize(
        effect=effect,
        relative_effect=effect / abs(control_mean) if control_mean else None,
        observed=relative_effect is None,
        per_variant=per_variant,
        pairs=pairs,
        power=power,
        paired=difference.paired,
    )


__all__ = [
    "POWER",
    "Difference",
    "Estimate",
    "SampleSize",
    "Summary",
    "bootstrap_ci",
    "paired_difference",
    "paired_t",
    "sample_size",
    "summarize",
    "t_quantile",
    "t_two_sided_p",
    "unpaired_difference",
    "welch_t",
]
