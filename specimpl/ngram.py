"""Tabular n-gram models: explicit probability tables, fully vectorised, exact quantities.

An order-n model over V tokens is a table P (V^(n-1), V): row ``c`` is the next-token
distribution after the context c = x_{t-n+1} V^{n-2} + ... + x_{t-1} (positions before the
start of a sequence read as token 0).  Because every distribution is explicit, the exact target
law of generated text is computable: the joint over the first N tokens (when V^N is small), the
per-position marginals, and the per-position acceptance alpha_t = E[sum_x min(p_t(x), q_t(x))].

Draft constructors place a draft at a controlled distance from a target, so alpha can be dialled
from ~0 to 1:  :func:`noisy_draft` (mixture with a noise table), :func:`tempered_draft`
(temperature perturbation), :func:`disjoint_draft` (support disjoint from the target's).

The samplers' lookup-table loops for these models (and their tables) live in :mod:`specimpl.tabular`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from specimpl.errors import check_arg
from specimpl.model import LanguageModel, ModelState, Prompts, as_prompt_list, check_prompt_tensor
from specimpl.sampling import SamplingConfig, warp

__all__ = [
    "NGramModel", "NGramState", "random_ngram", "noisy_draft", "tempered_draft", "disjoint_draft",
    "warped_table", "context_of", "exact_joint", "exact_marginals", "exact_acceptance",
    "context_distributions",
]


@dataclass
class NGramState(ModelState):
    buffer: torch.Tensor  # (B, pad + L) token history, left-padded with n-1 zeros


class NGramModel(LanguageModel):
    """Order-n tabular language model.  ``table`` (V^(n-1), V) rows are probability vectors."""

    def __init__(self, table, order: int, name: str = "ngram", dtype=torch.float32, max_length: int = 4096):
        check_arg(isinstance(order, int) and order >= 1, "order", order, "an integer >= 1")
        t = torch.as_tensor(np.asarray(table, dtype=np.float64))
        check_arg(t.dim() == 2, "table", f"array of shape {tuple(t.shape)}", "a 2-D array (V^(order-1), V)")
        V = t.shape[1]
        check_arg(t.shape[0] == V ** (order - 1), "table",
                  f"array of shape {tuple(t.shape)}", f"shape ({V}^{order - 1}, {V}) = ({V ** (order - 1)}, {V})")
        check_arg(bool(torch.isfinite(t).all()) and bool((t >= 0).all()), "table", "entries with NaN/inf/negatives",
                  "finite probabilities >= 0")
        sums = t.sum(1)
        check_arg(bool(((sums - 1).abs() < 1e-6).all()), "table",
                  f"rows summing to {sums.min().item():.6g}..{sums.max().item():.6g}", "rows that sum to 1")
        self.table64 = t / sums[:, None]  # (C, V) float64, exact reference
        self.order = order
        self.vocab_size = V
        self.n_contexts = V ** (order - 1)
        self.name = name
        self.dtype = dtype
        self.max_length = max_length
        with np.errstate(divide="ignore"):
            self.logtable = torch.log(self.table64).to(dtype)  # (C, V), -inf where p = 0
        self._pow = torch.tensor([V ** (order - 2 - j) for j in range(order - 1)], dtype=torch.long)  # (n-1,)

    # -- the model interface -------------------------------------------------------------------
    def prefill(self, prompts: Prompts) -> NGramState:
        V, pad = self.vocab_size, self.order - 1
        tok_dtype = torch.int16 if V <= 32767 else torch.int32
        if torch.is_tensor(prompts):  # (B, P): vectorised, no Python loop over B
            pt = check_prompt_tensor(prompts, V)
            B, P = pt.shape
            buf = torch.zeros(B, pad + P + 64, dtype=tok_dtype)
            buf[:, pad:pad + P - 1] = pt[:, :-1].to(tok_dtype)
            lengths = torch.full((B,), P - 1, dtype=torch.long)
            return NGramState(lengths=lengths, buffer=buf)
        plist = as_prompt_list(prompts, V)
        B = len(plist)
        L = max(len(p) for p in plist)
        buf = torch.zeros(B, pad + L + 64, dtype=tok_dtype)
        for i, p in enumerate(plist):
            buf[i, pad:pad + len(p) - 1] = torch.tensor(p[:-1], dtype=tok_dtype)
        lengths = torch.tensor([len(p) - 1 for p in plist], dtype=torch.long)
        return NGramState(lengths=lengths, buffer=buf)

    def forward(self, state: NGramState, tokens: torch.Tensor, n_new: Optional[torch.Tensor] = None) -> torch.Tensor:
        B, T = tokens.shape
        pad = self.order - 1
        need = int(state.lengths.max()) + T
        check_arg(need <= self.max_length, "tokens", f"{T} more tokens on a sequence of length {need - T}",
                  f"at most max_length={self.max_length} tokens per sequence")
        if pad + need > state.buffer.shape[1]:
            grow = max(pad + need - state.buffer.shape[1], state.buffer.shape[1])
            state.buffer = torch.cat([state.buffer, state.buffer.new_zeros(B, grow)], dim=1)
        pos = pad + state.lengths.unsqueeze(1) + torch.arange(T)  # (B, T) buffer slot of each new token
        # Entries past n_new are written too; they lie beyond the new length, so they are never read
        # as context and are overwritten by the next forward.
        state.buffer.scatter_(1, pos, tokens.to(state.buffer.dtype))
        ctx = self._contexts(state.buffer, pos)  # (B, T)
        state.lengths = state.lengths + (T if n_new is None else n_new)
        return self.logtable.index_select(0, ctx.view(-1)).view(B, T, self.vocab_size)  # (B, T, V)

    def rollback(self, state: NGramState, lengths: torch.Tensor) -> None:
        state.lengths = torch.minimum(state.lengths, lengths)

    def select(self, state: NGramState, index: torch.Tensor) -> NGramState:
        return NGramState(lengths=state.lengths[index], buffer=state.buffer[index])

    def _contexts(self, buffer: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Context id after the token at buffer slot ``pos`` (B, T)."""
        if self.order == 1:
            return torch.zeros_like(pos)
        ctx = torch.zeros_like(pos)
        for j in range(self.order - 1):  # token at pos - (n-2) + j has weight V^(n-2-j)
            ctx += buffer.gather(1, pos - (self.order - 2) + j).long() * int(self._pow[j])
        return ctx

    # -- conveniences --------------------------------------------------------------------------
    def as_order(self, order: int) -> "NGramModel":
        """The same model written as an order-``order`` table (order >= self.order)."""
        check_arg(order >= self.order, "order", order, f">= the model's order {self.order}")
        if order == self.order:
            return self
        # row c of the larger table is row c mod V^(n-1): contexts that differ only in older tokens
        t = self.table64.repeat(self.vocab_size ** (order - self.order), 1)
        return NGramModel(t.numpy(), order, name=self.name, dtype=self.dtype, max_length=self.max_length)

    def __repr__(self):
        return f"NGramModel(name={self.name!r}, order={self.order}, V={self.vocab_size})"


