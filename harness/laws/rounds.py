"""Exact efficiency laws of block verification and token-tree verification on n-gram pairs.

Notation as in :mod:`specimpl.block` and :mod:`specimpl.tree`: P, Q the warped target and draft tables
at one common order (contexts c = 0..C-1, ``nxt[c, x]`` the context after token x), k drafts, D the
depth of a tree, n the drafts accepted in a round (0..k or 0..D), EOS as in :mod:`harness.laws.ngram`.

A *round law* is an array ``out`` (C, D+1, C, 2): from the context c after the round's pending token,
the probability that the round accepts n drafts, ends in context c' (after its final token) and emits
an EOS among its tokens (flag 1).  It is computed exactly:

* block verification by enumerating the V^k draft blocks from every context: given the block, the
  stop probabilities h_i are deterministic, P(tau = i) = h_i prod_{j>i} (1 - h_j), and the final token
  follows the residual at tau (:func:`block_round_law`);
* tree verification by recursion over the tree from the leaves up: with replacement the residual after
  s rejections at a node does not depend on the rejected tokens, so one pass over the children per node
  covers all contexts at once; without replacement the sibling law depends on the rejected tokens and
  the recursion enumerates the sequences of rejected tokens (V^(children) per node and context)
  (:func:`tree_round_law`).  One chain with replacement is the token-level rule.

:func:`acceptance_law` propagates a round law over a generation of N tokens exactly as
:meth:`harness.laws.ngram.ExactLaw.acceptance_law` does for the reference sampler, giving the expected
per-sequence :class:`specimpl.speculative.SpecStats` counts; :class:`ExactRounds` ties it to a pair of
n-gram models.  Everything is float64 numpy.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Optional

import numpy as np

from harness.laws.ngram import AcceptanceLaw
from specimpl.errors import check_arg
from specimpl.ngram import NGramModel, context_of, warped_table
from specimpl.sampling import SamplingConfig
from specimpl.tree import TokenTree, as_token_tree

__all__ = ["RoundLaw", "pair_tables", "block_round_law", "tree_round_law", "acceptance_law", "ExactRounds",
           "MeanTest", "accepted_mean_test"]


@dataclass(frozen=True)
class RoundLaw:
    """out (C, D+1, C, 2): P(n accepted, context after the round, EOS emitted | start context)."""

    out: np.ndarray
    name: str = ""

    @property
    def depth(self) -> int:
        return self.out.shape[1] - 1

    def hist(self, start: int) -> np.ndarray:
        """(D+1,) law of the accepted drafts of one round from context ``start``."""
        return self.out[start].sum((1, 2))

    def mean_accepted(self, start: int) -> float:
        """E[n] of one round from ``start`` (accepted drafts; the round emits n + 1 tokens)."""
        h = self.hist(start)
        return float(h @ np.arange(h.size))

    def reach(self, start: int) -> np.ndarray:
        """(D,) P(n >= i + 1): per-depth acceptance probability of one round from ``start``."""
        return np.cumsum(self.hist(start)[::-1])[::-1][1:]


def pair_tables(target: NGramModel, draft: NGramModel, config: SamplingConfig = SamplingConfig()):
    """P, Q (C, V) warped tables at the common order and nxt (C, V)."""
    if target.vocab_size != draft.vocab_size:
        raise ValueError(f"`draft` has vocabulary size {draft.vocab_size} but `target` has {target.vocab_size}")
    order = max(target.order, draft.order)
    t, d = target.as_order(order), draft.as_order(order)
    P, Q = warped_table(t, config), warped_table(d, config)
    C, V = P.shape
    nxt = (np.arange(C)[:, None] * V + np.arange(V)[None, :]) % C if C > 1 else np.zeros((1, V), np.int64)
    return P, Q, nxt


def _eos_vec(V: int, eos: Optional[int]) -> np.ndarray:
    e = np.zeros(V, dtype=np.int64)
    if eos is not None:
        e[eos] = 1
    return e


def _residual(r_unnorm: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """Row-normalised max(0, .) with ``fallback`` rows where the mass vanishes."""
    r = np.clip(r_unnorm, 0.0, None)
    z = r.sum(-1, keepdims=True)
    return np.where(z > 0, r / np.where(z > 0, z, 1.0), fallback)


# ------------------------------------------------------------------------------------ block
def block_round_law(P: np.ndarray, Q: np.ndarray, nxt: np.ndarray, k: int, eos: Optional[int] = None) -> RoundLaw:
    """Exact round law of block verification with k drafts (enumeration of the V^k blocks)."""
    check_arg(isinstance(k, int) and k >= 1, "k", k, "an integer >= 1")
    C, V = P.shape
    check_arg(V ** k * C <= 4_000_000, "k", k, f"small enough that C V^k = {C}*{V}^{k} <= 4e6")
    e = _eos_vec(V, eos)
    X = np.array(list(itertools.product(range(V), repeat=k)), dtype=np.int64).reshape(-1, k)  # (M, k)
    M = X.shape[0]
    ctx = np.empty((C, M, k + 1), dtype=np.int64)  # context before x_1..x_k and after x_k
    ctx[:, :, 0] = np.arange(C)[:, None]
    for i in range(k):
        ctx[:, :, i + 1] = nxt[ctx[:, :, i], X[None, :, i]]
    px = P[ctx[:, :, :k], X[None]]  # (C, M, k) p_i(x_i)
    qx = Q[ctx[:, :, :k], X[None]]  # (C, M, k)
    prob = qx.prod(-1)  # (C, M) probability of the block
    w = np.empty_like(px)  # (C, M, k) w_1..w_k
    acc = np.ones((C, M))
    for i in range(k):  # w_i = min(1, w_{i-1} p_i / q_i)
        acc = np.minimum(1.0, acc * np.divide(px[..., i], qx[..., i], out=np.zeros_like(acc), where=qx[..., i] > 0))
        w[..., i] = acc
    h = np.empty((C, M, k))
    for i in range(k - 1):  # h_i = R_i / (R_i + 1 - w_i)
        R = np.clip(w[..., i, None] * P[ctx[:, :, i + 1]] - Q[ctx[:, :, i + 1]], 0.0, None).sum(-1)
        den = R + 1.0 - w[..., i]
        h[..., i] = np.where(den > 0, R / np.where(den > 0, den, 1.0), 1.0)
    h[..., k - 1] = w[..., k - 1]
    later_fail = np.concatenate([np.cumprod((1 - h)[..., ::-1], -1)[..., ::-1][..., 1:], np.ones((C, M, 1))], -1)
    p_tau = np.concatenate([np.prod(1 - h, -1, keepdims=True), h * later_fail], -1)  # (C, M, k+1)
    flag_x = np.concatenate([np.zeros((M, 1), np.int64), np.maximum.accumulate(e[X], axis=1)], 1)  # (M, k+1)
    out = np.zeros(C * (k + 1) * C * 2)
    cs = np.arange(C)[:, None, None]
    for i in range(k + 1):
        c_i = ctx[:, :, i]  # (C, M) context after x_i
        w_i = np.ones((C, M)) if i == 0 else w[..., i - 1]
        ylaw = P[c_i] if i == k else _residual(w_i[..., None] * P[c_i] - Q[c_i], P[c_i])  # (C, M, V)
        mass = (prob * p_tau[..., i])[..., None] * ylaw  # (C, M, V)
        flag = np.maximum(flag_x[None, :, i, None], e[None, None, :])  # (1, M, V)
        dest = ((cs * (k + 1) + i) * C + nxt[c_i[..., None], np.arange(V)]) * 2 + flag  # (C, M, V)
        out += np.bincount(dest.ravel(), weights=mass.ravel(), minlength=out.size)
    return RoundLaw(out.reshape(C, k + 1, C, 2), name=f"block(k={k})")


# ------------------------------------------------------------------------------------- trees
def _shape_key(tree: TokenTree, ext: int):
    """Canonical nested tuple of the subtree below ext node ``ext`` (children in order)."""
    kids = [int(c) for c in tree.children_table[ext] if c >= 0]
    return tuple(_shape_key(tree, c) for c in kids)


def _height(shape) -> int:
    return 0 if not shape else 1 + max(_height(s) for s in shape)


class _TreeLaw:
    """Recursion of :func:`tree_round_law` over subtree shapes (memoised)."""

    def __init__(self, P, Q, nxt, eos, replacement):
        self.P, self.Q, self.nxt, self.e, self.rep = P, Q, nxt, _eos_vec(P.shape[1], eos), replacement
        self.C, self.V = P.shape
        self.memo = {}

    def child_outcomes(self, shape) -> np.ndarray:
        """(C, V, h+2, C, 2): outcome law when token x is accepted from context c into a child of
        ``shape`` (one more accepted draft; EOS flag set when x is EOS)."""
        G = self.law(shape)[self.nxt]  # (C, V, h+1, C, 2) the child's law from context nxt[c, x]
        G = G.copy()
        if self.e.any():
            x = int(self.e.argmax())
            G[:, x, :, :, 1] += G[:, x, :, :, 0]
            G[:, x, :, :, 0] = 0.0
        return np.concatenate([np.zeros(G.shape[:2] + (1,) + G.shape[3:]), G], 2)

    def final(self, r: np.ndarray) -> np.ndarray:
        """(C, C, 2) law of (context, flag) after the final token y ~ r[c] (C, V)."""
        C, V = r.shape
        dest = self.nxt * 2 + self.e[None, :]  # (C, V)
        out = np.zeros((C, 2 * C))
        for c in range(C):
            out[c] = np.bincount(dest[c], weights=r[c], minlength=2 * C)
        return out.reshape(C, C, 2)

    def law(self, shape) -> np.ndarray:
        if shape not in self.memo:
            self.memo[shape] = self._law_rep(shape) if self.rep else self._law_wor(shape)
        return self.memo[shape]

    def _law_rep(self, shape) -> np.ndarray:
        """With replacement: the residual after s rejections is the same whichever tokens were rejected."""
        P, Q, C = self.P, self.Q, self.C
        out = np.zeros((C, _height(shape) + 1, C, 2))
        r, mass = P.copy(), np.ones(C)
        for child in shape:
            a = mass[:, None] * np.minimum(Q, r)  # (C, V) accept x at this child
            Gc = self.child_outcomes(child)  # (C, V, h_c+2, C, 2)
            out[:, :Gc.shape[2]] += np.einsum("cx,cxnkf->cnkf", a, Gc)
            mass = mass * np.clip(1.0 - np.minimum(Q, r).sum(1), 0.0, None)
            r = _residual(r - Q, r)
        out[:, 0] += mass[:, None, None] * self.final(r)
        return out

    def _law_wor(self, shape) -> np.ndarray:
        """Without replacement: enumerate the sequences of rejected tokens at this node, per context."""
        C = self.C
        out = np.zeros((C, _height(shape) + 1, C, 2))
        Gs = [self.child_outcomes(child) for child in shape]
        for c in range(C):
            self._siblings(c, 0, self.P[c], self.Q[c], 1.0, Gs, out[c])
        return out

    def _siblings(self, c, s, r, qs, mass, Gs, out_c):
        """Add to out_c (h+1, C, 2) the outcomes from sibling s on, with residual r and sibling law qs."""
        if s == len(Gs) or qs.sum() <= 0:
            dest = self.nxt[c] * 2 + self.e  # (V,)
            out_c[0] += mass * np.bincount(dest, weights=r, minlength=2 * self.C).reshape(self.C, 2)
            return
        a = mass * np.minimum(qs, r)  # (V,)
        G = Gs[s][c]  # (V, h_s+2, C, 2)
        out_c[:G.shape[1]] += np.tensordot(a, G, axes=(0, 0))
        r_next = _residual((r - qs)[None], r[None])[0]
        for x in np.nonzero(qs > r)[0]:
            q_ex = qs.copy()
            q_ex[x] = 0.0
            z = q_ex.sum()
            self._siblings(c, s + 1, r_next, q_ex / z if z > 0 else q_ex, mass * (qs[x] - r[x]), Gs, out_c)


def tree_round_law(P: np.ndarray, Q: np.ndarray, nxt: np.ndarray, tree: TokenTree, replacement: bool = True,
                   eos: Optional[int] = None) -> RoundLaw:
    """Exact round law of recursive rejection sampling over ``tree`` (children iid, or without
    replacement)."""
    check_arg(isinstance(tree, TokenTree), "tree", type(tree).__name__, "a specimpl.tree.TokenTree")
    rec = _TreeLaw(P, Q, nxt, eos, replacement)
    out = rec.law(_shape_key(tree, 0))
    kind = "tree" if replacement else "tree-wor"
    return RoundLaw(out, name=f"{kind}(parents={list(tree.parents)})")


# ------------------------------------------------------------------------- over a generation
def acceptance_law(law: RoundLaw, start: int, n_tokens: int) -> AcceptanceLaw:
    """Expected per-sequence SpecStats counts over a generation of ``n_tokens`` tokens from context
    ``start``: rounds are started while fewer than N tokens were emitted and no EOS was; ``reached`` /
    ``accepted`` are derived from the histogram as the samplers record them (depth i judged iff n >= i)."""
    out = law.out
    C, D1 = out.shape[0], out.shape[1]
    N = n_tokens
    alive = np.zeros((N, C))  # mass alive with m tokens emitted at a round start
    alive[0, start] = 1.0
    hist_c = out.sum((2, 3))  # (C, D+1)
    cont = out[:, :, :, 0]  # (C, D+1, C) rounds without EOS
    E_hist = np.zeros(D1)
    for m in range(N):
        d = alive[m]
        if not d.any():
            continue
        E_hist += d @ hist_c
        for n in range(D1):
            if m + n + 1 < N:
                alive[m + n + 1] += d @ cont[:, n, :]
    tail = np.cumsum(E_hist[::-1])[::-1]
    reached, accepted = tail[:D1 - 1], tail[1:]
    alpha = np.divide(accepted, reached, out=np.zeros(D1 - 1), where=reached > 0)
    return AcceptanceLaw(reached, accepted, E_hist, alpha, float(alive.sum()))


class ExactRounds:
    """Exact round laws of an n-gram (target, draft) pair under ``config``, from the context after
    ``prompt``, over generations of ``n_tokens`` tokens (EOS ``eos_token_id`` ends a sequence)."""

    def __init__(self, target: NGramModel, draft: NGramModel, prompt, n_tokens: int,
                 config: SamplingConfig = SamplingConfig(), eos_token_id: Optional[int] = None):
        check_arg(isinstance(n_tokens, int) and n_tokens >= 1, "n_tokens", n_tokens, "an integer >= 1")
        self.P, self.Q, self.nxt = pair_tables(target, draft, config)
        V = self.P.shape[1]
        check_arg(eos_token_id is None or (isinstance(eos_token_id, int) and 0 <= eos_token_id < V),
                  "eos_token_id", eos_token_id, f"None or a token id in [0, {V})")
        order = max(target.order, draft.order)
        self.start = context_of(target.as_order(order), list(prompt))
        self.n_tokens, self.eos = n_tokens, eos_token_id

    @classmethod
    def from_law(cls, law) -> "ExactRounds":
        """The round laws of the scenario whose :class:`harness.laws.ngram.ExactLaw` is ``law``: its warped
        tables, start context, length and EOS, reused as they are (nothing recomputed)."""
        check_arg(all(hasattr(law, a) for a in ("P", "Q", "nxt", "start", "N", "eos")) and law.Q is not None,
                  "law", type(law).__name__, "a harness.laws.ngram.ExactLaw with a draft")
        self = cls.__new__(cls)
        self.P, self.Q, self.nxt = law.P, law.Q, law.nxt
        self.start, self.n_tokens, self.eos = law.start, law.N, law.eos
        return self

    def chain(self, k: int) -> RoundLaw:
        """Token-level verification (the reference sampler): one chain, with replacement."""
        law = tree_round_law(self.P, self.Q, self.nxt, TokenTree.chains(1, k), True, self.eos)
        return RoundLaw(law.out, name=f"chain(k={k})")

    def block(self, k: int) -> RoundLaw:
        return block_round_law(self.P, self.Q, self.nxt, k, self.eos)

    def tree(self, k: int, tree=None, n_drafts: int = 2, replacement: bool = True) -> RoundLaw:
        """The tree a :class:`specimpl.tree.TreeSampler` with these arguments uses."""
        return tree_round_law(self.P, self.Q, self.nxt, as_token_tree(tree, k, n_drafts), replacement, self.eos)

    def acceptance(self, law: RoundLaw) -> AcceptanceLaw:
        return acceptance_law(law, self.start, self.n_tokens)


# ------------------------------------------------------------------ measured against exact
@dataclass(frozen=True)
class MeanTest:
    """z test of the mean accepted drafts per round against the exact law (normal approximation, the
    exact variance under H0): ``min_detectable`` is the |shift| detected with probability ``power``."""

    mean: float
    expected: float
    z: float
    pvalue: float
    rounds: int
    min_detectable: float
    alpha: float
    power: float


def accepted_mean_test(hist_counts, probs, *, alpha: float = 1e-6, power: float = 0.99) -> MeanTest:
    """``hist_counts`` (D+1,) rounds with n = 0..D accepted (iid rounds, e.g. one per sequence from one
    context); ``probs`` (D+1,) their exact law (:meth:`RoundLaw.hist`)."""
    from scipy import stats

    c = np.asarray(hist_counts, dtype=np.float64)
    pr = np.asarray(probs, dtype=np.float64)
    check_arg(c.ndim == 1 and c.shape == pr.shape and c.sum() >= 2, "hist_counts", c.shape,
              f"a histogram of shape {pr.shape} with at least 2 rounds")
    check_arg(0 < alpha < 1 and 0 < power < 1, "alpha", (alpha, power), "alpha and power in (0, 1)")
    n_vals = np.arange(c.size)
    n = int(c.sum())
    mean, mu = float(c @ n_vals / n), float(pr @ n_vals)
    sd = float(np.sqrt(max(pr @ n_vals ** 2 - mu ** 2, 0.0)))
    se = sd / np.sqrt(n)
    z = (mean - mu) / se if se > 0 else (0.0 if mean == mu else np.inf)
    p = float(2 * stats.norm.sf(abs(z)))
    mdd = float((stats.norm.isf(alpha / 2) + stats.norm.isf(1 - power)) * se)
    return MeanTest(mean, mu, float(z), p, n, mdd, alpha, power)
