"""The whole-sequence log-likelihood test: no enumeration of sequences, any length, real models too.

n-gram laws (an exact law, :class:`harness.laws.ngram.ExactLaw`).  S = Σ_t log P(x_t | state_t) over a
whole N-symbol sequence (PAD after EOS adds log 1 = 0) has an exact mean μ, variance σ² and third
central moment under the target (:meth:`ExactLaw.logprob_moments`, dynamic programming on the chain).
Over n independent sequences of a sampler, :func:`loglik_test` tests Σ S against n μ:

* z = (Σ S − n μ) / (σ √n), two-sided normal p-value, where that is valid at the test's level: the
  one-term Edgeworth correction of the normal tail at the critical value z* is at most 10 % of it,
  |γ₁| z* (z*² − 1) / (6 √n) ≤ 0.1 with γ₁ = E(S − μ)³ / σ³ (asymptotic; the report says so);
* elsewhere (small n, skewed S) Bernstein's inequality with the exact variance and the exact range of
  S (exact at every n, conservative): P(|Σ (S − μ)| ≥ t) ≤ 2 exp(−t² / (2 (n σ² + b t / 3))), b the
  largest |S − μ| possible.

A sequence the target cannot produce (S = −∞) rejects outright.  Temperature, sharpening and softmax
bugs move E S (flatter output: lower log-likelihood; sharper: higher), whatever the order of token ids.

Real models (no exact law; :mod:`harness.verify.realmodel` scores each output with the target).  With p_t the
target's warped conditional at output position t, M = Σ_t [log p_t(x_t) + H(p_t)] is a martingale with
mean 0 under H0 and predictable variance V = Σ_t Var_{p_t}(log p_t), both from the same scoring pass.
:func:`martingale_test` pools the sequences: Σ M / √(Σ V) is standard normal under H0 (martingale CLT;
asymptotic), used where the sample skewness of the per-sequence M passes the same Edgeworth check; elsewhere
the Bercu–Touati mixture bound (:func:`mixture_pvalue`: exact at every n, with the squared increments
Q = Σ_t (log p_t(x_t) + H(p_t))² as well; conservative: with Q ≈ V it needs |z| ≈ 9 where the normal needs 5.4 at
the gate's level).

Each test returns a frozen :class:`LoglikResult`; the planners :func:`min_detectable_shift` and
:func:`n_for_shift` (normal), :func:`bernstein_min_detectable_shift` and :func:`bernstein_n_for_shift`
(Bernstein), :func:`mixture_min_detectable_shift` and :func:`mixture_n_for_shift` (mixture) state the
power in nats of mean log-likelihood per sequence.  :class:`LoglikSums` holds the
mergeable sufficient statistics of a run.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from specimpl.errors import check_arg
from harness.stats.search import smallest_n

__all__ = ["LoglikSums", "LoglikResult", "loglik_test", "martingale_test", "martingale_terms", "mixture_pvalue",
           "mixture_min_detectable_shift", "mixture_n_for_shift", "MIXTURE_SCALE", "min_detectable_shift",
           "n_for_shift",
           "bernstein_min_detectable_shift", "bernstein_n_for_shift", "edgeworth_ok", "EDGEWORTH_TOLERANCE"]

EDGEWORTH_TOLERANCE = 0.1  # largest relative Edgeworth correction of the normal tail at the critical value


@dataclass
class LoglikSums:
    """Sufficient statistics of the log-likelihood test over a run's sequences: ``n`` sequences, the sum
    and sum of squares of their finite S, and how many were ``impossible`` (S = −∞).  Mergeable."""

    n: int = 0
    total: float = 0.0
    total_sq: float = 0.0
    impossible: int = 0

    def add(self, logprobs) -> None:
        """Fold the per-sequence log-probabilities (B,) of one sampler call in (−∞: impossible)."""
        s = np.asarray(logprobs, dtype=np.float64).ravel()
        ok = np.isfinite(s)
        self.n += int(s.size)
        self.impossible += int(s.size - ok.sum())
        self.total += float(s[ok].sum())
        self.total_sq += float(np.dot(s[ok], s[ok]))

    def merge(self, other: "LoglikSums") -> "LoglikSums":
        """Add ``other``'s sequences to these (in place; returns self)."""
        self.n += other.n
        self.total += other.total
        self.total_sq += other.total_sq
        self.impossible += other.impossible
        return self


