"""The three-valued verdict of ``verify-samples`` and the completions a certificate needs.

    lossy          a loss test rejects after Holm over the whole family
    certified      nothing rejects, and every per-position upper confidence bound lies below ``epsilon``
                   (simultaneous confidence ``tv_confidence``: each of the T bounds at miss probability
                   (1 - tv_confidence) / T)
    inconclusive   neither; with the number of completions that would certify, from the planners

What is bounded, per mode (the certificate states it):

* two-sample: TV between the two engines' laws of the token at position t (an "ended" cell included):
  TV(Q_t, P_t) <= TV(Q̂_t, P̂_t) + √(ln(1/δ) (1/n_a + 1/n_b) / 2).  Why: at the fixed event A* = {Q_t > P_t},
  TV(Q_t, P_t) = Q_t(A*) − P_t(A*) and TV(Q̂_t, P̂_t) ≥ Q̂_t(A*) − P̂_t(A*), so the gap is one event's
  [Q_t − Q̂_t](A*) + [P̂_t − P_t](A*): n_a + n_b independent terms, each in a range of 1/n_a or 1/n_b, whose
  upper tail Hoeffding's inequality bounds by exp(−2 w² / (1/n_a + 1/n_b)) — no union over events or cells
  (as :mod:`harness.stats.worstevent`).  Planner (n_a = n_b = n, equal laws): E TV(Q̂_t, P̂_t) ≤ ½ Σ_v
  √(2 p_v (1 − p_v)/n) ≤ √(k/(2n)) (Cauchy–Schwarz), plus √(ln(1/β)/n) with probability ``power`` (McDiarmid:
  one of 2n draws moves it by ≤ 1/n; β = 1 − power), plus the width √(ln(1/δ)/n): every term ∝ 1/√n, so
  n = ⌈(C/ε)²⌉ completions per file, C = √(k/2) + √(ln(1/β)) + √(ln(1/δ)).
* scored: per position t, **token TV** between the engine's step and one target step from the engine's own
  prefixes — TV((1/n_t) Σ_i Q_t(· | h_i), (1/n_t) Σ_i p_t(· | h_i)) over the n_t completions that reach t, Q the
  engine, p the scorer's warped law, h_i the prefix completion i drew: for every set A of tokens, the engine's
  probability of A at t and the target's, both averaged over the engine's prefixes
  (:func:`harness.stats.rbtv.rb_tv_upper_bound`: the Rao–Blackwellised marginal, one sample's noise, valid for
  every engine).  It is not TV of the engine's position-t marginal from the target's own position-t marginal:
  that needs, by the hybrid argument TV(Q_t, P_t) ≤ Σ_{s≤t} E_{h~Q} TV(Q_s(·|h), p_s(·|h)), the prefix-averaged
  *conditional* TVs, a sup over events that depend on the prefix, which one completion per prefix does not
  bound (docs/engines.md).  At t = 0 (the prefix is the prompt) the two coincide: the position-0 marginals
  over the file's prompts.  Planner: n_t =
  :func:`harness.stats.rb_tv_n_for` (ε, delta_each, power) at the position's RB law, divided by its reach.
* scored, also reported (not the certificate): the Kolmogorov distance between the law of the position's
  randomized PIT and U(0, 1) (DKW, :func:`harness.stats.kolmogorov_upper_bound`), ≤ the mean over prefixes
  of TV(engine_t(·|prefix), target_t(·|prefix)) (events set by the target's CDF at each prefix); planner
  :func:`scored_n_for_distance`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from harness import stats

__all__ = ["PositionBounds", "Certificate", "top_cells", "scored_bounds", "scored_n_for_distance", "token_tv_bounds",
           "two_sample_bounds", "two_sample_n_for_tv", "judge"]


@dataclass(frozen=True)
class PositionBounds:
    """Per position t: ``n`` values, the point estimate ``hat``, the upper bound ``upper``; ``what`` the
    distance bounded, ``delta_each`` each bound's miss probability, ``needed`` the completions at which each
    position's bound falls under epsilon with probability ≥ the run's power under H0 (planner; the power is per
    position, so all T at once with probability ≥ 1 − T (1 − power) — far more in practice, the planners'
    pieces being conservative)."""

    what: str
    n: tuple
    hat: tuple
    upper: tuple
    delta_each: float
    needed: int
    needed_at: dict = field(default_factory=dict)  # epsilon (as text) -> completions, where more than one is planned
    carriers: tuple = ()  # per position: the tokens whose shares differ most (:func:`top_cells`; '' where none)

    @property
    def max_upper(self) -> float:
        return max(self.upper) if self.upper else math.inf


def top_cells(q: np.ndarray, p: np.ndarray, names: tuple = ("observed", "expected"), ended: Optional[int] = None,
              top: int = 3) -> str:
    """'token 5: observed 12.1 % vs expected 8.0 %; ...': the ``top`` cells whose shares ``q`` and ``p`` differ most
    (cell ``ended``: 'end', a completion that ended before the position)."""
    cells = np.argsort(-np.abs(q - p), kind="stable")[:top]
    return "; ".join(f"token {'end' if c == ended else int(c)}: {names[0]} {100 * q[c]:.3g} % vs {names[1]} "
                     f"{100 * p[c]:.3g} %" for c in cells)


def scored_n_for_distance(epsilon: float, delta: float, power: float, reach: float = 1.0) -> int:
    """Completions for every position's DKW bound to fall below ``epsilon`` with probability ``power`` when
    the engine samples the target's law: :func:`harness.stats.dkw_n_for_distance` PIT values per position
    (each bound at miss probability ``delta``), divided by ``reach``, the smallest share of completions that
    reach a position (1 when every completion has all T tokens)."""
    return math.ceil(stats.dkw_n_for_distance(epsilon, alpha=delta, power=power) / reach)


def scored_bounds(u: np.ndarray, present: np.ndarray, epsilon: float, tv_confidence: float,
                  power: float) -> PositionBounds:
    """DKW bounds on the Kolmogorov distance of each position's PIT law (only completions that reach t)."""
    T = u.shape[1]
    delta = (1 - tv_confidence) / T
    n, hat, up = [], [], []
    for t in range(T):
        x = u[present[:, t], t]
        if x.size == 0:
            n.append(0), hat.append(math.nan), up.append(1.0)
            continue
        b = stats.kolmogorov_upper_bound(x, delta=delta)
        n.append(int(x.size)), hat.append(b.ks_hat), up.append(b.upper)
    reach = float(present.mean(0).min()) if T else 1.0
    needed = scored_n_for_distance(epsilon, delta, power, max(reach, 1.0 / (10 * u.shape[0]))) if T else 0
    return PositionBounds("Kolmogorov distance of the position's randomized-PIT law from U(0, 1) (DKW); "
                          "<= the prefix-averaged token TV, not a bound on it",
                          tuple(n), tuple(hat), tuple(up), delta, needed)


