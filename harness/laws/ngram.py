"""Exact laws of n-gram scenarios: what a lossless sampler's output must follow, and what the
reference speculative process's acceptance statistics must average to.

Notation (as in :mod:`specimpl.speculative`): p = warped target table, q = warped draft table, both
rewritten at one common order so they share the context ids c = 0..C-1; V tokens; k drafts a round;
N = max_new_tokens generated positions t = 0..N-1.

Output symbols.  Generated text is written over V + 1 symbols: the V tokens and PAD (symbol V),
which fills a sequence after EOS.  The target is extended to an absorbing chain with C + 1 states:
the C contexts ("alive") and a dead state D = C entered after EOS.  In an alive state the target's
conditional is p(.|c) on the tokens and 0 on PAD; in D it is one-hot on PAD.  With this convention
every sequence has exactly N symbols and, under H0, the randomized PITs of all N·B symbols are iid
U(0, 1) (Brockwell 2007): a PAD inside a live sequence gives U = 1, a token after EOS gives U = 0.

Acceptance law.  Acceptance is *not* iid across the positions of a round, and the context at the start
of a round is not distributed as the target's marginal at that position (rounds start after accepted
blocks, which favour contexts where p and q agree).  :meth:`ExactLaw.acceptance_law` therefore
propagates the exact joint law of (context at the round start, tokens emitted so far) through the
reference process — the round kernel itself is computed by propagating (current context, EOS seen)
through the k draft positions — and returns the expected per-sequence counts that
:class:`specimpl.speculative.SpecStats` records: rounds in which draft position i was judged / accepted
and rounds with n = 0..k accepted drafts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from specimpl.errors import check_arg
from specimpl.ngram import NGramModel, context_of, warped_table
from specimpl.sampling import SamplingConfig, warp

__all__ = ["ExactLaw", "AcceptanceLaw", "LogprobMoments", "warp_mismatch", "warp_support_mismatch"]


def warp_mismatch(model: NGramModel, config: SamplingConfig) -> float:
    """Largest TV over contexts between the warped table in the samplers' float32 and in float64.

    top-k / top-p / greedy on a table with (near-)ties can keep different tokens in float32 than in the
    exact float64 computation; a scenario must not sit on such a tie (its 'exact' law would be wrong)."""
    with np.errstate(divide="ignore"):
        p64 = warped_table(model, config)
    p32 = warp(model.logtable.to(torch.float32), config).double().numpy()
    return float(0.5 * np.abs(p64 - p32).sum(1).max())


def warp_support_mismatch(model: NGramModel, config: SamplingConfig) -> float:
    """Largest mass, over contexts and under either precision, on tokens that the float32 warp (the samplers')
    and the float64 one (the exact law) disagree about keeping: 0 when the supports match.  A top-k / top-p
    tie that flips in float32 keeps a token the exact law gives probability 0 -- every draw of it an
    "impossible draw" -- however small the TV between the two tables."""
    with np.errstate(divide="ignore"):
        p64 = warped_table(model, config)
    p32 = warp(model.logtable.to(torch.float32), config).double().numpy()
    differ = (p64 > 0) != (p32 > 0)
    return float(max((p64 * differ).sum(1).max(), (p32 * differ).sum(1).max()))


@dataclass(frozen=True)
class AcceptanceLaw:
    """Expected per-sequence instrumentation of the reference speculative process.

    reached (k,)      rounds in which draft position i (0-based) was judged
    accepted (k,)     rounds in which draft position i was accepted
    hist (k+1,)       rounds with n = 0..k accepted drafts (before EOS / length truncation)
    alpha (k,)        accepted / reached: the per-position acceptance the sampler must show
    rounds            expected rounds per sequence
    """

    reached: np.ndarray
    accepted: np.ndarray
    hist: np.ndarray
    alpha: np.ndarray
    rounds: float


@dataclass(frozen=True)
class LogprobMoments:
    """Exact law summary of a whole sequence's target log-probability S = Σ_t log P(x_t | state_t) over the
    N generated symbols (PAD after EOS contributes log 1 = 0), under the target.

    mean, var, third   E S, Var S and the third central moment E (S − E S)³
    low, high          the smallest and largest value S takes with positive probability
    """

    mean: float
    var: float
    third: float
    low: float
    high: float


class ExactLaw:
    """Exact target law of an n-gram scenario and exact quantities of the reference process.

    target, draft : NGramModel (same vocabulary); prompt : list of token ids; n_tokens : N;
    config : the shared sampling controls; eos_token_id : None or a token id.
    """

    def __init__(self, target: NGramModel, draft: Optional[NGramModel], prompt, n_tokens: int,
                 config: SamplingConfig = SamplingConfig(), eos_token_id: Optional[int] = None):
        check_arg(isinstance(n_tokens, int) and n_tokens >= 1, "n_tokens", n_tokens, "an integer >= 1")
        V = target.vocab_size
        if draft is not None and draft.vocab_size != V:
            raise ValueError(f"`draft` has vocabulary size {draft.vocab_size} but `target` has {V}")
        check_arg(eos_token_id is None or (isinstance(eos_token_id, int) and 0 <= eos_token_id < V),
                  "eos_token_id", eos_token_id, f"None or a token id in [0, {V})")
        order = max(target.order, draft.order if draft is not None else 1)
        t = target.as_order(order)
        self.target = t
        self.V, self.C, self.N, self.eos = V, t.n_contexts, n_tokens, eos_token_id
        self.config = config
        self.prompt = list(prompt)
        self.P = warped_table(t, config)  # (C, V)
        if draft is not None:
            d = draft.as_order(order)
            self.Q = warped_table(d, config)  # (C, V)
        else:
            self.Q = None
        C = self.C
        self.nxt = (np.arange(C)[:, None] * V + np.arange(V)[None, :]) % C if C > 1 else np.zeros((1, V), np.int64)
        self.start = context_of(t, self.prompt)
        # absorbing chain over C + 1 states and V + 1 symbols (PAD = V, dead = C)
        S, D, PAD = C + 1, C, V
        self.n_symbols = V + 1
        self.dead = D
        pmf = np.zeros((S, V + 1))
        pmf[:C, :V] = self.P
        pmf[D, PAD] = 1.0
        self.cond_pmf = pmf  # (S, V+1) target conditional given the state
        self.cond_cdf_below = np.cumsum(pmf, axis=1) - pmf  # (S, V+1) mass of symbols below
        step = np.full((S, V + 1), D, dtype=np.int64)
        step[:C, :V] = self.nxt
        if eos_token_id is not None:
            step[:C, eos_token_id] = D
        self.step = step  # (S, V+1) next state
        with np.errstate(divide="ignore"):
            self.log_pmf = np.log(pmf)  # (S, V+1), -inf where impossible

    # -- the target's law of the output ---------------------------------------------------------
    def state_distributions(self) -> np.ndarray:
        """(N, C+1) law of the chain's state before each generated position."""
        S = self.C + 1
        d = np.zeros(S)
        d[self.start] = 1.0
        out = np.empty((self.N, S))
        for t in range(self.N):
            out[t] = d
            d = np.bincount(self.step.ravel(), weights=(d[:, None] * self.cond_pmf).ravel(), minlength=S)
        return out

    def marginals(self) -> np.ndarray:
        """(N, V+1) exact law of the symbol at each generated position (PAD last)."""
        return self.state_distributions() @ self.cond_pmf

    def pair_marginals(self) -> np.ndarray:
        """(N-1, (V+1)^2) exact law of consecutive symbol pairs (x_t, x_t+1), flattened x_t*(V+1)+x_t+1."""
        W = self.n_symbols
        D = self.state_distributions()
        out = np.empty((max(self.N - 1, 0), W * W))
        for t in range(self.N - 1):
            first = D[t][:, None] * self.cond_pmf  # (S, W) mass of (state, x_t)
            second = self.cond_pmf[self.step]  # (S, W, W) law of x_t+1 given (state, x_t)
            out[t] = (first[:, :, None] * second).sum(0).ravel()
        return out

    def joint(self, n_first: int, max_cells: int = 1 << 20) -> np.ndarray:
        """((V+1)^J,) exact joint law of the first J = ``n_first`` symbols (row-major, x_0 slowest)."""
        W = self.n_symbols
        check_arg(isinstance(n_first, int) and 1 <= n_first <= self.N, "n_first", n_first,
                  f"an integer in [1, N = {self.N}]")
        check_arg(W ** n_first <= max_cells, "n_first", n_first, f"small enough that (V+1)^J <= {max_cells}")
        probs = np.array([1.0])
        state = np.array([self.start])
        for _ in range(n_first):
            probs = (probs[:, None] * self.cond_pmf[state]).ravel()
            state = self.step[state].ravel()
        return probs

    def joint_at(self, offset: int, n_tokens: int, max_cells: int = 1 << 20) -> np.ndarray:
        """((V+1)^J,) exact joint law of the J = ``n_tokens`` symbols at positions [offset, offset + J)
        (row-major, x_offset slowest): the chain's state law before ``offset`` pushed through J steps.
        ``joint_at(0, J)`` equals :meth:`joint` (J)."""
        W, S = self.n_symbols, self.C + 1
        check_arg(isinstance(offset, int) and 0 <= offset < self.N, "offset", offset,
                  f"an integer in [0, N = {self.N})")
        check_arg(isinstance(n_tokens, int) and 1 <= n_tokens <= self.N - offset, "n_tokens", n_tokens,
                  f"an integer in [1, N - offset = {self.N - offset}]")
        check_arg(W ** n_tokens <= max_cells, "n_tokens", n_tokens, f"small enough that (V+1)^J <= {max_cells}")
        mass = self.state_distributions()[offset][None, :]  # (paths, S) mass of (symbols so far, state)
        for _ in range(n_tokens):
            P = mass.shape[0]
            w = mass[:, :, None] * self.cond_pmf[None]  # (P, S, W) mass of (path, state, next symbol)
            dest = (np.arange(P)[:, None, None] * W + np.arange(W)[None, None, :]) * S + self.step[None]  # (P, S, W)
            mass = np.bincount(dest.ravel(), weights=w.ravel(), minlength=P * W * S).reshape(P * W, S)
        return mass.sum(1)

    def logprob_moments(self) -> LogprobMoments:
        """:class:`LogprobMoments` of S = Σ_t log P(x_t | state_t), exactly, by dynamic programming backwards
        over the chain: for the remaining sum R_t from state s, its conditional mean g_t(s), variance v_t(s)
        and third central moment k_t(s) follow from those at t + 1 (law of total variance / cumulance:
        with a = log p(x|s) + g_{t+1}(s'), v_t = Σ_x p [(a − g_t)² + v_{t+1}(s')], k_t = Σ_x p [(a − g_t)³
        + 3 (a − g_t) v_{t+1}(s') + k_{t+1}(s')]), and its range from min / max over possible symbols."""
        S = self.C + 1
        pmf = self.cond_pmf  # (S, W)
        possible = pmf > 0
        ell = np.where(possible, self.log_pmf, 0.0)  # (S, W) log p, 0 where impossible (weight 0 anyway)
        g, v, k3 = np.zeros(S), np.zeros(S), np.zeros(S)
        lo, hi = np.zeros(S), np.zeros(S)
        for _ in range(self.N):
            a = ell + g[self.step]  # (S, W) conditional mean of R_t given the next symbol
            g_new = (pmf * a).sum(1)  # (S,)
            d = a - g_new[:, None]  # (S, W)
            v_new = (pmf * (d * d + v[self.step])).sum(1)
            k_new = (pmf * (d ** 3 + 3 * d * v[self.step] + k3[self.step])).sum(1)
            lo_new = np.where(possible, ell + lo[self.step], np.inf).min(1)
            hi_new = np.where(possible, ell + hi[self.step], -np.inf).max(1)
            g, v, k3, lo, hi = g_new, v_new, k_new, lo_new, hi_new
        s0 = self.start
        return LogprobMoments(float(g[s0]), float(max(v[s0], 0.0)), float(k3[s0]), float(lo[s0]), float(hi[s0]))

    # -- per-sample quantities -------------------------------------------------------------------
    def symbols(self, tokens) -> np.ndarray:
        """tokens (B, N) int with PAD = -1 -> symbols (B, N) int64 in [0, V] (PAD = V)."""
        x = np.asarray(tokens.cpu().numpy() if torch.is_tensor(tokens) else tokens)
        check_arg(x.ndim == 2 and x.shape[1] == self.N, "tokens", f"array of shape {x.shape}",
                  f"shape (B, max_new_tokens = {self.N})")
        if x.size and (x.min() < -1 or x.max() >= self.V):
            bad = (x < -1) | (x >= self.V)
            check_arg(False, "tokens", f"ids like {x[bad][:3].tolist()}", f"ids in [0, {self.V}) or PAD = -1")
        return np.where(x < 0, self.V, x).astype(np.int64, copy=False)  # -1 -> V (ids checked above)

    def states(self, sym: np.ndarray) -> np.ndarray:
        """symbols (B, N) -> (B, N) chain state before each position."""
        B = sym.shape[0]
        W = self.n_symbols
        step = self.step.ravel()
        s = np.empty(sym.shape, dtype=np.int64)
        cur = np.full(B, self.start, dtype=np.int64)
        for t in range(self.N):
            s[:, t] = cur
            cur = step[cur * W + sym[:, t]]
        return s

    def pit(self, sym: np.ndarray, states: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Randomized PIT U = F(x-1 | state) + v p(x | state) (B, N); iid U(0,1) under H0."""
        idx = states * self.n_symbols + sym
        u = np.take(self.cond_cdf_below.ravel(), idx) + v * np.take(self.cond_pmf.ravel(), idx)
        return np.clip(u, 0.0, 1.0, out=u)

    def logprob(self, sym: np.ndarray, states: np.ndarray) -> np.ndarray:
        """(B,) target log-probability of each sequence (-inf when the target cannot produce it)."""
        return np.take(self.log_pmf.ravel(), states * self.n_symbols + sym).sum(1)

    # -- the reference speculative process -------------------------------------------------------
    def round_kernel(self, k: int):
        """Law of one round from each start context.

        Returns (out, reach, acc): out (C, k+1, C, 2) probability of (n accepted, context after the
        round, EOS among the emitted tokens); reach (C, k), acc (C, k) probability that draft position i
        is judged / accepted."""
        check_arg(self.Q is not None, "draft", None, "a draft model (this ExactLaw was built without one)")
        check_arg(isinstance(k, int) and k >= 1, "k", k, "an integer >= 1")
        C, V = self.C, self.V
        A = np.minimum(self.P, self.Q)  # (C, V) accept mass of each drafted token
        beta = A.sum(1)  # (C,)
        R = np.clip(self.P - self.Q, 0.0, None)  # (C, V) unnormalised residual: P(reject, y) mass
        eos = np.zeros(V, dtype=np.int64)
        if self.eos is not None:
            eos[self.eos] = 1
        flag_next = np.maximum(np.arange(2)[:, None], eos[None, :])  # (2, V) EOS flag after token
        out = np.zeros((C, k + 1, C, 2))
        reach = np.zeros((C, k))
        acc = np.zeros((C, k))
        w = np.zeros((C, C, 2))  # (start, current context, EOS seen) mass with all drafts so far accepted
        w[np.arange(C), np.arange(C), 0] = 1.0
        # flat destination index of (current c, flag f, token x) -> (nxt[c, x], flag_next[f, x])
        dest = (self.nxt[:, None, :] * 2 + flag_next[None, :, :])  # (C, 2, V)

        def push(mass_cfx):  # (C0, C, 2, V) -> (C0, C*2) by destination
            flat = mass_cfx.reshape(C, -1)
            res = np.zeros((C, 2 * C))
            for s in range(C):
                res[s] = np.bincount(dest.ravel(), weights=flat[s], minlength=2 * C)
            return res.reshape(C, C, 2)

        for i in range(k):
            reach[:, i] = w.sum((1, 2))
            acc[:, i] = (w.sum(2) * beta[None, :]).sum(1)
            out[:, i] += push(w[:, :, :, None] * R[None, :, None, :])
            w = push(w[:, :, :, None] * A[None, :, None, :])
        out[:, k] += push(w[:, :, :, None] * self.P[None, :, None, :])
        return out, reach, acc

    def acceptance_law(self, k: int) -> AcceptanceLaw:
        """Expected per-sequence SpecStats counts of the reference sampler (see module docstring)."""
        out, reach, acc = self.round_kernel(k)
        N, C = self.N, self.C
        alive = np.zeros((N, C))  # mass of sequences alive with m emitted tokens at a round start
        alive[0, self.start] = 1.0
        hist_c = out.sum((2, 3))  # (C, k+1)
        cont = out[:, :, :, 0]  # (C, k+1, C) outcomes without EOS
        E_reach, E_acc, E_hist = np.zeros(k), np.zeros(k), np.zeros(k + 1)
        for m in range(N):
            d = alive[m]
            if not d.any():
                continue
            E_reach += d @ reach
            E_acc += d @ acc
            E_hist += d @ hist_c
            for n in range(k + 1):
                m2 = m + n + 1
                if m2 < N:
                    alive[m2] += d @ cont[:, n, :]
        alpha = np.divide(E_acc, E_reach, out=np.zeros(k), where=E_reach > 0)
        return AcceptanceLaw(E_reach, E_acc, E_hist, alpha, float(alive.sum()))