@dataclass(frozen=True)
class LoglikResult:
    """A log-likelihood test.  ``statistic`` is the standardized sum z; ``shift`` the observed minus the
    expected mean log-likelihood per sequence (nats; for the martingale: mean M per sequence);
    ``min_detectable_shift`` the |shift| detected with probability ``power`` at ``alpha``; ``sd`` the
    null standard deviation of one sequence's S (or √ of the mean V)."""

    statistic: float
    pvalue: float
    n: int
    expected: float
    observed: float
    shift: float
    sd: float
    min_detectable_shift: float
    impossible: int
    alpha: float
    power: float
    method: str


def _z2(alpha: float) -> float:
    return float(sps.norm.isf(alpha / 2))


def min_detectable_shift(n: int, sd: float, alpha: float, power: float) -> float:
    """|Mean shift| per sequence a two-sided level-``alpha`` z test on ``n`` sequences detects with
    probability ``power``: (z_{1−α/2} + z_power) sd / √n."""
    check_arg(n >= 0, "n", n, "an integer >= 0")
    if n == 0:
        return math.inf
    return (_z2(alpha) + float(sps.norm.isf(1 - power))) * sd / math.sqrt(n)


def n_for_shift(shift: float, sd: float, alpha: float, power: float) -> int:
    """Sequences the z test needs to detect a mean shift ``shift`` (inverse of :func:`min_detectable_shift`)."""
    check_arg(shift > 0, "shift", shift, "a number > 0")
    return max(1, math.ceil(((_z2(alpha) + float(sps.norm.isf(1 - power))) * sd / shift) ** 2 * (1 - 1e-12)))


def _bernstein_threshold(n: int, sd: float, b: float, alpha: float) -> float:
    """t with 2 exp(−t² / (2 (n sd² + b t / 3))) = alpha."""
    L = math.log(2 / alpha)
    return b * L / 3 + math.sqrt((b * L / 3) ** 2 + 2 * n * sd * sd * L)


def bernstein_min_detectable_shift(n: int, sd: float, b: float, alpha: float, power: float) -> float:
    """|Mean shift| per sequence the Bernstein test detects with probability ≈ ``power``: the sum must pass
    the threshold t_α, and a shifted sum falls z_power sd √n below its mean that often (normal
    approximation of the alternative): (t_α + z_power sd √n) / n."""
    if n == 0:
        return math.inf
    return (_bernstein_threshold(n, sd, b, alpha) + float(sps.norm.isf(1 - power)) * sd * math.sqrt(n)) / n


def bernstein_n_for_shift(shift: float, sd: float, b: float, alpha: float, power: float) -> int:
    """Sequences the Bernstein test needs for ``shift`` (inverse of :func:`bernstein_min_detectable_shift`)."""
    check_arg(shift > 0, "shift", shift, "a number > 0")
    return smallest_n(lambda n: bernstein_min_detectable_shift(n, sd, b, alpha, power) > shift, 1)


def edgeworth_ok(n: int, skewness: float, alpha: float) -> bool:
    """Whether the normal tail is within :data:`EDGEWORTH_TOLERANCE` (relative, one-term Edgeworth) of
    the standardized sum's tail at the two-sided level-``alpha`` critical value, for ``n`` iid terms of
    skewness ``skewness``."""
    z = _z2(alpha)
    return n >= 1 and abs(skewness) * z * (z * z - 1) / (6 * math.sqrt(n)) <= EDGEWORTH_TOLERANCE


