"""Cost models of speculative decoding: does it pay, with which k, and how well do we predict it.

Notation (as in :mod:`specimpl.speculative`: p target, q draft, k drafts per round, B batch)
---------------------------------------------------------------------------------------------
    alpha      probability that one draft token is accepted, E_prefix[sum_x min(p(x), q(x))],
               assumed the same at every position (the iid model of Leviathan et al. 2023)
    alpha_i    conditional acceptance at draft position i given positions 1..i-1 were accepted
               (the measured model: acceptance is not iid across positions)
    n          accepted drafts in a round, 0..k;  a round emits n + 1 tokens
    E          expected tokens per round = E[n + 1] = 1 + sum_{j=1..k} prod_{i<=j} alpha_i
               iid: (1 - alpha^{k+1}) / (1 - alpha)  (k + 1 at alpha = 1)
    c          T_draft / T_target: cost of one draft call relative to one target call
    S          walltime speedup over target-only decoding, a ratio of tokens per second

Analytic model (Leviathan et al. 2023, §3)
    S = E / (k c + 1).  Some k gains (S > 1) iff alpha > c; the best k comes from an integer
    search over S; the breakeven contour is S = 1.

Measured model (this module's :func:`predict_measured`)
    It replaces the two idealisations that the analytic model makes:
    * per-position acceptance alpha_1..alpha_k instead of one alpha;
    * profiled per-call costs instead of one ratio c: target verification T_target(n, B) as a
      function of tokens scored n = k + 1 and batch B, draft calls T_draft(n, B) (the sampler's
      first draft call of a round feeds 2 tokens, the other k - 1 feed 1), prefill and roll-back
      costs, and the fixed per-round overhead of the sampler's own logic O_spec(k, B) (warping,
      drawing, verification, book-keeping), and O_ar(B) per token for the target-only baseline.
      The sweep's real-model cells profile all of these in situ (:func:`harness.speedup.profiler.profile_in_situ`:
      instrumented runs of the cell itself; the overheads are the runs' time outside the model calls).
      Profiled apart — each model alone, the overhead on zero-cost models — they described another
      state than the runs': on the tiny pair the overhead outside the forwards was 1.5-3x the
      zero-cost models' (process CPU time, five cells), and the model over-predicted the speedup.
    The round process of a finite run is simulated (ragged acceptance in a batch, the last round
    cut at max_new_tokens, the sampler's batch compaction), so the prediction is the expected
    wall time of the very call that is measured.

Acceptance metrics (define once, report both: systems disagree, see references)
    acceptance rate        accepted / drafted = E[n] / k              (vLLM V0 "draft acceptance rate")
    mean acceptance length 1 + accepted / rounds = E[n] + 1 = E        (vLLM V1; bonus/resample included)
    alpha_hat              sum_i accepted_at_i / sum_i reached_i: the maximum-likelihood alpha of the
                           iid model (positions judged, not positions drafted)
    tokens per target call emitted / rounds: tokens one sequence gains per target call (after
                           truncation at max_new_tokens; a batched call serves each live sequence once),
                           as specimpl's SpecStats.totals() reports it
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np
import pandas as pd

from specimpl.errors import check_arg

__all__ = ["expected_tokens", "analytic_speedup", "AcceptanceMetrics", "acceptance_metrics", "CostTable",
           "conditional_alphas", "simulate_rounds", "Prediction", "predict_run", "predict_measured",
           "predict_from_counts"]


# -- analytic model -------------------------------------------------------------------------------
def _check_alpha(alpha, name="alpha"):
    a = np.asarray(alpha, dtype=np.float64)
    check_arg(a.size > 0 and bool(np.all(np.isfinite(a)) and np.all(a >= 0) and np.all(a <= 1)), name, alpha,
              "probabilities in [0, 1]")
    return a


def _check_k(k, name="k"):
    kk = np.asarray(k)
    check_arg(kk.size > 0 and np.issubdtype(kk.dtype, np.integer) and bool(np.all(kk >= 1)), name, k,
              "an integer >= 1 (or an integer array)")
    return kk.astype(np.int64)


def _check_c(c):
    cc = np.asarray(c, dtype=np.float64)
    check_arg(bool(np.all(np.isfinite(cc)) and np.all(cc >= 0)), "c", c, "a finite cost ratio >= 0")
    return cc


def expected_tokens(alpha, k):
    """E = (1 - alpha^{k+1}) / (1 - alpha): expected tokens per round, iid acceptance (k + 1 at alpha = 1).

    Broadcasts over ``alpha`` and ``k``.
    """
    a, kk = _check_alpha(alpha), _check_k(k)
    a, kk = np.broadcast_arrays(a, kk)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = (1.0 - a ** (kk + 1)) / (1.0 - a)
    e = np.where(a >= 1.0, kk + 1.0, e)
    return e if e.ndim else float(e)


def analytic_speedup(alpha, c, k):
    """S = (1 - alpha^{k+1}) / ((1 - alpha)(k c + 1)) (Leviathan et al. 2023, Thm 3.8).  Broadcasts."""
    cc = _check_c(c)
    e = np.asarray(expected_tokens(alpha, k))
    kk = _check_k(k)
    s = e / (kk * cc + 1.0)
    return s if np.ndim(s) else float(s)


# -- acceptance metrics ---------------------------------------------------------------------------
@dataclass(frozen=True)
class AcceptanceMetrics:
    """The acceptance metrics of the module docstring; ``alpha_per_position`` is NaN where never judged."""

    k: int
    rounds: int
    accepted: int
    drafted: int
    acceptance_rate: float
    mean_acceptance_length: float
    alpha_hat: float
    alpha_per_position: list
    tokens_per_target_call: float


def acceptance_metrics(accepted_hist: Sequence[int], emitted: Optional[int] = None) -> AcceptanceMetrics:
    """Every acceptance metric of the module docstring from the histogram of n (rounds with n = 0..k accepted).

    ``emitted`` (tokens actually written, after truncation) gives tokens per target call; without it
    the untruncated E[n + 1] is used.
    """
    h = np.asarray(accepted_hist, dtype=np.float64)
    check_arg(h.ndim == 1 and h.size >= 2 and bool(np.all(h >= 0)) and h.sum() > 0, "accepted_hist", accepted_hist,
              "counts of rounds with n = 0..k accepted drafts (k >= 1, at least one round)")
    k = h.size - 1
    rounds = h.sum()
    n = np.arange(k + 1)
    accepted = float((h * n).sum())
    reached = np.array([h[i:].sum() for i in range(k)])  # position i+1 judged iff n >= i
    accepted_at = np.array([h[i + 1:].sum() for i in range(k)])
    with np.errstate(invalid="ignore", divide="ignore"):
        alpha_i = np.where(reached > 0, accepted_at / np.maximum(reached, 1), np.nan)
    return AcceptanceMetrics(
        k=k, rounds=int(rounds), accepted=int(accepted), drafted=int(rounds * k),
        acceptance_rate=accepted / (rounds * k),
        mean_acceptance_length=1.0 + accepted / rounds,
        alpha_hat=float(accepted_at.sum() / reached.sum()),
        alpha_per_position=alpha_i.tolist(),
        tokens_per_target_call=(float(emitted) / rounds) if emitted is not None else 1.0 + accepted / rounds)


# -- profiled per-call costs ----------------------------------------------------------------------
class CostTable:
    """Profiled per-call costs (seconds), looked up by operation, tokens n and batch B.

    Operations (``op``) used by the measured model:
        target.forward  (n tokens scored, B)     draft.forward  (n = 1 or 2, B)
        target.prefill  (n = prompt tokens fed)  draft.prefill
        target.rollback (n = tokens dropped)     draft.rollback
        spec.overhead   (n = k; per round)       ar.overhead    (n = 1; per token)
    Missing (n, B) points are interpolated linearly in n and in log B (extrapolated linearly in n
    from the two nearest points); a missing operation is an error naming it.
    """

    def __init__(self, frame: pd.DataFrame, value: str = "median_s"):
        need = {"op", "n", "batch", value}
        check_arg(isinstance(frame, pd.DataFrame) and need <= set(frame.columns), "frame",
                  list(frame.columns) if isinstance(frame, pd.DataFrame) else type(frame).__name__,
                  f"a DataFrame with columns {sorted(need)}")
        self.value = value
        g = frame.groupby(["op", "n", "batch"], as_index=False)[value].median()
        self._t = {(r.op, int(r.n), int(r.batch)): float(getattr(r, value)) for r in g.itertuples()}
        self.ops = sorted({o for o, _, _ in self._t})

    def _at_batch(self, op: str, n: int, B: int) -> float:
        if (op, n, B) in self._t:
            return self._t[(op, n, B)]
        ns = sorted(m for (o, m, b) in self._t if o == op and b == B)
        if len(ns) == 1:
            return self._t[(op, ns[0], B)]
        i = int(np.clip(np.searchsorted(ns, n), 1, len(ns) - 1))
        n0, n1 = ns[i - 1], ns[i]
        t0, t1 = self._t[(op, n0, B)], self._t[(op, n1, B)]
        return max(t0 + (t1 - t0) * (n - n0) / (n1 - n0), 0.0)

    def __call__(self, op: str, n: int, B: int) -> float:
        if op not in self.ops:
            raise KeyError(f"`op` {op!r} was not profiled; profiled operations: {self.ops}")
        bs = sorted({b for (o, _, b) in self._t if o == op})
        if B in bs:
            return self._at_batch(op, n, B)
        if len(bs) == 1:
            return self._at_batch(op, n, bs[0])
        i = int(np.clip(np.searchsorted(bs, B), 1, len(bs) - 1))
        b0, b1 = bs[i - 1], bs[i]
        t0, t1 = self._at_batch(op, n, b0), self._at_batch(op, n, b1)
        w = (math.log(B) - math.log(b0)) / (math.log(b1) - math.log(b0))
        return max(t0 + (t1 - t0) * w, 0.0)

    def get(self, op: str, n: int, B: int, default: float = 0.0) -> float:
        return self(op, n, B) if op in self.ops else default

    def c(self, B: int = 1) -> float:
        """Leviathan's c at batch B: one-token draft call over one-token target call."""
        return self("draft.forward", 1, B) / self("target.forward", 1, B)

    def round_cost(self, k: int, A: int) -> float:
        """Cost of one speculative round at active batch A (forwards, roll-backs, sampler overhead)."""
        t = self("draft.forward", 2, A) + (k - 1) * self("draft.forward", 1, A) + self("target.forward", k + 1, A)
        t += self.get("target.rollback", k, A) + self.get("draft.rollback", max(k - 1, 1), A)
        return t + self.get("spec.overhead", k, A)

    def token_cost_ar(self, B: int) -> float:
        """Cost of one target-only decoding step at batch B."""
        return self("target.forward", 1, B) + self.get("ar.overhead", 1, B)


