"""Explain a cost change by its drivers: an exact multiplicative decomposition (LMDI-I).

A segment's weekly cost is written as a product of factors, e.g.

    cost = successful tasks x (tasks / successful tasks) x (calls / task) x (USD / call)

and its change ``V1 - V0`` is split among the factors with the additive log-mean Divisia index
(LMDI-I; B. W. Ang, "Decomposition analysis for policymaking in energy", Energy Policy 32, 2004,
eq. 5): ``contribution_i = L(V1, V0) * ln(x_i1 / x_i0)`` with the logarithmic mean
``L(a, b) = (a - b) / (ln a - ln b)`` (``L(a, a) = a``). The contributions add up to the change
exactly, with no residual term, and each is zero when its factor did not move.

Factors that are zero or missing on either side cannot enter a logarithm; the change is then
reported as a residual (e.g. a segment that did not exist last week is all "volume").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.review.model import Driver


@dataclass(frozen=True)
class Factor:
    """One factor of a product, with the figure shown to the reader (which may differ in form).

    ``value_this``/``value_last``: the factor itself (the product of all factors = the cost).
    ``shown_this``/``shown_last``: what the report prints, e.g. the failure rate 0.2 for the
    factor tasks/successes = 1 / (1 - 0.2). Defaults to the factor.
    """

    name: str
    unit: str
    value_this: float | None
    value_last: float | None
    shown_this: float | None = None
    shown_last: float | None = None

    def shown(self) -> tuple[float | None, float | None]:
        this = self.value_this if self.shown_this is None else self.shown_this
        last = self.value_last if self.shown_last is None else self.shown_last
        return this, last


def log_mean(a: float, b: float) -> float:
    """Logarithmic mean L(a, b) = (a - b) / (ln a - ln b), L(a, a) = a; a, b > 0."""
    if a <= 0 or b <= 0:
        raise ValueError(f"log mean needs positive values, got {a!r}, {b!r}")
    if math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0):
        return a
    return (a - b) / (math.log(a) - math.log(b))


def _positive(x: float | None) -> bool:
    return x is not None and math.isfinite(x) and x > 0


def decompose(total_this: float, total_last: float, factors: list[Factor],
              fallback: str | None = None) -> tuple[tuple[Driver, ...], float]:
    """Split ``total_this - total_last`` among ``factors`` (LMDI-I). Returns (drivers, residual USD).

    Args:
        total_this / total_last: the cost in each week, USD (should equal the product of factors).
        factors: the factors; their product is checked against the totals (relative 1e-6), and a
            mismatch puts the unexplained part in the residual rather than hiding it.
        fallback: name of the factor that takes the whole change when a log cannot be taken
            (a segment new this week, or gone): typically "volume". Otherwise it is residual.

    Returns:
        One :class:`Driver` per factor (same order) and the residual in USD; the contributions plus
        the residual equal ``total_this - total_last``.
    """
    change = total_this - total_last
    usable = _positive(total_this) and _positive(total_last) and all(
        _positive(f.value_this) and _positive(f.value_last) for f in factors)
    contributions = [0.0] * len(factors)
    if usable:
        weight = log_mean(total_this, total_last)
        contributions = [weight * math.log(f.value_this / f.value_last) for f in factors]
    elif fallback is not None:
        for i, f in enumerate(factors):
            if f.name == fallback:
                contributions[i] = change
    residual = change - sum(contributions)
    if abs(residual) < 1e-9 * max(1.0, abs(total_this), abs(total_last)):
        residual = 0.0
    drivers = tuple(
        Driver(name=f.name, unit=f.unit, this=f.shown()[0], last=f.shown()[1], contribution_usd=c)
        for f, c in zip(factors, contributions))
    return drivers, residual


def segment_factors(*, cost_this: float, cost_last: float, succ_this: float, succ_last: float,
                    tasks_this: float, tasks_last: float, calls_this: float, calls_last: float,
                    tokens_this: float, tokens_last: float, price_this: float | None,
                    price_last: float | None, idle_share_this: float | None = None,
                    idle_share_last: float | None = None) -> list[Factor]:
    """The factors of a segment's weekly cost used by the review (their product is the cost).

    cost = successes x (tasks/successes) x (calls/task) x (tokens/call) x price
           x (GPU-hours per token at the allocated share) x 1/(1 - idle share)

    * volume: successful tasks.
    * failure rate: shown as failed-or-abandoned share of tasks; factor tasks / successes.
    * calls per task: units of GPU work per task (client retries and the gateway's hidden retries
      included; "attempts" means the calls the client sent, shown on the cost page).
    * tokens per call: prompt + output tokens per call.
    * price: USD per GPU-hour (spend-weighted mean of the GPUs the segment used).
    * GPU time per token: GPU-hours of allocated (non-idle) work per 1M tokens = efficiency of
      batching and caching; the factor that makes the product exact.
    * idle share: idle spend / spend; factor 1 / (1 - idle share). Only for the fleet as a whole
      (a segment's cost holds no idle), so pass None for segments.
    """
    def ratio(a, b):
        return a / b if a and b else None

    factors = [
        Factor("volume", "successful tasks", succ_this, succ_last),
        Factor("failure rate", "%", ratio(tasks_this, succ_this), ratio(tasks_last, succ_last),
               shown_this=(1 - succ_this / tasks_this) if tasks_this else None,
               shown_last=(1 - succ_last / tasks_last) if tasks_last else None),
        Factor("calls per task", "calls/task", ratio(calls_this, tasks_this), ratio(calls_last, tasks_last)),
        Factor("tokens per call", "tokens/call", ratio(tokens_this, calls_this), ratio(tokens_last, calls_last)),
    ]
    idle_this = 1 / (1 - idle_share_this) if idle_share_this is not None and idle_share_this < 1 else None
    idle_last = 1 / (1 - idle_share_last) if idle_share_last is not None and idle_share_last < 1 else None
    if price_this and price_last:
        factors.append(Factor("price", "USD/GPU-hour", price_this, price_last))

        def gpu_hours_per_token(cost, tokens, price, idle):
            if not (cost and tokens and price):
                return None
            allocated = cost / idle if idle else cost
            return allocated / price / tokens
        this = gpu_hours_per_token(cost_this, tokens_this, price_this, idle_this)
        last = gpu_hours_per_token(cost_last, tokens_last, price_last, idle_last)
        factors.append(Factor("GPU time per token", "GPU-h/1M tokens", this, last,
                              shown_this=this * 1e6 if this else None, shown_last=last * 1e6 if last else None))
    else:
        def usd_per_token(cost, tokens, idle):
            if not (cost and tokens):
                return None
            allocated = cost / idle if idle else cost
            return allocated / tokens
        this = usd_per_token(cost_this, tokens_this, idle_this)
        last = usd_per_token(cost_last, tokens_last, idle_last)
        factors.append(Factor("cost per token", "USD/1M tokens", this, last,
                              shown_this=this * 1e6 if this else None, shown_last=last * 1e6 if last else None))
    if idle_share_this is not None or idle_share_last is not None:
        factors.append(Factor("idle share", "%", idle_this, idle_last,
                              shown_this=idle_share_this, shown_last=idle_share_last))
    return factors