def loglik_test(sums: LoglikSums, moments, *, alpha: float, power: float) -> LoglikResult:
    """Test that the mean of S over ``sums``'s sequences is the exact ``moments.mean``
    (:class:`harness.laws.ngram.LogprobMoments`): z test where :func:`edgeworth_ok`, else Bernstein."""
    n, mu, var = sums.n, moments.mean, moments.var
    sd = math.sqrt(var)
    obs = sums.total / n if n else math.nan
    if sums.impossible:
        return LoglikResult(math.inf, 0.0, n, mu, -math.inf, -math.inf, sd, 0.0, sums.impossible, alpha, power,
                            f"{sums.impossible} sequence(s) the target cannot produce")
    if n == 0:
        return LoglikResult(0.0, 1.0, 0, mu, math.nan, math.nan, sd, math.inf, 0, alpha, power, "no sequences")
    dev = sums.total - n * mu
    if var <= 1e-24:  # S is fixed under H0 (greedy, one-hot laws): any deviation is impossible
        bad = abs(dev) > 1e-9 * max(1.0, abs(mu)) * n
        return LoglikResult(math.inf if bad else 0.0, 0.0 if bad else 1.0, n, mu, obs, obs - mu, 0.0, 0.0, 0,
                            alpha, power, "S deterministic under H0: exact check")
    z = dev / (sd * math.sqrt(n))
    skew = moments.third / var ** 1.5
    if edgeworth_ok(n, skew, alpha):
        p = float(2 * sps.norm.sf(abs(z)))
        return LoglikResult(z, p, n, mu, obs, obs - mu, sd, min_detectable_shift(n, sd, alpha, power), 0, alpha,
                            power, f"z test, exact mean and variance (asymptotic; Edgeworth check at skewness "
                                   f"{skew:.3g} passed)")
    b = max(mu - moments.low, moments.high - mu)
    t = abs(dev)
    p = min(1.0, 2 * math.exp(-t * t / (2 * (n * var + b * t / 3))))
    return LoglikResult(z, p, n, mu, obs, obs - mu, sd, bernstein_min_detectable_shift(n, sd, b, alpha, power), 0,
                        alpha, power, f"Bernstein bound, exact variance and range (exact, conservative; normal "
                                      f"tail not trusted at skewness {skew:.3g}, n {n})")


MIXTURE_SCALE = 0.25  # c of the mixture bound, in nats² per scored token (fixed before any data is seen)


def mixture_pvalue(total: float, spread: float, c: float) -> float:
    """Bercu–Touati mixture bound: for a square-integrable martingale M with predictable variance ⟨M⟩ and
    squared increments [M], exp(t M − t² (⟨M⟩ + [M]) / 2) is a supermartingale for every t (from
    e^{x − x²/2} ≤ 1 + x + x²/2); mixing t over N(0, 1/c) and Markov's inequality give
    P(√(c / (c + Y)) exp(M² / (2 (c + Y))) ≥ 1/α) ≤ α with Y = ⟨M⟩ + [M] — valid at every n, with a
    data-dependent Y, no bound on the increments.  Returns that p-value for M = ``total``, Y = ``spread``."""
    y = c + spread
    return float(min(1.0, math.exp(0.5 * math.log(y / c) - total * total / (2 * y))))


def mixture_min_detectable_shift(n: int, spread: float, var: float, c: float, alpha: float, power: float) -> float:
    """|Mean M per sequence| the mixture bound rejects at ``alpha`` with probability ≈ ``power`` (normal
    approximation of the alternative's noise, Y held at ``spread``): (x_α + z_power √var) / n with
    x_α² = 2 (c + Y) (ln(1/α) + ½ ln((c + Y)/c))."""
    if n == 0:
        return math.inf
    y = c + spread
    x = math.sqrt(2 * y * (math.log(1 / alpha) + 0.5 * math.log(y / c)))
    return (x + float(sps.norm.isf(1 - power)) * math.sqrt(var)) / n


def mixture_n_for_shift(shift: float, spread_per_seq: float, var_per_seq: float, c_per_seq: float, alpha: float,
                        power: float) -> int:
    """Sequences the mixture bound needs for ``shift`` (inverse of :func:`mixture_min_detectable_shift`,
    with Y, ⟨M⟩ and c growing in proportion to the sequences)."""
    check_arg(shift > 0, "shift", shift, "a number > 0")

    def mde(k):
        return mixture_min_detectable_shift(k, k * spread_per_seq, k * var_per_seq, k * c_per_seq, alpha, power)
    return smallest_n(lambda n: mde(n) > shift, 1)