def _token_tv_needed(n_t: list, N: int, law_sum: np.ndarray, epsilon: float, delta: float, power: float) -> int:
    """Completions for every position's token-TV bound to fall below ``epsilon`` (planner, H0): per position
    :func:`harness.stats.rb_tv_n_for` at its RB law, divided by its reach n_t / N."""
    return max([math.ceil(stats.rb_tv_n_for(law_sum[t] / n, epsilon, delta, power) * N / n)
                for t, n in enumerate(n_t) if n > 0] or [0])


def token_tv_bounds(tokens: np.ndarray, present: np.ndarray, law_sum: np.ndarray, epsilon: float,
                    tv_confidence: float, power: float, also: tuple = ()) -> PositionBounds:
    """Token-TV bounds of scored mode (module docstring): ``tokens`` (N, T) the engine's ids, ``present`` (N, T)
    which entries are real, ``law_sum`` (T, V) the scorer's conditional laws summed over the rows present at t.
    ``also``: further epsilons whose planned completions go to ``needed_at`` (``needed`` is ``epsilon``'s)."""
    T, V = law_sum.shape
    delta = (1 - tv_confidence) / T
    n, hat, up, where = [], [], [], []
    for t in range(T):
        x = tokens[present[:, t], t]
        if x.size == 0:
            n.append(0), hat.append(math.nan), up.append(1.0), where.append("")
            continue
        counts = np.bincount(x, minlength=V)
        b = stats.rb_tv_upper_bound(counts, law_sum[t], delta=delta)
        n.append(int(x.size)), hat.append(b.tv_hat), up.append(b.upper)
        where.append(top_cells(counts / x.size, law_sum[t] / x.size, ("engine", "target")))
    need = {e: _token_tv_needed(n, tokens.shape[0], law_sum, e, delta, power) for e in (epsilon, *also)}
    return PositionBounds(stats.RB_LAW, tuple(n), tuple(hat), tuple(up), delta, need[epsilon],
                          {f"{e:g}": v for e, v in need.items()}, tuple(where))


def two_sample_n_for_tv(epsilon: float, k: int, delta: float, power: float) -> int:
    """Completions per file for the two-sample position bound to fall below ``epsilon`` with probability
    ``power`` when the two laws are equal (module docstring)."""
    C = math.sqrt(k / 2) + math.sqrt(math.log(1 / (1 - power))) + math.sqrt(math.log(1 / delta))
    return math.ceil((C / epsilon) ** 2)