# -- the round process ----------------------------------------------------------------------------
def conditional_alphas(accepted_hist: Sequence[int]) -> np.ndarray:
    """(k,) alpha_i = P(n >= i) / P(n >= i - 1) of the round law given by a histogram of n (rounds with
    n = 0..k accepted drafts); 0 past the deepest position ever reached.

    :func:`simulate_rounds` fed with these draws n with exactly the histogram's law, whatever verifier
    produced it (chain, block, a tree's accepted depth): every round emits n + 1 tokens.
    """
    m = acceptance_metrics(accepted_hist)
    return np.nan_to_num(np.asarray(m.alpha_per_position, dtype=np.float64), nan=0.0)


def simulate_rounds(alphas: Sequence[float], B: int, max_new_tokens: int, n_sim: int = 400,
                    rng: Optional[np.random.Generator] = None, compact_below: float = 0.5) -> np.ndarray:
    """Rounds spent at each active batch size, averaged over ``n_sim`` simulated runs: array (B + 1,).

    Mirrors :meth:`specimpl.speculative.SpeculativeSampler.generate` without EOS: each live sequence
    accepts n drafts with P(n >= j) = prod_{i<=j} alpha_i, writes min(n + 1, remaining) tokens, and
    finishes at max_new_tokens; finished sequences stay in the batch (costing a full row) until fewer
    than ``compact_below`` of the batch is alive, then the batch is compacted.  Entry A is the
    expected number of rounds run with A rows in the batch.
    """
    a = _check_alpha(alphas, "alphas")
    check_arg(a.ndim == 1 and a.size >= 1, "alphas", alphas, "a 1-D sequence of k >= 1 probabilities")
    check_arg(isinstance(B, (int, np.integer)) and B >= 1, "B", B, "an integer >= 1")
    check_arg(isinstance(max_new_tokens, (int, np.integer)) and max_new_tokens >= 1, "max_new_tokens",
              max_new_tokens, "an integer >= 1")
    rng = np.random.default_rng(0) if rng is None else rng
    k = a.size
    remaining = np.full((n_sim, B), max_new_tokens, dtype=np.int64)  # per sequence
    in_batch = np.ones((n_sim, B), dtype=bool)  # rows still in the batch (alive or not yet compacted)
    counts = np.zeros(B + 1)
    active = np.ones(n_sim, dtype=bool)  # simulations still running
    while active.any():
        A = in_batch.sum(1)  # (n_sim,)
        np.add.at(counts, A[active], 1.0)
        acc = rng.random((n_sim, B, k)) < a  # (n_sim, B, k)
        n = np.cumprod(acc, axis=2).sum(2)  # (n_sim, B)
        alive = (remaining > 0) & in_batch
        remaining = np.where(alive, remaining - np.minimum(n + 1, remaining), remaining)
        alive_after = (remaining > 0) & in_batch
        n_alive = alive_after.sum(1)
        active &= n_alive > 0
        compact = active & (n_alive < compact_below * A)
        in_batch = np.where(compact[:, None], alive_after, in_batch)
    return counts / n_sim