def martingale_test(m, v, q, *, tokens: int, alpha: float, power: float) -> LoglikResult:
    """Test that the per-sequence martingales ``m`` (n,) (M = Σ_t [log p_t(x_t) + H(p_t)]) have mean 0,
    with ``v`` (n,) their predictable variances Σ_t Var_{p_t}(log p_t) and ``q`` (n,) their squared
    increments Σ_t (log p_t(x_t) + H(p_t))²: Σ M / √(Σ V) against N(0, 1) where the sample skewness of
    the M passes :func:`edgeworth_ok` (asymptotic), else the exact mixture bound (:func:`mixture_pvalue`,
    c = :data:`MIXTURE_SCALE` per token of the ``tokens`` scored; conservative)."""
    m = np.asarray(m, dtype=np.float64).ravel()
    v = np.asarray(v, dtype=np.float64).ravel()
    q = np.asarray(q, dtype=np.float64).ravel()
    check_arg(isinstance(tokens, (int, np.integer)) and tokens >= 1, "tokens", tokens, "an integer >= 1")
    for name, x in (("v", v), ("q", q)):
        check_arg(x.shape == m.shape and m.size >= 1, name, f"array of shape {x.shape}",
                  f"one value per sequence, shape {m.shape}")
        check_arg(bool(np.all(np.isfinite(x) & (x >= 0))), name, "negative or non-finite values", "values >= 0")
    n = m.size
    bad = int((~np.isfinite(m)).sum())
    if bad:
        return LoglikResult(math.inf, 0.0, n, 0.0, -math.inf, -math.inf, math.nan, 0.0, bad, alpha, power,
                            f"{bad} sequence(s) with a token the target cannot produce")
    V = float(v.sum())
    sd = math.sqrt(V / n)
    if V <= 1e-24:
        dev = float(np.abs(m).max())
        return LoglikResult(math.inf if dev > 1e-9 else 0.0, 0.0 if dev > 1e-9 else 1.0, n, 0.0, float(m.mean()),
                            float(m.mean()), 0.0, 0.0, 0, alpha, power, "M deterministic under H0: exact check")
    z = float(m.sum()) / math.sqrt(V)
    skew = float(sps.skew(m)) if n >= 3 and float(m.std()) > 0 else math.inf
    if edgeworth_ok(n, skew, alpha):
        return LoglikResult(z, float(2 * sps.norm.sf(abs(z))), n, 0.0, float(m.mean()), float(m.mean()), sd,
                            min_detectable_shift(n, sd, alpha, power), 0, alpha, power,
                            f"martingale CLT, sum M / sqrt(sum V) (asymptotic; Edgeworth check at sample skewness "
                            f"{skew:.3g} passed)")
    Y = V + float(q.sum())
    c = MIXTURE_SCALE * tokens
    return LoglikResult(z, mixture_pvalue(float(m.sum()), Y, c), n, 0.0, float(m.mean()), float(m.mean()), sd,
                        mixture_min_detectable_shift(n, Y, V, c, alpha, power), 0, alpha, power,
                        f"Bercu-Touati mixture bound, c {c:.3g} (exact, conservative; normal tail not trusted at "
                        f"sample skewness {skew:.3g}, n {n})")


def martingale_terms(probs, tokens, pad_mask=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-sequence M = Σ_t [log p_t(x_t) + H(p_t)], V = Σ_t Var_{p_t}(log p_t) and Q = Σ_t (log p_t(x_t) +
    H(p_t))² (each (N,) float64)
    from the target's warped conditionals ``probs`` (N, T, V) at the emitted ``tokens`` (N, T); positions
    under ``pad_mask`` (N, T) (after EOS: the target's conditional is one-hot on PAD) add 0 to both.  A
    token of probability 0 makes M = −∞ (impossible under H0)."""
    import torch

    P = torch.as_tensor(probs).to(torch.float64)  # (N, T, V)
    X = torch.as_tensor(tokens, device=P.device).long()  # (N, T)
    check_arg(P.dim() == 3 and tuple(X.shape) == tuple(P.shape[:2]), "tokens", f"shape {tuple(X.shape)}",
              f"shape (N, T) of probs {tuple(P.shape)}")
    # log p floored at 1e-300: finite off the support, where its weight p = 0 zeroes every term below
    d = P.clamp_min(1e-300).log_()  # (N, T, V) log p
    H = -(P * d).sum(-1)  # (N, T) entropy of each conditional
    d.add_(H.unsqueeze(-1))  # (N, T, V) log p − E log p
    var = (P * d.square_()).sum(-1)  # (N, T)
    px = P.gather(-1, X.clamp(0, P.shape[-1] - 1).unsqueeze(-1)).squeeze(-1)  # (N, T) p_t(x_t)
    inc = torch.where(px > 0, px.clamp_min(1e-300).log() + H, torch.full_like(px, -math.inf))  # (N, T)
    if pad_mask is not None:
        mask = torch.as_tensor(pad_mask, device=P.device).bool()  # (N, T)
        inc, var = inc.masked_fill(mask, 0.0), var.masked_fill(mask, 0.0)
    sq = torch.where(torch.isfinite(inc), inc * inc, torch.zeros_like(inc))  # (N, T)
    return inc.sum(1).cpu().numpy(), var.sum(1).cpu().numpy(), sq.sum(1).cpu().numpy()