def two_sample_bounds(cells_a: np.ndarray, cells_b: np.ndarray, k: int, epsilon: float, tv_confidence: float,
                      power: float) -> PositionBounds:
    """Upper bounds on TV between the two files' laws of each position's cell (k cells: V tokens + ended)."""
    T = cells_a.shape[1]
    delta = (1 - tv_confidence) / T
    na, nb = cells_a.shape[0], cells_b.shape[0]
    dev = stats.hoeffding_width(delta, na, nb)  # one event's deviation of the two proportions' difference
    hat, up, where = [], [], []
    for t in range(T):
        qa = np.bincount(cells_a[:, t], minlength=k) / na
        qb = np.bincount(cells_b[:, t], minlength=k) / nb
        h = 0.5 * float(np.abs(qa - qb).sum())
        hat.append(h), up.append(min(1.0, h + dev)), where.append(top_cells(qa, qb, ("samples", "baseline"), k - 1))
    return PositionBounds(f"TV between the two files' laws of the token at each position ({k} cells: the "
                          "vocabulary and 'ended'; finite-sample, one event's Hoeffding deviation)",
                          tuple([min(na, nb)] * T), tuple(hat), tuple(up), delta,
                          two_sample_n_for_tv(epsilon, k, delta, power), carriers=tuple(where))


@dataclass(frozen=True)
class Certificate:
    verdict: str
    epsilon: float
    confidence: float
    bounds: Optional[PositionBounds]
    completions: int
    reasons: tuple = field(default_factory=tuple)

    def where(self) -> str:
        """Where the engine's law departs most (:func:`_where`)."""
        return _where(self.bounds)

    def headline(self) -> str:
        b = self.bounds
        if self.verdict == "certified":
            return (f"certified: {b.what.split(' (')[0]} <= {self.epsilon:g} at every position (largest bound "
                    f"{b.max_upper:.3g}; simultaneous confidence {self.confidence:g})")
        if self.verdict == "lossy":
            return "lossy: " + "; ".join(self.reasons) + self.where()
        return (f"inconclusive: {'; '.join(self.reasons)}; about {b.needed if b else '?'} completions "
                f"{'per file ' if b and b.what.startswith('TV between') else ''}would certify epsilon = "
                f"{self.epsilon:g} (have {self.completions})")


def _where(b: Optional[PositionBounds]) -> str:
    """'; largest estimated <distance> 0.12 at position 3 (upper bound 0.15)': where a lossy engine's law departs
    most, by the per-position point estimates ('' without estimates)."""
    hat = np.array(b.hat if b is not None else (), dtype=np.float64)
    if not hat.size or not np.isfinite(hat).any():
        return ""
    t = int(np.nanargmax(hat))
    tokens = b.carriers[t] if t < len(b.carriers) else ""
    return (f"; largest estimated {b.what.split(' (')[0].split(';')[0]} {hat[t]:.3g} at position {t} (upper bound "
            f"{b.upper[t]:.3g}, n = {b.n[t]})" + (f"; {tokens}" if tokens else ""))


def judge(table, bounds: Optional[PositionBounds], epsilon: float, tv_confidence: float, completions: int,
          blockers: tuple = ()) -> Certificate:
    """The verdict from the Holm-adjusted ``table`` (tests.csv rows), the position ``bounds`` and any
    ``blockers`` (reasons that forbid a certificate without proving a loss)."""
    rej = table[table["reject"]]
    loss = rej[rej["loss_test"]]
    if len(loss):
        why = [f"{r.family}/{r.test}" + (f"@{int(r.position)}" if r.position >= 0 else "") +
               f" (p_adj {r.p_adjusted:.2g})" for r in loss.itertuples()]
        more = f" and {len(why) - 5} more" if len(why) > 5 else ""
        return Certificate("lossy", epsilon, tv_confidence, bounds, completions,
                           (f"{len(why)} test(s) reject: {', '.join(why[:5])}{more}",))
    reasons = list(blockers)
    reasons += [f"{r.family}/{r.test} rejects ({r.method})" for r in rej.itertuples()]
    if bounds is None:
        reasons.append("no position bounds")
    elif bounds.max_upper > epsilon:
        worst = int(np.argmax(bounds.upper))
        reasons.append(f"largest position bound {bounds.max_upper:.3g} (position {worst}, n = {bounds.n[worst]}) "
                       f"exceeds epsilon = {epsilon:g}")
    verdict = "certified" if not reasons else "inconclusive"
    return Certificate(verdict, epsilon, tv_confidence, bounds, completions, tuple(reasons))