@dataclass(frozen=True)
class Prediction:
    """Predicted wall times of one speculative and one target-only call (seconds), and the rounds behind them
    (expected by the measured model, realised in the cost accounting)."""

    t_spec_s: float
    t_ar_s: float
    rounds: float

    @property
    def speedup(self) -> float:
        return self.t_ar_s / self.t_spec_s


def _prefill_costs(costs: CostTable, B: int, prompt_len: int) -> tuple[float, float]:
    """(target prefill, draft prefill) of B prompts of ``prompt_len`` tokens."""
    return costs("target.prefill", prompt_len - 1, B), costs("draft.prefill", prompt_len - 1, B)


def predict_run(round_s: Callable[[int], float], ar_step_s: float, prefill_s: tuple[float, float],
                rounds_at: np.ndarray, max_new_tokens: int) -> Prediction:
    """Expected wall times of one finite call of each kind, the round process given.

    ``rounds_at`` (:func:`simulate_rounds`) is the expected number of rounds run with A rows in the batch;
    ``round_s(A)`` the seconds of one round at active batch A (its draft calls, its verification, its
    roll-backs and the sampler's own work); ``ar_step_s`` one target-only step at the full batch;
    ``prefill_s`` = (target, draft) seconds of prefilling the prompts.  Both calls pay the target's prefill;
    the speculative one also the draft's, and its last round is cut at ``max_new_tokens`` (a sequence
    that needs 2 more tokens still pays a whole round).
    """
    pre_t, pre_d = (float(x) for x in prefill_s)
    t_spec = pre_t + pre_d + sum(r * round_s(A) for A, r in enumerate(rounds_at) if r > 0)
    return Prediction(t_spec, pre_t + max_new_tokens * ar_step_s, float(np.sum(rounds_at)))