# -- constructors ------------------------------------------------------------------------------
def random_ngram(vocab_size: int, order: int, concentration: float = 0.5, support: Optional[int] = None,
                 seed: int = 0, name: Optional[str] = None) -> NGramModel:
    """A random order-n table: each row ~ Dirichlet(concentration) on ``support`` random tokens.

    Small concentration gives peaked rows; ``support < V`` leaves tokens of probability 0.
    """
    check_arg(isinstance(vocab_size, int) and vocab_size >= 2, "vocab_size", vocab_size, "an integer >= 2")
    check_arg(isinstance(order, int) and order >= 1, "order", order, "an integer >= 1")
    check_arg(concentration > 0, "concentration", concentration, "a number > 0")
    support = vocab_size if support is None else support
    check_arg(1 <= support <= vocab_size, "support", support, f"an integer in [1, {vocab_size}]")
    rng = np.random.default_rng(seed)
    C = vocab_size ** (order - 1)
    table = np.zeros((C, vocab_size))
    for c in range(C):
        idx = rng.choice(vocab_size, size=support, replace=False)
        table[c, idx] = rng.dirichlet(np.full(support, concentration))
    table = np.maximum(table, 0)
    table /= table.sum(1, keepdims=True)
    return NGramModel(table, order, name=name or f"random{order}g_V{vocab_size}_s{seed}")


def noisy_draft(target: NGramModel, eps: float, seed: int = 1, concentration: float = 1.0) -> NGramModel:
    """q = (1 - eps) p + eps r, r a random table of the same order.  eps = 0 gives q = p."""
    check_arg(0 <= eps <= 1, "eps", eps, "a number in [0, 1]")
    r = random_ngram(target.vocab_size, target.order, concentration, seed=seed).table64
    q = (1 - eps) * target.table64 + eps * r
    return NGramModel(q.numpy(), target.order, name=f"{target.name}~noise{eps:g}")


def tempered_draft(target: NGramModel, tau: float) -> NGramModel:
    """q proportional to p^(1/tau): tau > 1 flattens, tau < 1 sharpens; support unchanged."""
    check_arg(tau > 0, "tau", tau, "a number > 0")
    logp = torch.log(target.table64) / tau
    q = torch.softmax(logp, dim=-1)
    return NGramModel(q.numpy(), target.order, name=f"{target.name}~temp{tau:g}")


