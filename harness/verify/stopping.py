"""Stop at the need (the default of `verify`; `--fixed-n` opts out): an exact-law run under test stops drawing as
soon as its certificate holds (issue 42, item 1), with bounds valid at that data-dependent stopping time.

The looks (fixed before any draw, from the law, ε, δ and the run's size alone; :func:`run_looks`):
- the first at the planner's fixed-n need (the sequences at which every bound's expected upper end reaches its ε at
  the command's δ per bound: :func:`harness.verify.battery.tv_interval_n_for`, the largest over the run's bounds;
  no earlier look could certify on average even at the fixed-n δ);
- then x :data:`RATIO` each, up to the cap, ``CAP_FACTOR`` x the run's fixed-n size (``draws`` x the scenario's
  weight), the last look;
- δ per bound spent over them (:func:`harness.stats.anytime.look_deltas`): the cap :data:`CAP_SHARE` of the
  command's δ per bound, the earlier looks the rest evenly.  Every bound of the run at look i is computed at δ_i,
  so by the union over looks (:mod:`harness.stats.anytime`) each bound holds at the stopping time with probability
  ≥ 1 − δ per bound, and the command's Bonferroni split keeps its confidence ``tv_confidence``.

At each look the run is certified when every one of its TV upper bounds (positions, pairs, J-windows; the same
:func:`harness.verify.battery.tv_interval` the verdict reads) lies below its ε (:func:`certified_at`); it then
stops.  The lossy side is unchanged in kind: the sequential e-process (anytime-valid) looks after every shard, and
the fixed-n tests are read once, at the stopping time, with their p-values x the number of looks (a union over
the looks: P(L·p_τ ≤ a) ≤ Σ_i P(p_i ≤ a / L) ≤ a), so Holm keeps the family's α.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness import stats
from harness.stats.anytime import Looks, look_deltas, look_sizes
from harness.verify.battery import tv_interval, tv_interval_n_for
from harness.verify.exactmodel import exact_model_bounds, exact_model_counts
from harness.verify.verdicts import gof_law

__all__ = ["RATIO", "CAP_SHARE", "CAP_FACTOR", "run_bounds", "need", "run_looks", "largest_ratio", "certified_at",
           "StopRule", "stop_rule", "reference_delta", "look_chunks", "SCHEME", "PairStopRule", "pair_stop_rule",
           "pair_need", "pair_largest_ratio", "pair_smallest_p", "pair_cap", "LOSSY_P"]

SCHEME = "stop-at-need-v1"  # how an exact-law run is looked at and stopped once certified (part of the state fingerprint)

RATIO = 1.1       # the looks' geometric step
CAP_SHARE = 0.5   # the cap's share of δ per bound (the earlier looks share the rest evenly)
CAP_FACTOR = 1.25  # the cap over the run's fixed-n size (the cap's bounds are at δ / 2; see docs/verify.md)


def run_bounds(law, J: int) -> list:
    """(test, position) of every TV bound of an exact-law run on ``law`` with J-windows: each position, each
    consecutive pair, every J-window (``joint[a:a+J]``), as :func:`harness.verify.battery.plan_tests` states them."""
    N = law.N
    out = [("position", t) for t in range(N)] + [("pair", t) for t in range(N - 1)]
    return out + [(f"joint[{a}:{a + J}]", a) for a in range(N - J + 1)] if 2 <= J else out


def need(law, J: int, eps, delta: float) -> int:
    """The planner's fixed-n need: the largest over the run's bounds of the sequences at which its expected upper end
    (lossless sampler) reaches its ε at δ (``eps``: the run's :class:`harness.verify.epsilon.Epsilons`)."""
    law_of = gof_law(law, J)
    return max(tv_interval_n_for(law_of(t, p), eps.for_test(t), delta) for t, p in run_bounds(law, J))


def run_looks(law, J: int, eps, delta: float, draws: int, cap_factor: float = CAP_FACTOR) -> Looks:
    """The :class:`Looks` of a run of fixed-n size ``draws`` (module docstring): from the fixed-n need, x RATIO, to
    the cap ``cap_factor`` x ``draws`` (at least ``draws``)."""
    cap = max(int(draws), int(math.ceil(cap_factor * draws)))
    sizes = look_sizes(min(need(law, J, eps, delta), cap), cap, RATIO)
    return Looks(sizes, look_deltas(delta, len(sizes), CAP_SHARE))


def _counts(acc, test: str, pos: int) -> np.ndarray:
    if test == "position":
        return acc.counts[pos]
    if test == "pair":
        return acc.pairs[pos]
    if pos == 0:
        return acc.joint
    lg = acc.lagged  # the last window lives with the lag tables (battery._later_specs), the middle ones in windows
    return lg.tail_joint if lg is not None and lg.tail_tokens and pos == lg.tail_offset else acc.windows[pos - 1]


def largest_ratio(acc, eps, delta: float) -> float:
    """The largest TV upper bound over its ε of the run's accumulated counts ``acc``, every bound at ``delta``."""
    law_of = gof_law(acc.law, acc.joint_tokens)
    return max(tv_interval(_counts(acc, t, p), law_of(t, p), delta)[2] / eps.for_test(t)
               for t, p in run_bounds(acc.law, acc.joint_tokens))


def certified_at(acc, eps, looks: Looks) -> bool:
    """Whether the run's certificate holds at this look (``acc.n`` one of ``looks``): every bound, at the look's δ,
    below its ε."""
    return largest_ratio(acc, eps, looks.delta_at(int(acc.n))) < 1.0


@dataclass(frozen=True)
class StopRule:
    """How one run under test stops at the need: its ``looks`` (sizes, and each look's share of δ per bound: Σ = 1),
    its tolerances ``eps``, and the δ per bound ``delta_ref`` the looks are decided at while drawing.

    The verdict recomputes every bound at the command's δ per bound x the share of the look the run stopped at
    (:mod:`harness.verify.family`), which is what the certificate states; ``delta_ref`` (from an upper count of the
    command's bounds, :func:`reference_delta`) is at most that δ, so a look that certifies here certifies there."""

    looks: Looks
    eps: object
    delta_ref: float
    fixed_n: int  # the run's fixed-n size (draws x weight): the cap is CAP_FACTOR x it

    def share_at(self, n: int) -> float:
        """The share of δ of the look at ``n``; off the grid (a run stopped by its e-process, lossy) the smallest
        share (its bounds are reported, not certified)."""
        return float(self.looks.delta_at(n)) if int(n) in self.looks.sizes else float(min(self.looks.deltas))

    def certified(self, acc) -> bool:
        """At a look: every bound of ``acc`` at δ_ref x the look's share below its ε (off the grid: False)."""
        if int(acc.n) not in self.looks.sizes:
            return False
        return largest_ratio(acc, self.eps, self.delta_ref * self.looks.delta_at(int(acc.n))) < 1.0


def reference_delta(settings, n_bounds: int) -> float:
    """δ per bound the looks are decided at: (1 − tv_confidence) / ``n_bounds`` (an upper count of the command's
    bounds, so at most the δ the verdict uses)."""
    return (1.0 - float(settings.tv_confidence)) / max(int(n_bounds), 1)


def stop_rule(law, J: int, eps, delta_ref: float, draws: int) -> StopRule:
    """The :class:`StopRule` of a run of fixed-n size ``draws``: :func:`run_looks` with the shares of δ as deltas."""
    looks = run_looks(law, J, eps, delta_ref, draws)
    return StopRule(Looks(looks.sizes, tuple(d / delta_ref for d in looks.deltas)), eps, float(delta_ref), int(draws))


def look_chunks(sizes, min_chunks: int, max_chunk: int) -> list:
    """Sampler calls (sequences each) that end exactly at every look of ``sizes``: each segment between looks cut
    into calls of about (first look) / ``min_chunks`` (so the first look alone has ``min_chunks`` calls, the
    acceptance tests' chunk totals), at most ``max_chunk``."""
    target = max(1, min(int(max_chunk), int(math.ceil(sizes[0] / max(int(min_chunks), 1)))))
    out, prev = [], 0
    for n in sizes:
        seg = int(n) - prev
        c = max(1, int(math.ceil(seg / target)))
        base, extra = divmod(seg, c)
        out += [base + (1 if i < extra else 0) for i in range(c)]
        prev = int(n)
    return out


def stop_summary(rs) -> dict:
    """What stopping at the need did in a command (meta.json ``timing.stop_at_need``): per run of ``rs`` with a
    :class:`StopRule`, its sequences against its fixed-n size and cap, and the look that certified it (0: none,
    i.e. lossy by its e-process first, or not certified even at its cap, where it also stops)."""
    rows = []
    for r in rs.runs:
        rule = getattr(r, "stop", None)
        if rule is None or r.acc is None:
            continue
        n, sizes = int(r.acc.n), tuple(int(s) for s in rule.looks.sizes)
        rows.append({"run": r.label, "scenario": r.scenario.name, "sequences": n, "fixed_n": int(rule.fixed_n),
                     "cap": sizes[-1], "looks": len(sizes),
                     "look": sizes.index(int(r.certified_at)) + 1 if r.certified_at is not None else 0})
    for rr in getattr(rs, "real_runs", ()):  # the exact pair: per prompt x the prompts (its sequences)
        rule = rr.stop
        if rule is None or rr.exact is None or rr.exact.error is not None:
            continue
        P, sizes = rr.exact.n_prompts, tuple(int(s) for s in rule.all_sizes)
        at = rr.certified_at if rr.certified_at is not None else rr.lossy_at
        rows.append({"run": rr.label, "scenario": "real_model (exact pair)", "sequences": rr.exact_drawn * P,
                     "fixed_n": int(rule.fixed_n) * P, "cap": sizes[-1] * P, "looks": len(sizes),
                     "look": sizes.index(int(at)) + 1 if at is not None else 0,
                     **({"lossy": True} if rr.lossy_at is not None else {})})
    drawn, fixed = sum(x["sequences"] for x in rows), sum(x["fixed_n"] for x in rows)
    return {"runs": rows, "sequences": drawn, "fixed_n": fixed}


# ------------------------------------------------------------------------------- the exact transformer pair
# The real-model certificate (harness.verify.exactmodel) stops at the need the same way, in sequences per prompt:
# its looks are at shard boundaries (each shard alternates the prompts and has its own seed), so the counts at a look
# are those of the shards before it, merged in shard order, whatever order the workers finish them in.

LOSSY_P = 1e-20  # a look stops an exact-pair run as lossy when some χ² test's p x L is at most this: far below the
                 # Bonferroni level α / m of any family (α = 1e-4, m < 1e16 tests), so Holm rejects that test at the
                 # verdict, which reads the same p x L (any stopping rule among the looks keeps it a valid p-value)


def pair_cap(n_per_prompt: int) -> int:
    """Sequences per prompt drawn at most on the exact pair by a run of fixed-n size ``n_per_prompt``."""
    return max(int(n_per_prompt), int(math.ceil(CAP_FACTOR * n_per_prompt)))


def pair_need(law, n_prompts: int, eps, delta: float) -> int:
    """The planner's fixed-n need on the exact pair (sequences per prompt): the largest over its bounds
    (:func:`harness.verify.exactmodel.exact_model_bounds`) of the size at which a lossless sampler's expected upper
    end reaches its ε at δ."""
    return max(tv_interval_n_for(law.of(t, i, p), eps.for_real_test(t), delta)
               for i, t, p in exact_model_bounds(law, n_prompts))


def pair_largest_ratio(draw, law, eps, delta: float) -> float:
    """The largest token-TV upper bound over its ε of the exact-pair ``draw`` (every bound at ``delta``)."""
    return max(tv_interval(c, P, delta)[2] / eps.for_real_test(t) for _, t, _, c, P, _ in exact_model_counts(draw, law))


def pair_smallest_p(draw, law) -> float:
    """The smallest χ² goodness-of-fit p-value of the exact-pair ``draw`` over its laws (the verdict's own p-values:
    :func:`harness.stats.chi2_gof` on the same counts)."""
    return min(float(stats.chi2_gof(c, P).pvalue) for _, _, _, c, P, _ in exact_model_counts(draw, law))


@dataclass(frozen=True)
class PairStopRule(StopRule):
    """A real-model run's stop at the need on the exact pair: ``looks`` in sequences per prompt, each at a shard
    boundary (``ends``: sequences per prompt after each shard drawn up to the cap); ``early``: looks before the first
    of them, at 1, 2, 4, ... shards, where only the lossy side looks (:meth:`lossy_draw`: they spend no δ, and a run
    stopped there has its bounds reported at the smallest share, not certified, as a run an e-process stopped)."""

    ends: tuple = ()
    early: tuple = ()

    @property
    def n_looks(self) -> int:
        """L, the looks the run may stop at (the p-values of its tests are read as L x p)."""
        return len(self.early) + len(self.looks.sizes)

    @property
    def all_sizes(self) -> tuple:
        return tuple(self.early) + tuple(self.looks.sizes)

    def shards_at(self, n: int) -> int:
        """The shards (in order) that hold the first ``n`` sequences per prompt."""
        return self.ends.index(int(n)) + 1

    def certified_draw(self, draw, law) -> bool:
        """At a look: every bound of ``draw`` (the shards before it) at δ_ref x the look's share below its ε."""
        n = draw.n_sequences // max(draw.n_prompts, 1)
        if n not in self.looks.sizes:
            return False
        return pair_largest_ratio(draw, law, self.eps, self.delta_ref * self.looks.delta_at(n)) < 1.0

    def lossy_draw(self, draw, law) -> bool:
        """At a look: some χ² test of ``draw`` with p x L ≤ :data:`LOSSY_P` (the run is lossy beyond doubt)."""
        n = draw.n_sequences // max(draw.n_prompts, 1)
        return n in self.all_sizes and self.n_looks * pair_smallest_p(draw, law) <= LOSSY_P


def pair_stop_rule(law, n_prompts: int, ends, eps, delta_ref: float, n_per_prompt: int) -> PairStopRule:
    """The :class:`PairStopRule` of a run of fixed-n size ``n_per_prompt`` whose shards up to the cap end at
    ``ends`` (sequences per prompt): the looks of :func:`run_looks` (from the need, x RATIO), each moved up to the
    next shard boundary."""
    ends = tuple(int(e) for e in ends)
    first = min(pair_need(law, n_prompts, eps, delta_ref), ends[-1])
    sizes = tuple(sorted({next(e for e in ends if e >= s) for s in look_sizes(first, ends[-1], RATIO)}))
    shares = tuple(d / delta_ref for d in look_deltas(delta_ref, len(sizes), CAP_SHARE))
    early = tuple(ends[k - 1] for k in (2 ** i for i in range(len(ends).bit_length())) if ends[k - 1] < sizes[0])
    return PairStopRule(Looks(sizes, shares), eps, float(delta_ref), int(n_per_prompt), ends, early)