def predict_measured(costs: CostTable, alphas: Sequence[float], B: int, max_new_tokens: int, prompt_len: int,
                     n_sim: int = 400, seed: int = 0) -> Prediction:
    """Measured model: expected wall times of the speculative and the target-only call, and S.

    ``alphas`` are the conditional per-position acceptances alpha_1..alpha_k (k = len(alphas)).
    """
    k = len(alphas)
    rounds_at = simulate_rounds(alphas, B, max_new_tokens, n_sim, np.random.default_rng(seed))
    return predict_run(lambda A: costs.round_cost(k, A), costs.token_cost_ar(B),
                       _prefill_costs(costs, B, prompt_len), rounds_at, max_new_tokens)


def predict_from_counts(costs: CostTable, k: int, round_batches: Sequence[int], B: int, max_new_tokens: int,
                        prompt_len: int) -> Prediction:
    """Cost accounting: the realised rounds of a run (active batch of each round) times profiled costs.

    Separates the error of the costs from the error of the acceptance model in :func:`predict_measured`.
    """
    pre_t, pre_d = _prefill_costs(costs, B, prompt_len)
    t_spec = pre_t + pre_d
    t_spec += sum(costs.round_cost(k, int(A)) for A in round_batches)
    t_ar = pre_t + max_new_tokens * costs.token_cost_ar(B)
    return Prediction(t_spec, t_ar, float(len(round_batches)))