def disjoint_draft(target: NGramModel, overlap: float = 0.0, seed: int = 2) -> NGramModel:
    """A draft whose support is disjoint from the target's, mixed with weight ``overlap`` towards p.

    alpha = sum_x min(p, q) = ``overlap`` exactly in every context (needs p without full support).
    """
    check_arg(0 <= overlap <= 1, "overlap", overlap, "a number in [0, 1]")
    p = target.table64
    off = (p == 0).double()
    if bool((off.sum(1) == 0).any()):
        raise ValueError("`target` has a context with full support, so no disjoint draft exists; "
                         "build the target with random_ngram(..., support < vocab_size)")
    rng = np.random.default_rng(seed)
    r = off * torch.as_tensor(rng.gamma(1.0, size=tuple(p.shape)))
    r = r / r.sum(1, keepdim=True)
    q = (1 - overlap) * r + overlap * p
    return NGramModel(q.numpy(), target.order, name=f"{target.name}~disjoint{overlap:g}")


# -- exact quantities -------------------------------------------------------------------------
def warped_table(model: NGramModel, config: SamplingConfig) -> np.ndarray:
    """The table after the sampling controls, computed with the samplers' own :func:`warp` (float64)."""
    with np.errstate(divide="ignore"):
        logt = torch.log(model.table64)
    return warp(logt, config).numpy()


def context_of(model: NGramModel, tokens) -> int:
    """Context id after the token list ``tokens`` (earlier positions read as 0)."""
    ctx = 0
    C = model.n_contexts
    for t in tokens:
        ctx = (ctx * model.vocab_size + int(t)) % C if C > 1 else 0
    return ctx


def context_distributions(model: NGramModel, prompt, n_tokens: int, config: SamplingConfig,
                          table: Optional[np.ndarray] = None) -> np.ndarray:
    """(N, C) law of the context before generated position t = 0..N-1, under the warped target."""
    P = warped_table(model, config) if table is None else table
    C, V = P.shape
    d = np.zeros(C)
    d[context_of(model, prompt)] = 1.0
    out = np.empty((n_tokens, C))
    nxt = (np.arange(C)[:, None] * V + np.arange(V)[None, :]) % C if C > 1 else np.zeros((1, V), dtype=int)
    for t in range(n_tokens):
        out[t] = d
        joint = d[:, None] * P  # (C, V)
        d = np.bincount(nxt.ravel(), weights=joint.ravel(), minlength=C)
    return out


def exact_marginals(model: NGramModel, prompt, n_tokens: int, config: SamplingConfig = SamplingConfig()) -> np.ndarray:
    """(N, V) exact marginal law of each generated position under the warped target."""
    P = warped_table(model, config)
    D = context_distributions(model, prompt, n_tokens, config, table=P)  # (N, C)
    return D @ P


def exact_joint(model: NGramModel, prompt, n_tokens: int, config: SamplingConfig = SamplingConfig(),
                max_cells: int = 10_000_000) -> np.ndarray:
    """(V,)*N exact joint law of the first N generated tokens (V^N <= max_cells)."""
    V = model.vocab_size
    check_arg(V ** n_tokens <= max_cells, "n_tokens", n_tokens,
              f"small enough that V^n_tokens = {V}^{n_tokens} <= max_cells={max_cells}")
    P = warped_table(model, config)
    C = P.shape[0]
    # carry (joint over sequences so far, context id of each sequence)
    probs = np.array([1.0])
    ctx = np.array([context_of(model, prompt)])
    for _ in range(n_tokens):
        probs = (probs[:, None] * P[ctx]).ravel()  # (S*V,)
        ctx = ((ctx[:, None] * V + np.arange(V)[None, :]) % C).ravel() if C > 1 else np.zeros(probs.size, int)
    return probs.reshape((V,) * n_tokens)


def exact_acceptance(target: NGramModel, draft: NGramModel, prompt, n_tokens: int,
                     config: SamplingConfig = SamplingConfig()) -> np.ndarray:
    """(N,) alpha_t = E_{prefix ~ target}[sum_x min(p_t(x), q_t(x))] for generated positions t.

    p and q are the warped tables (the same controls on both sides).  The two models may have
    different orders; both are rewritten at the larger order.
    """
    if target.vocab_size != draft.vocab_size:
        raise ValueError(f"`draft` has vocabulary size {draft.vocab_size} but `target` has {target.vocab_size}")
    n = max(target.order, draft.order)
    t, d = target.as_order(n), draft.as_order(n)
    P, Q = warped_table(t, config), warped_table(d, config)
    beta = np.minimum(P, Q).sum(1)  # (C,)
    D = context_distributions(t, prompt, n_tokens, config, table=P)  # (N, C)
    return D @ beta
