"""The samplers' round loops on lookup tables, for plain n-gram models: same output, bit for bit.

The statistical checks need millions of sequences per second, which model calls through the
:class:`specimpl.model.LanguageModel` interface cannot give.  When every model is a plain
:class:`specimpl.ngram.NGramModel`, every law the sampler can meet is a row of a table, so a round
becomes a few lookups per sequence:

    :func:`pair_tables`           the warped target / draft laws, the exact acceptance threshold of
                                  every (context, token) cell, residual and bonus rows (:class:`PairTables`)
    :class:`TabularSpeculative`   the round loop of :class:`specimpl.speculative.SpeculativeSampler`
    :func:`tabular_autoregressive` the loop of :func:`specimpl.autoregressive.autoregressive_generate`

Both loops draw the same uniforms from the generator in the same order as the generic loops and
reproduce their output bit for bit (tested in tests/specimpl/test_speculative.py); categorical draws use
:class:`specimpl.sampling.TableSampler` (O(1) instead of O(V)).

They are used only where a caller opts in: ``SpeculativeSampler(..., tabular=True)`` (which
:func:`specimpl.speculative.speculative_generate` passes) and ``autoregressive_generate(...,
tabular=True)`` (the default); :func:`is_tabular_pair` / :func:`is_tabular_model` say whether the
models qualify.  A sampler variant that overrides a step of the reference (the controls in
``harness.controls.chain``) does not opt in and runs the generic loop.

Notation as in :mod:`specimpl.speculative`.  J is the joint context id of a sequence at order
m = max(target.order, draft.order), one of C = V^(m-1); appending token x maps J -> (J V + x) mod C.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Optional

import torch

from specimpl.errors import check_arg
from specimpl.inputs import check_finite_laws, check_generate_args, check_generator
from specimpl.model import as_prompt_list, check_prompt_tensor
from specimpl.ngram import NGramModel
from specimpl.result import PAD, GenerationResult, SpecStats
from specimpl.sampling import SamplingConfig, TableSampler, sample_categorical, warp

__all__ = ["PairTables", "pair_tables", "start_contexts", "is_tabular_model", "is_tabular_pair",
           "TabularSpeculative", "tabular_autoregressive"]

CHUNK_SIZE = 32000  # sequences per chunk: a chunk's intermediates stay in cache


def is_tabular_model(model) -> bool:
    """True for a plain :class:`NGramModel` (not a subclass, which may change ``forward``) of at most
    32767 tokens (the tables store token ids as int16)."""
    return type(model) is NGramModel and model.vocab_size <= 32767


def is_tabular_pair(target, draft) -> bool:
    """True when both models are tabular (:func:`is_tabular_model`) and of one dtype."""
    return is_tabular_model(target) and is_tabular_model(draft) and target.dtype == draft.dtype


# -- the tables -------------------------------------------------------------------------------------
@dataclass
class PairTables:
    """A (target, draft, config) triple as lookup tables over joint contexts J (``C`` = V^(m-1) of them).

    m = max(target.order, draft.order); J is the context id at order m, so the target's context is
    J mod V^(order_t - 1) and the draft's J mod V^(order_d - 1).  Appending token x: J -> (J V + x) mod C.
    Every table is computed from the same ``warp`` of the models' ``logtable`` rows that the
    generic sampler applies to gathered logits, so lookups reproduce it bit for bit:

    p, q        (C, V) warped target / draft laws
    accept_thr  (C * V,) accept draft x in context J iff u < accept_thr[J V + x]; this is the exact
                float threshold of the rule u * q(x) < p(x) (0 where q(x) = 0)
    draft       TableSampler over q
    final       TableSampler over 2C rows: row J the residual norm(max(0, p - q)) (p where that is
                empty), row C + J the bonus law p
    """

    V: int
    C: int
    p: torch.Tensor
    q: torch.Tensor
    accept_thr: torch.Tensor
    draft: TableSampler
    final: TableSampler


def _accept_threshold(p_x: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:
    """Smallest float u >= 0 (dtype of the inputs) with not (q_x > 0 and u * q_x < p_x); 1 if none below 1.

    fl(u * q) is nondecreasing in u, so the accepting u form a prefix of the floats in [0, 1): a
    bisection over their bit patterns (ordered like the values for floats >= 0) finds its end.
    """
    dt = p_x.dtype
    it = {torch.float32: torch.int32, torch.float64: torch.int64}[dt]
    one = torch.ones((), dtype=dt)

    def accept(bits):
        u = bits.view(dt)
        return (q_x > 0) & (u * q_x < p_x)

    lo = torch.zeros_like(p_x).view(it)  # bit pattern of 0.0
    hi = one.expand_as(p_x).contiguous().view(it).clone()  # bit pattern of 1.0: u < 1 always holds
    ok0 = accept(lo)  # where ok0: accept(lo) holds and the answer lies in (lo, hi]
    for _ in range(64):
        mid = lo + (hi - lo) // 2
        a = accept(mid)
        lo = torch.where(a, mid, lo)
        hi = torch.where(a, hi, mid)
        if bool((hi - lo <= 1).all()):
            break
    return torch.where(ok0, hi, torch.zeros_like(hi)).view(dt)


def pair_tables(target: NGramModel, draft: NGramModel, config: SamplingConfig) -> PairTables:
    """Lookup tables for the tabular speculative loop (see :class:`PairTables`)."""
    if target.vocab_size != draft.vocab_size:
        raise ValueError(f"`draft` has vocabulary size {draft.vocab_size} but `target` has {target.vocab_size}")
    check_arg(target.dtype == draft.dtype, "draft", f"dtype {draft.dtype}", f"the target's dtype {target.dtype}")
    V = target.vocab_size
    m = max(target.order, draft.order)
    C = V ** (m - 1)
    J = torch.arange(C)
    pt, qt = warp(target.logtable, config), warp(draft.logtable, config)  # (C_t, V), (C_d, V)
    check_finite_laws("target", pt, "its warped table (rows are contexts)", config)  # once, for every round
    check_finite_laws("draft", qt, "its warped table (rows are contexts)", config)
    p = pt[J % target.n_contexts].contiguous()  # (C, V)
    q = qt[J % draft.n_contexts].contiguous()  # (C, V)
    thr = _accept_threshold(p.reshape(-1), q.reshape(-1))  # (C * V,)
    r = (p - q).clamp(min=0)  # (C, V) the generic sampler's residual, row by row
    empty = r.sum(-1, keepdim=True) <= 0
    r = torch.where(empty, p, r)
    return PairTables(V=V, C=C, p=p, q=q, accept_thr=thr, draft=TableSampler(q),
                      final=TableSampler(torch.cat([r, p], 0)))


def start_contexts(prompts, vocab_size: int, n_contexts: int) -> torch.Tensor:
    """(B,) int64 context id (out of ``n_contexts`` = V^(m-1)) after every token of each prompt."""
    V, C = vocab_size, n_contexts
    if torch.is_tensor(prompts):
        pt = check_prompt_tensor(prompts, V)
        J = torch.zeros(pt.shape[0], dtype=torch.long)
        w = 1
        for j in range(1, pt.shape[1] + 1):  # most recent token is the lowest digit
            if w >= C:
                break
            J += pt[:, -j] * w
            w *= V
        return J
    ctx = []
    for p in as_prompt_list(prompts, V):
        c = 0
        for t in p:
            c = (c * V + t) % C if C > 1 else 0
        ctx.append(c)
    return torch.tensor(ctx, dtype=torch.long)


# -- integer arithmetic on flat cells f = J V + x ------------------------------------------------------
class _Cells:
    """Multiplication by V or C and reduction mod V or C on int32 tensors, as shifts and masks when
    V or C is a power of 2; and the int32 lookup tables of one :class:`PairTables`."""

    def __init__(self, tab: PairTables):
        V, C = tab.V, tab.C
        self.V, self.C = V, C
        self.V2, self.logV = V & (V - 1) == 0, V.bit_length() - 1
        self.C2, self.logC = C & (C - 1) == 0, C.bit_length() - 1
        self.tab = tab
        self.dM, self.fM = tab.draft.M, tab.final.M
        self.logdM, self.logfM = self.dM.bit_length() - 1, self.fM.bit_length() - 1
        # draft LUT of flat cells f = J V + x (-1: the bucket holds a CDF step)
        rows_d = torch.arange(tab.draft.lut.numel(), dtype=torch.int32) >> self.logdM
        self.dlut = torch.where(tab.draft.lut >= 0, rows_d * V + tab.draft.lut.int(), -1).to(torch.int32)
        self.flut = tab.final.lut.to(torch.int32)

    def times_V(self, x):
        return x << self.logV if self.V2 else x * self.V

    def times_C(self, x):
        return x << self.logC if self.C2 else x * self.C

    def token(self, f):
        """f = J V + x -> x."""
        return f & (self.V - 1) if self.V2 else f % self.V

    def context(self, f, out=None):
        """f = J V + x -> the context after x, f mod C (written to ``out`` when given)."""
        if self.C == 1:
            return torch.zeros_like(f) if out is None else out.zero_()
        if self.C2:
            return torch.bitwise_and(f, self.C - 1, out=out)
        return torch.remainder(f, self.C, out=out)

    def draw_draft(self, J, b, u, out):
        """out (a,) <- flat cells f = J V + x with x ~ q(. | J); b (a,) the bucket of u (a,)."""
        f = torch.index_select(self.dlut, 0, (J << self.logdM) + b, out=out)
        amb = (f < 0).nonzero().squeeze(1)
        if amb.numel():
            Ja = J[amb]
            f[amb] = (self.times_V(Ja) + sample_categorical(self.tab.draft.probs[Ja], u[amb])).to(torch.int32)
        return f

    def draw_final(self, rows, u):
        """(a,) y from rows of the final table: residual rows J, bonus rows C + J."""
        y = self.flut.index_select(0, (rows << self.logfM) + (u * self.fM).to(torch.int32))
        amb = (y < 0).nonzero().squeeze(1)
        if amb.numel():
            y[amb] = sample_categorical(self.tab.final.probs[rows[amb]], u[amb]).to(torch.int32)
        return y


# -- the speculative round loop --------------------------------------------------------------------
@dataclass
class _Batch:
    """The sequences still in the batch, A of them (compacted like the generic loop's batch)."""

    J: torch.Tensor  # (A,) int32 joint context after each sequence's tokens so far
    n_out: torch.Tensor  # (A,) int32 tokens emitted so far
    alive: torch.Tensor  # (A,) bool not finished
    base: torch.Tensor  # (A,) int64 first staging cell of each sequence
    idx: torch.Tensor  # (A,) int64 global ids

    def select(self, sel: torch.Tensor) -> "_Batch":
        return _Batch(self.J[sel], self.n_out[sel], self.alive[sel], self.base[sel], self.idx[sel])


class TabularSpeculative:
    """:class:`specimpl.speculative.SpeculativeSampler`'s round loop on lookup tables; same output, bit for bit.

    target, draft  plain n-gram models of one dtype (:func:`is_tabular_pair`)
    k, config      as for the sampler; ``compact_below`` its compaction rule (so the uniforms line up)
    chunk_size     sequences per chunk (intermediates stay in cache)
    workers        threads over chunks; None = ``torch.get_num_threads()``.  The uniforms are drawn in
                   order on the calling thread, so the output does not depend on the thread count;
                   per-round phase times split the round's wall time in proportion to the threads'
                   time in each phase.

    Per sequence it keeps the joint context J of the tokens emitted so far.  A round, per chunk:
    f_i = J_{i-1} V + x_i with x_i = draft.draw(J_{i-1}, u_i), J_i = f_i mod C; accept x_i iff
    u'_i < accept_thr[f_i]; n = accepted prefix; y = final.draw(J_n + C [n = k], u'').
    Tokens go to a (B, W + k + 1) int16 staging area: each round writes x_1..x_k and y (at cell n)
    unconditionally from the sequence's current length on; cells past the final length are
    masked with PAD once at the end.  Only 1-D operations on chunk columns (reductions along
    the short k axis are slow) and int32 arithmetic.
    """

    def __init__(self, target: NGramModel, draft: NGramModel, k: int, config: SamplingConfig = SamplingConfig(), *,
                 compact_below: float = 0.5, chunk_size: int = CHUNK_SIZE, workers: Optional[int] = None):
        check_arg(is_tabular_pair(target, draft), "draft", f"{draft!r} with {target!r}",
                  "a plain NGramModel of the target's dtype, with a plain NGramModel target (V <= 32767)")
        k, _, _ = check_generate_args(k, 1, config, None, target.vocab_size)
        check_arg(isinstance(chunk_size, int) and chunk_size >= 1, "chunk_size", chunk_size, "an integer >= 1")
        check_arg(workers is None or (isinstance(workers, int) and workers >= 1), "workers", workers,
                  "None or an integer >= 1")
        self.target, self.draft, self.k, self.config = target, draft, k, config
        self.compact_below, self.chunk_size, self.workers = compact_below, chunk_size, workers
        self._jk = torch.arange(k, dtype=torch.int32)  # (k,)
        self._cells: Optional[_Cells] = None  # built on first use (timed as prefill)

    def generate(self, prompts, max_new_tokens: int, eos_token_id: Optional[int] = None,
                 generator: Optional[torch.Generator] = None) -> GenerationResult:
        """As :meth:`specimpl.speculative.SpeculativeSampler.generate`."""
        _, max_new_tokens, eos_token_id = check_generate_args(self.k, max_new_tokens, self.config, eos_token_id,
                                                              self.target.vocab_size)
        check_generator(generator, "cpu")
        # Parallelism comes from worker threads over chunks; intra-op threads would only compete with
        # them (and spin-wait on a busy machine), so torch runs single-threaded for the call.
        intra_op = torch.get_num_threads()
        workers = self.workers if self.workers is not None else intra_op
        torch.set_num_threads(1)
        pool = ThreadPoolExecutor(workers) if workers > 1 else None
        try:
            return self._rounds(prompts, max_new_tokens, eos_token_id, generator, pool)
        finally:
            if pool is not None:
                pool.shutdown()
            torch.set_num_threads(intra_op)

    def _rounds(self, prompts, W, eos, generator, pool) -> GenerationResult:
        """Rounds until every sequence has ended; W = max_new_tokens."""
        clock = {"draft": 0.0, "target": 0.0, "sampler": 0.0}
        tic = time.perf_counter()
        if self._cells is None:
            self._cells = _Cells(pair_tables(self.target, self.draft, self.config))
        J = start_contexts(prompts, self._cells.V, self._cells.C).to(torch.int32)  # (B,) after each prompt
        B = J.shape[0]
        Ws = W + self.k + 1  # staging row: a finished row (n_out = W) still writes cells W..W+k until compaction
        stage = torch.empty(B * Ws, dtype=torch.int16)
        clock["prefill"] = time.perf_counter() - tic
        rows = _Batch(J, torch.zeros(B, dtype=torch.int32), torch.ones(B, dtype=torch.bool),
                      torch.arange(B, dtype=torch.long) * Ws, torch.arange(B))
        lengths = torch.zeros(B, dtype=torch.long)  # (B,) filled when sequences leave the batch
        stats = SpecStats(self.k)
        while True:
            A = rows.idx.numel()
            done = self._round(rows, stage, W, eos, generator, pool, stats, clock)
            # ---- drop finished sequences (the generic loop's rule, so the uniforms line up) ----
            rows.alive = rows.alive & ~done
            n_alive = int(rows.alive.sum())
            if n_alive == 0:
                break
            if n_alive < self.compact_below * A:
                lengths[rows.idx] = rows.n_out.long()
                rows = rows.select(rows.alive.nonzero().squeeze(1))
        lengths[rows.idx] = rows.n_out.long()
        tic = time.perf_counter()
        tokens = _unstage(stage.view(B, Ws)[:, :W], lengths, self.chunk_size)
        clock["sampler"] += time.perf_counter() - tic
        return GenerationResult(tokens=tokens, lengths=lengths, stats=stats, timings=clock)

    def _round(self, rows: _Batch, stage, W, eos, generator, pool, stats, clock) -> torch.Tensor:
        """One round of the whole batch, chunk by chunk; returns done (A,) bool (ends in this round)."""
        k, A = self.k, rows.idx.numel()
        done = torch.empty(A, dtype=torch.bool)
        t_round = time.perf_counter()
        results, t_rng = [], 0.0
        for c0 in range(0, A, self.chunk_size):  # uniforms drawn in order on this thread
            c1 = min(A, c0 + self.chunk_size)
            t0 = time.perf_counter()
            u = torch.rand(c1 - c0, 2 * k + 1, generator=generator, dtype=self.target.dtype)  # (a, 2k+1) as uniforms()
            t_rng += time.perf_counter() - t0
            args = (c0, c1, u, rows, done, stage, W, eos)
            results.append(self._chunk(*args) if pool is None else pool.submit(self._chunk, *args))
        if pool is not None:
            results = [f.result() for f in results]
        wall = time.perf_counter() - t_round
        hist = sum(h for h, _, _ in results)
        emitted = int(sum(e for _, e, _ in results))
        td, tt, ts = (t_rng + sum(t[0] for _, _, t in results), sum(t[1] for _, _, t in results),
                      sum(t[2] for _, _, t in results))
        scale = wall / max(td + tt + ts, 1e-12)  # with worker threads: share of the round's wall time
        td, tt, ts = td * scale, tt * scale, ts * scale
        stats.add_round(A, hist[:k + 1].numpy(), emitted, td, tt, ts)
        clock["draft"] += td
        clock["target"] += tt
        clock["sampler"] += ts
        return done

    def _chunk(self, c0, c1, u, rows: _Batch, done, stage, W, eos):
        """One round of sequences c0..c1; u (a, 2k+1) their uniforms.  Returns the (k+2,) histogram of n
        (k+1 counts finished rows), tokens emitted and the seconds of draft, accept, final + write."""
        t0 = time.perf_counter()
        Js, F = self._draft(rows.J[c0:c1], u)  # (k+1, a) J_0..J_k, (k, a) f_1..f_k
        t1 = time.perf_counter()
        n, still = self._accept(F, u)  # (a,) accepted prefix, (a,) all k accepted
        t2 = time.perf_counter()
        hist, emitted = self._finish_round(c0, c1, u, rows, done, stage, W, eos, Js, F, n, still)
        t3 = time.perf_counter()
        return hist, emitted, (t1 - t0, t2 - t1, t3 - t2)

    def _draft(self, J, u):
        """x_i ~ q(. | J_{i-1}) for i = 1..k: contexts Js (k+1, a) and flat cells F (k, a), f_i = J_{i-1} V + x_i."""
        k, cells = self.k, self._cells
        Js = torch.empty(k + 1, J.shape[0], dtype=torch.int32)  # (k+1, a) J_0..J_k
        F = torch.empty(k, J.shape[0], dtype=torch.int32)  # (k, a) f_1..f_k
        Js[0] = J
        b = (u[:, :k] * cells.dM).to(torch.int32)  # (a, k) buckets of the draft uniforms
        for i in range(k):
            f = cells.draw_draft(J, b[:, i], u[:, i], F[i])
            J = cells.context(f, out=Js[i + 1])
        return Js, F

    def _accept(self, F, u):
        """Accept x_i iff u'_i q_i(x_i) < p_i(x_i), i.e. u'_i < accept_thr[f_i].  Returns n (a,) int32 the
        accepted prefix and still (a,) bool: all k accepted."""
        k, thr = self.k, self._cells.tab.accept_thr
        still = u[:, k] < thr.index_select(0, F[0])  # (a,) all of x_1..x_i accepted
        n = still.to(torch.int32)
        for i in range(1, k):
            still &= u[:, k + i] < thr.index_select(0, F[i])
            n += still
        return n, still

    def _finish_round(self, c0, c1, u, rows: _Batch, done, stage, W, eos, Js, F, n, still):
        """Draw y (residual at the first rejection, or the bonus from p_{k+1}: rows C..2C-1), write
        x_1..x_n, y to the staging area, cut at W and EOS, and advance J.  Returns (hist, emitted)."""
        k, cells = self.k, self._cells
        nl = n.long()
        Jn = Js.gather(0, nl.unsqueeze(0)).squeeze(0)  # (a,) J_n
        y = cells.draw_final(Jn + cells.times_C(still.to(torch.int32)), u[:, 2 * k])  # (a,)
        nc, al = rows.n_out[c0:c1], rows.alive[c0:c1]
        remaining = W - nc
        m = torch.minimum(n + 1, remaining) * al  # (a,) tokens written this round
        ends = m == remaining
        X = cells.token(F).to(stage.dtype)  # (k, a) x_1..x_k
        if eos is not None:
            m, ends = _cut_at_eos(X, y, n, m, ends, eos)
        # x_j to cell n_out + j (junk from j = n on), then y to cell n_out + n
        start = rows.base[c0:c1] + nc  # (a,) int64
        stage.scatter_(0, (start + self._jk.unsqueeze(1)).view(-1), X.view(-1))
        stage.scatter_(0, start + nl, y.to(stage.dtype))
        rows.n_out[c0:c1] = nc + m
        done[c0:c1] = ends
        rows.J[c0:c1] = cells.context(cells.times_V(Jn) + y)
        hist = torch.bincount(nl if bool(al.all()) else torch.where(al, nl, k + 1), minlength=k + 2)
        return hist, m.sum()


def _cut_at_eos(X, y, n, m, ends, eos: int):
    """The first EOS among the m tokens written (x_1..x_n, y) ends its sequence just after it.

    X (k, a) drafts, y (a,), n (a,) accepted, m (a,) tokens written, ends (a,) bool.  Returns the new m, ends."""
    k = X.shape[0]
    first = torch.full_like(m, k + 1)  # (a,) index of the first EOS written; k + 1: none
    for j in range(k, -1, -1):
        is_eos = (y == eos) & (n == j)
        if j < k:
            is_eos |= (X[j] == eos) & (n > j)
        first = torch.where(is_eos & (m > j), j, first)
    has_eos = first <= k
    return torch.where(has_eos, first + 1, m), ends | has_eos


def _unstage(staged: torch.Tensor, lengths: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """(B, W) int64 tokens from the (B, W) staging view, PAD past each sequence's length."""
    B, W = staged.shape
    tokens = torch.empty(B, W, dtype=torch.long)
    cols = torch.arange(W)
    for c0 in range(0, B, chunk_size):  # chunks keep the passes in cache
        c1 = min(B, c0 + chunk_size)
        tokens[c0:c1] = staged[c0:c1]
        tokens[c0:c1].masked_fill_(cols >= lengths[c0:c1, None], PAD)
    return tokens


# -- the target-only loop ---------------------------------------------------------------------------
def tabular_autoregressive(target: NGramModel, prompts, max_new_tokens: int, config: SamplingConfig = SamplingConfig(),
                           eos_token_id: Optional[int] = None,
                           generator: Optional[torch.Generator] = None) -> GenerationResult:
    """:func:`specimpl.autoregressive.autoregressive_generate`'s loop on the warped table: x_t = draw(context,
    u_t), the same u_t = rand(B)[b] per step, so the same output bit for bit.  Arguments already checked."""
    check_arg(is_tabular_model(target), "target", repr(target), "a plain NGramModel (V <= 32767)")
    V, C = target.vocab_size, target.n_contexts
    clock = {"target": 0.0, "sampler": 0.0}
    tic = time.perf_counter()
    table = warp(target.logtable, config)  # (C, V) rows: contexts
    check_finite_laws("target", table, "its warped table (rows are contexts)", config)  # once, for every step
    sampler = TableSampler(table)
    J = start_contexts(prompts, V, C)  # (B,) context after each prompt
    B = J.shape[0]
    out = torch.full((max_new_tokens, B), PAD, dtype=torch.long)  # (T, B): each step writes one contiguous row
    alive = torch.ones(B, dtype=torch.bool)
    clock["prefill"] = time.perf_counter() - tic
    calls = 0
    for t in range(max_new_tokens):
        tic = time.perf_counter()
        for c0 in range(0, B, CHUNK_SIZE):
            c1 = min(B, c0 + CHUNK_SIZE)
            u = torch.rand(c1 - c0, generator=generator, dtype=target.dtype)  # consecutive slices of rand(B)
            x = sampler.draw(J[c0:c1], u)  # (a,)
            al = alive[c0:c1]
            out[t, c0:c1] = torch.where(al, x, PAD)  # a finished sequence stays PAD
            if eos_token_id is not None:
                alive[c0:c1] = al & (x != eos_token_id)
            if C > 1:
                f = J[c0:c1] * V + x
                J[c0:c1] = f & (C - 1) if C & (C - 1) == 0 else f % C
        calls += 1
        clock["sampler"] += time.perf_counter() - tic
        if eos_token_id is not None and not bool(alive.any()):
            break
    tokens = out.t().contiguous()  # (B, T)
    clock["target_calls"] = calls
    return GenerationResult(tokens=tokens, lengths=(tokens != PAD).sum(1), stats=None, timings=clock)
