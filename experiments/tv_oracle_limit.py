"""How close the certificate's per-position TV bound is to what any valid bound can reach (issue 24's 1.5x target).

    python experiments/tv_oracle_limit.py            # prints a markdown table

For a lossless sampler (Q = P), any upper confidence bound U on TV(Q, P) with coverage 1 - delta has a median of at
least z_delta * max_A sqrt(P(A) (1 - P(A)) / n) (two points: P and P moved by t along the worst event A cannot be told
apart at level delta with power 1/2 below that t).  The table sets it beside the expected value of the bound the gate
uses (harness.verify.battery.tv_interval_expected_upper: on these cells the worst-event bound,
harness.stats.worstevent), of the union-of-events bound it used before (harness.stats.events, 15dfcc1..ca19ad3)
and of the one before that (the smaller of the plug-in and cross U-statistic bounds' figures), at the gate's
per-bound delta, per scenario and size.
"""
from __future__ import annotations

import numpy as np
from scipy.stats import norm

import harness.verify.battery as battery
from harness.stats import crossu, events
from harness.stats.bounds import tv_upper_bound_expected
from harness.laws.scenarios import load_scenario, scenario_law

DELTA = 8.3e-7  # the gate's per-bound delta (results/verify/summary.md: 0.001 Bonferroni-split)
CASES = (("base", 1_000_000), ("top_p", 1_000_000), ("power", 30_000_000), ("power", 120_000_000))


def worst_event_variance(P: np.ndarray) -> float:
    """max over events A of P(A)(1 - P(A)), over the cells of positive mass (2^K subsets)."""
    P = P[P > 0]
    masks = np.arange(1, 2 ** len(P) - 1)
    bits = (masks[:, None] >> np.arange(len(P))[None, :]) & 1  # (2^K - 2, K)
    a = bits @ P
    return float(np.max(a * (1 - a)))


def main() -> None:
    z = norm.isf(DELTA)
    print("| scenario | sequences | oracle median bound (any valid bound) | the gate's expected bound (worst-event) | ratio "
          "| union of events | ratio | plug-in / cross U | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, n in CASES:
        law, _ = scenario_law(load_scenario(name))
        oracle = max(z * np.sqrt(worst_event_variance(P) / n) for P in law.marginals())
        ours = max(battery.tv_interval_expected_upper(P, n, DELTA) for P in law.marginals())
        ev = max(events.tv_upper_bound_events_expected(P, n, DELTA / 2) for P in law.marginals())
        before = max(min(tv_upper_bound_expected(P, n, DELTA / 2), crossu.tv_upper_bound_crossu_expected(P, n, DELTA / 2))
                     for P in law.marginals())
        print(f"| {name} | {n:,} | {oracle:.3g} | {ours:.3g} | {ours / oracle:.2f} | {ev:.3g} | {ev / oracle:.2f} "
              f"| {before:.3g} | {before / oracle:.2f} |")


if __name__ == "__main__":
    main()
