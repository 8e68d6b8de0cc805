"""The reference speculative sampler (Leviathan et al. 2023; Chen et al. 2023).

Notation, used throughout this repository
-----------------------------------------
    p      target distribution (after the sampling controls), the law the output must follow
    q      draft distribution (after the *same* controls): exactly what each draft token is drawn from
    k      draft length: tokens proposed per round
    x_i    i-th draft token, x_i ~ q_i,           i = 1..k
    p_i    target's next-token law before x_i;   p_{k+1} the law after x_k (the bonus position)
    n      accepted drafts in a round, 0..k
    B, V   batch size, vocabulary size

One round: the draft proposes x_1..x_k; the target scores [pending, x_1..x_k] in one call and
returns p_1..p_{k+1}.  Position i is accepted iff u_i * q_i(x_i) < p_i(x_i) with a fresh
u_i ~ U(0,1) (accept with probability min(1, p/q); a token with q_i(x_i) = 0 is rejected).  At
the first rejection n = i - 1 and the round emits y ~ norm(max(0, p_i - q_i)); if all k pass it
emits the bonus y ~ p_{k+1}.  The round emits x_1..x_n, y: between 1 and k + 1 tokens.

The accept/resample step, :func:`verify_block`, is a pure function of its inputs (uniforms
included) so tests can hand it fixed numbers.  :class:`SpeculativeSampler` draws those uniforms
from an explicit ``torch.Generator``: the same seed gives bit-identical output.  Its methods are
small so a catalogue of buggy variants can override exactly one step (see ``harness.bugs``).
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pandas as pd
import torch

from specimpl.errors import check_arg
from specimpl.model import LanguageModel, Prompts, as_prompt_list, check_prompt_tensor, check_same_vocab
from specimpl.sampling import SamplingConfig, check_probs, sample_categorical, warp

__all__ = ["verify_block", "verify_block_checked", "SpeculativeSampler", "speculative_generate", "GenerationResult", "SpecStats", "PAD"]

PAD = -1  # fill value of the output after a sequence ends


def verify_block(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor, u_accept: torch.Tensor,
                 u_final: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Modified rejection sampling of one block of k drafts.

    p (B, k+1, V) target laws p_1..p_{k+1};  q (B, k, V) draft laws q_1..q_k;  x (B, k) drafts;
    u_accept (B, k) acceptance uniforms;  u_final (B,) uniform for the one final draw (residual
    at the first rejection, or bonus from p_{k+1} when all k are accepted).
    Returns n (B,) accepted drafts and y (B,) the final token of the round.
    """
    B, k, V = q.shape
    x_ = x.unsqueeze(-1)  # (B, k, 1)
    p_x = p[:, :k].gather(-1, x_).squeeze(-1)  # (B, k) p_i(x_i)
    q_x = q.gather(-1, x_).squeeze(-1)  # (B, k) q_i(x_i)
    accept = (u_accept * q_x < p_x) & (q_x > 0)  # (B, k) u < p/q without dividing
    n = accept.cummin(dim=1).values.sum(dim=1)  # (B,) accepted prefix length
    at_n = n.view(B, 1, 1).expand(B, 1, V)  # (B, 1, V) row index n
    p_n = p.gather(1, at_n).squeeze(1)  # (B, V) p_{n+1}: the law at the first rejection, or the bonus law
    q_n = q.gather(1, at_n.clamp(max=k - 1)).squeeze(1)  # (B, V)
    rejected = (n < k).unsqueeze(-1)  # (B, 1)
    residual = torch.where(rejected, (p_n - q_n).clamp_(min=0), p_n)  # (B, V) unnormalised
    # The residual sums to TV(p, q) > 0 whenever a rejection is possible; in float round-off it
    # can vanish (p == q), and then p itself is the right law.
    empty = residual.sum(-1, keepdim=True) <= 0
    residual = torch.where(empty, p_n, residual)
    y = sample_categorical(residual, u_final)  # (B,) normalised by its sum inside
    return n, y


def verify_block_checked(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor, u_accept: torch.Tensor,
                         u_final: torch.Tensor, atol: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`verify_block` after validating every argument (for hand-fed tensors).

    Rejects, with an error naming the argument: wrong shapes, NaN / negative / unnormalised rows of
    ``p`` or ``q`` (row sums within ``atol`` of 1), draft ids outside [0, V), uniforms outside [0, 1).
    The sampler's inner loop calls the unchecked function; its models produce normalised laws.
    """
    check_arg(torch.is_tensor(p) and p.dim() == 3 and p.shape[1] >= 2, "p",
              f"shape {tuple(p.shape)}" if torch.is_tensor(p) else type(p).__name__, "a tensor of shape (B, k+1, V), k >= 1")
    B, k1, V = p.shape
    k = k1 - 1
    check_arg(torch.is_tensor(q) and tuple(q.shape) == (B, k, V), "q",
              f"shape {tuple(q.shape)}" if torch.is_tensor(q) else type(q).__name__, f"a tensor of shape (B, k, V) = {(B, k, V)}")
    check_probs("p", p, atol)
    check_probs("q", q, atol)
    check_arg(torch.is_tensor(x) and tuple(x.shape) == (B, k) and not x.is_floating_point() and x.dtype != torch.bool,
              "x", f"shape {tuple(x.shape)}, dtype {x.dtype}" if torch.is_tensor(x) else type(x).__name__,
              f"an integer tensor of shape (B, k) = {(B, k)}")
    check_arg(bool(((x >= 0) & (x < V)).all()), "x", x[(x < 0) | (x >= V)][:5].tolist(), f"token ids in [0, {V})")
    for name, u, shape in (("u_accept", u_accept, (B, k)), ("u_final", u_final, (B,))):
        check_arg(torch.is_tensor(u) and tuple(u.shape) == shape and u.is_floating_point(), name,
                  f"shape {tuple(u.shape)}, dtype {u.dtype}" if torch.is_tensor(u) else type(u).__name__,
                  f"a floating-point tensor of shape {shape}")
        check_arg(bool(((u >= 0) & (u < 1)).all()), name, u[~((u >= 0) & (u < 1))][:5].tolist(), "uniforms in [0, 1)")
    return verify_block(p, q, x.long(), u_accept, u_final)


@dataclass
class SpecStats:
    """Per-round instrumentation (rows) of one speculative run; totals via :meth:`totals`."""

    k: int
    rounds: list = field(default_factory=list)
    accepted_hist: Optional[np.ndarray] = None  # (k+1,) rounds with n = 0..k accepted (pre-truncation)
    reached: Optional[np.ndarray] = None  # (k,) rounds in which draft position i was judged
    accepted_at: Optional[np.ndarray] = None  # (k,) rounds in which draft position i was accepted

    def __post_init__(self):
        if self.accepted_hist is None:
            self.accepted_hist = np.zeros(self.k + 1, dtype=np.int64)
            self.reached = np.zeros(self.k, dtype=np.int64)
            self.accepted_at = np.zeros(self.k, dtype=np.int64)

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rounds)

    def totals(self) -> dict:
        f = self.frame()
        if f.empty:
            return {}
        out = {c: f[c].sum() for c in f.columns if c != "round"}
        out["rounds"] = len(f)
        out["alpha_per_position"] = (self.accepted_at / np.maximum(self.reached, 1)).tolist()
        out["acceptance_rate"] = float(out["accepted"] / max(out["drafted"], 1))  # accepted / drafted
        # vLLM V1's "mean acceptance length": 1 + accepted / rounds (bonus or resample included)
        out["mean_accepted_length"] = float(1 + out["accepted"] / max(out["sequence_rounds"], 1))
        # emitted tokens per target call per sequence (after EOS / max_new_tokens truncation)
        out["tokens_per_target_call"] = float(out["emitted"] / max(out["sequence_rounds"], 1))
        return out


@dataclass
class GenerationResult:
    """tokens (B, max_new_tokens) int64, PAD after each sequence's end; lengths (B,); stats."""

    tokens: torch.Tensor
    lengths: torch.Tensor
    stats: Optional[SpecStats] = None
    timings: dict = field(default_factory=dict)


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _syncer(device):
    """A function that waits for the device (a no-op off CUDA), for honest phase timings."""
    device = torch.device(device)
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)


def _check_common(k, max_new_tokens, config, eos_token_id, vocab_size):
    check_arg(isinstance(max_new_tokens, int) and not isinstance(max_new_tokens, bool) and max_new_tokens >= 1,
              "max_new_tokens", max_new_tokens, "an integer >= 1")
    if k is not None:
        check_arg(isinstance(k, int) and not isinstance(k, bool) and k >= 1, "k", k, "an integer >= 1")
    check_arg(isinstance(config, SamplingConfig), "config", config, "a specimpl.SamplingConfig")
    if eos_token_id is not None:
        check_arg(isinstance(eos_token_id, int) and not isinstance(eos_token_id, bool)
                  and 0 <= eos_token_id < vocab_size, "eos_token_id", eos_token_id,
                  f"None or a token id in [0, {vocab_size})")


def _prompt_batch(prompts: Prompts, vocab_size: int, device):
    """Validated prompts for ``prefill`` and the last token of each (B,) int64.

    A (B, P) tensor stays a tensor (vectorised checks, no Python loop over a million prompts);
    a list of token lists may be ragged.
    """
    if torch.is_tensor(prompts):
        pt = check_prompt_tensor(prompts, vocab_size)
        return pt, pt[:, -1].to(device)
    plist = as_prompt_list(prompts, vocab_size)
    return plist, torch.tensor([p[-1] for p in plist], dtype=torch.long, device=device)


def _emit_round(x, n, y, remaining, alive, eos_token_id):
    """Tokens a round writes: x_1..x_n, y, cut at max_new_tokens and just after an EOS.

    Host (numpy) arrays: x (A, k), n (A,), y (A,), remaining (A,) tokens still allowed, alive (A,)
    bool.  Returns emit (A, k+1) with PAD from position m on, m (A,) tokens written (0 for finished
    sequences) and done (A,) bool (the sequence ends in this round).
    """
    A, k = x.shape
    j = np.arange(k + 1)  # (k+1,)
    emit = np.concatenate([x, np.zeros((A, 1), x.dtype)], 1)  # (A, k+1)
    emit[np.arange(A), n] = y  # x_1..x_n, y
    m = np.minimum(n + 1, remaining) * alive  # (A,) tokens written this round
    done = m == remaining
    if eos_token_id is not None:
        is_eos = (emit == eos_token_id) & (j < m[:, None])  # (A, k+1)
        has_eos = is_eos.any(1)
        m = np.where(has_eos, is_eos.argmax(1) + 1, m)
        done = done | has_eos
    emit[j >= m[:, None]] = PAD
    return emit, m, done


class SpeculativeSampler:
    """Batched speculative sampling with ragged acceptance, EOS and max_new_tokens.

    Subclass and override one of :meth:`warp_target`, :meth:`warp_draft`, :meth:`draw_draft`,
    :meth:`uniforms`, :meth:`verify` to build a variant; :meth:`generate` is the round loop.

    Two implementations of the same round loop:

    * the generic path works with any :class:`LanguageModel` through ``forward`` / ``rollback`` /
      ``select`` and calls the five methods above;
    * the tabular path runs when both models are plain :class:`specimpl.ngram.NGramModel` of one
      dtype and none of the five methods is overridden (``tabular=True``, the default).  It
      replaces model calls by lookups in tables built with the same ``warp`` (see
      :func:`specimpl.ngram.pair_tables`), draws categorical tokens in O(1) with
      :class:`specimpl.sampling.TableSampler`, and processes the batch in cache-sized chunks.  It
      consumes the generator's uniforms in the same order and reproduces the generic path's
      output bit for bit (tested); it exists because a million sequences per second is the scale
      the statistical checks need.

    The tabular path spreads chunks over ``workers`` threads (default ``torch.get_num_threads()``);
    the uniforms are still drawn in order on the calling thread, so the output does not depend on
    the thread count.  Per-round phase times then split the round's wall time in proportion to
    the threads' time in each phase.

    ``validate=True`` checks p and q with :func:`specimpl.sampling.check_probs` every round (generic
    path; costs a few passes over the batch).
    """

    compact_below = 0.5  # drop finished sequences from the batch when fewer than this share are active
    chunk_size = 32000  # tabular path: sequences per chunk (intermediates stay in cache)
    workers = None  # tabular path: worker threads over chunks; None = torch.get_num_threads()

    def __init__(self, target: LanguageModel, draft: LanguageModel, k: int, config: SamplingConfig = SamplingConfig(),
                 *, validate: bool = False, tabular: bool = True):
        check_same_vocab(target, draft)
        _check_common(k, 1, config, None, target.vocab_size)
        self.target, self.draft, self.k, self.config = target, draft, k, config
        self.validate, self.tabular = bool(validate), bool(tabular)
        self._tables = None

    # -- the steps a variant may override ------------------------------------------------------
    def warp_target(self, logits: torch.Tensor) -> torch.Tensor:
        return warp(logits, self.config)  # (B, k+1, V)

    def warp_draft(self, logits: torch.Tensor) -> torch.Tensor:
        return warp(logits, self.config)  # (B, V)

    def draw_draft(self, q: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        return sample_categorical(q, u)  # (B,)

    def uniforms(self, B: int, generator, dtype, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Fresh U(0,1): draft draws (B, k), acceptance (B, k), final draw (B,)."""
        u = torch.rand(B, 2 * self.k + 1, generator=generator, dtype=dtype, device=device)
        return u[:, :self.k], u[:, self.k:2 * self.k], u[:, 2 * self.k]

    def verify(self, p, q, x, u_accept, u_final):
        return verify_block(p, q, x, u_accept, u_final)

    # -- the round loop ------------------------------------------------------------------------
    def generate(self, prompts: Prompts, max_new_tokens: int, eos_token_id: Optional[int] = None,
                 generator: Optional[torch.Generator] = None) -> GenerationResult:
        _check_common(self.k, max_new_tokens, self.config, eos_token_id, self.target.vocab_size)
        if self.uses_tabular_path:
            return self._generate_tabular(prompts, max_new_tokens, eos_token_id, generator)
        return self._generate_generic(prompts, max_new_tokens, eos_token_id, generator)

    @property
    def uses_tabular_path(self) -> bool:
        from specimpl.ngram import NGramModel
        base = SpeculativeSampler
        return (self.tabular and not self.validate
                and type(self.target) is NGramModel and type(self.draft) is NGramModel
                and self.target.dtype == self.draft.dtype and self.target.vocab_size <= 32767
                and all(getattr(type(self), name) is getattr(base, name)
                        for name in ("warp_target", "warp_draft", "draw_draft", "uniforms", "verify",
                                     "_generate_generic", "_generate_tabular", "_tabular_rounds")))

    def _generate_generic(self, prompts, max_new_tokens, eos_token_id, generator) -> GenerationResult:
        # Tensors that the models and the verify step see stay on the device; the few small
        # integers of the bookkeeping (n, y, x of each round, output buffer, lengths) live on the
        # host as numpy arrays, where an operation costs a microsecond instead of a torch dispatch.
        k, V = self.k, self.target.vocab_size
        dev = self.target.device
        sync = _syncer(dev)
        t_clock = {"draft": 0.0, "target": 0.0, "sampler": 0.0}
        tic = time.perf_counter()
        batch, last = _prompt_batch(prompts, V, dev)
        tstate = self.target.prefill(batch)
        dstate = self.draft.prefill(batch)
        sync()
        t_clock["prefill"] = time.perf_counter() - tic

        B = last.shape[0]
        d_pending = torch.stack([last, torch.zeros_like(last)], 1)  # (B, 2) left-aligned tokens the draft has not fed
        d_npend = torch.ones(B, dtype=torch.long, device=dev)  # (B,) 1 or 2
        d_two = np.zeros(B, dtype=bool)  # (A,) host copy of d_npend == 2
        t_pending = last  # (B,) the target's one unfed token
        out = np.full((B, max_new_tokens + k + 1), PAD, dtype=np.int64)  # host output buffer
        n_out = np.zeros(B, dtype=np.int64)  # (B,) emitted so far
        idx = np.arange(B)  # (A,) global ids of the sequences still in the batch
        alive = np.ones(B, dtype=bool)  # (A,) not finished yet
        stats = SpecStats(k)
        j = np.arange(k + 1)  # (k+1,)
        r = 0
        while True:
            A = idx.size
            # ---- draft: k autoregressive proposals x_i ~ q_i ------------------------------------
            tic = time.perf_counter()
            u_draft, u_acc, u_fin = self.uniforms(A, generator, self.target_dtype, dev)
            logits = self.draft.forward(dstate, d_pending, d_npend)  # (A, 2, V)
            if not d_two.any():  # (A, V) after the last fed token
                logits = logits[:, 0]
            else:
                logits = logits.gather(1, (d_npend - 1).view(A, 1, 1).expand(A, 1, V)).squeeze(1)
            qs, tokens = [], [t_pending]
            for i in range(k):
                q_i = self.warp_draft(logits)  # (A, V)
                x_i = self.draw_draft(q_i, u_draft[:, i])  # (A,)
                qs.append(q_i)
                tokens.append(x_i)
                if i < k - 1:
                    logits = self.draft.forward(dstate, x_i.unsqueeze(1))[:, 0]  # (A, V)
            q = torch.stack(qs, 1)  # (A, k, V)
            tokens = torch.stack(tokens, 1)  # (A, k+1) pending, x_1..x_k
            x = tokens[:, 1:]  # (A, k)
            sync()
            t1 = time.perf_counter()
            # ---- target: score pending + k drafts in one call ---------------------------------
            p_logits = self.target.forward(tstate, tokens)  # (A, k+1, V)
            p = self.warp_target(p_logits)  # (A, k+1, V)
            sync()
            t2 = time.perf_counter()
            # ---- accept / resample -------------------------------------------------------------
            if self.validate:
                check_probs("p", p)
                check_probs("q", q)
            n, y = self.verify(p, q, x, u_acc, u_fin)  # (A,), (A,)
            n_h, y_h, x_h = n.cpu().numpy(), y.cpu().numpy(), x.cpu().numpy()  # host copies
            emit, m, done = _emit_round(x_h, n_h, y_h, max_new_tokens - n_out[idx], alive, eos_token_id)
            # positions >= n_out hold PAD for every sequence, so finished rows (m = 0, all PAD) may write too
            out[idx[:, None], n_out[idx][:, None] + j] = emit
            n_out[idx] += m
            # ---- roll back both models to the accepted prefix --------------------------------
            self.target.rollback(tstate, tstate.lengths + torch.from_numpy(n_h - k).to(dev))  # keeps pending + x_1..x_n
            self.draft.rollback(dstate, dstate.lengths + torch.from_numpy(np.minimum(n_h, k - 1) - (k - 1)).to(dev))
            d_two = n_h == k  # the draft never fed x_k: it becomes pending, with y
            d_pending = torch.from_numpy(np.stack([np.where(d_two, x_h[:, -1], y_h),
                                                   np.where(d_two, y_h, 0)], 1)).to(dev)  # (A, 2)
            d_npend = torch.from_numpy(1 + d_two.astype(np.int64)).to(dev)  # (A,)
            t_pending = y
            sync()
            t3 = time.perf_counter()
            # ---- instrumentation (live rows only; acceptance before EOS/length truncation) -------
            self._record(stats, r, A, np.bincount(n_h[alive], minlength=k + 1), int(m.sum()), tic, t1, t2, t3, t_clock)
            r += 1
            # ---- drop finished sequences ------------------------------------------------------
            alive = alive & ~done
            n_alive = int(alive.sum())
            if n_alive == 0:
                break
            if n_alive < self.compact_below * A:
                sel_h = alive.nonzero()[0]
                sel = torch.from_numpy(sel_h).to(dev)
                idx, alive, d_two = idx[sel_h], alive[sel_h], d_two[sel_h]
                tstate = self.target.select(tstate, sel)
                dstate = self.draft.select(dstate, sel)
                d_pending, d_npend, t_pending = d_pending[sel], d_npend[sel], t_pending[sel]
        tokens = torch.from_numpy(np.ascontiguousarray(out[:, :max_new_tokens])).to(dev)
        return GenerationResult(tokens=tokens, lengths=torch.from_numpy(n_out).to(dev), stats=stats, timings=t_clock)

    def _record(self, stats, r, A, hist, emitted, tic, t1, t2, t3, t_clock):
        """Add one round to ``stats``: hist (k+1,) counts of n over the live sequences."""
        k = self.k
        stats.accepted_hist += hist
        tail = np.cumsum(hist[::-1])[::-1]  # tail[i] = rounds with n >= i
        stats.reached += tail[:k]  # x_{i+1} judged iff n >= i
        stats.accepted_at += tail[1:]  # x_{i+1} accepted iff n >= i + 1
        live = int(tail[0])
        t_clock["draft"] += t1 - tic
        t_clock["target"] += t2 - t1
        t_clock["sampler"] += t3 - t2
        stats.rounds.append({
            "round": r, "batch": A, "sequence_rounds": live, "drafted": live * k,
            "accepted": int(tail[1:].sum()), "emitted": emitted, "target_calls": 1, "draft_calls": k,
            "t_draft": t1 - tic, "t_target": t2 - t1, "t_sampler": t3 - t2,
        })

    def _generate_tabular(self, prompts, max_new_tokens, eos_token_id, generator) -> GenerationResult:
        # Parallelism comes from worker threads over chunks; intra-op threads would only compete with
        # them (and spin-wait on a busy machine), so torch runs single-threaded for the call.
        intra_op = torch.get_num_threads()
        workers = self.workers if self.workers is not None else intra_op
        torch.set_num_threads(1)
        try:
            return self._tabular_rounds(prompts, max_new_tokens, eos_token_id, generator, workers)
        finally:
            torch.set_num_threads(intra_op)

    def _tabular_rounds(self, prompts, max_new_tokens, eos_token_id, generator, workers) -> GenerationResult:
        """The generic round loop on lookup tables (see the class docstring); same output, bit for bit.

        Per sequence it keeps the joint context J of the tokens emitted so far.  A round, per chunk:
        f_i = J_{i-1} V + x_i with x_i = draft.draw(J_{i-1}, u_i), J_i = f_i mod C; accept x_i iff
        u'_i < accept_thr[f_i]; n = accepted prefix; y = final.draw(J_n + C [n = k], u'').
        Tokens go to a (B, W + k) int16 staging area: each round writes x_1..x_k and y (at cell n)
        unconditionally from the sequence's current length on; cells past the final length are
        masked with PAD once at the end.  Only 1-D operations on chunk columns (reductions along
        the short k axis are slow) and int32 arithmetic.
        """
        from specimpl.ngram import pair_tables, start_contexts

        k, V = self.k, self.target.vocab_size
        dt = self.target_dtype
        t_clock = {"draft": 0.0, "target": 0.0, "sampler": 0.0}
        tic = time.perf_counter()
        if self._tables is None:
            self._tables = pair_tables(self.target, self.draft, self.config)
        tab = self._tables
        C = tab.C
        J = start_contexts(prompts, V, C).to(torch.int32)  # (A,) joint context after each prompt
        B = J.shape[0]
        W = max_new_tokens
        Ws = W + k + 1  # staging row: a finished row (n_out = W) still writes cells W..W+k until compaction
        stage = torch.empty(B * Ws, dtype=torch.int16 if V <= 32767 else torch.int32)
        t_clock["prefill"] = time.perf_counter() - tic

        def shl(x, n_pow, pow2, log2):  # x * n_pow
            return x << log2 if pow2 else x * n_pow

        V2, logV = V & (V - 1) == 0, V.bit_length() - 1
        C2, logC = C & (C - 1) == 0, C.bit_length() - 1

        def context(f):  # f = J V + x -> the context after x
            if C == 1:
                return torch.zeros_like(f)
            return f & (C - 1) if C2 else f % C

        dM, fM = tab.draft.M, tab.final.M
        logdM, logfM = dM.bit_length() - 1, fM.bit_length() - 1
        # draft LUT of flat cells f = J V + x (-1: the bucket holds a CDF step)
        rows_d = torch.arange(tab.draft.lut.numel(), dtype=torch.int32) >> logdM
        dlut = torch.where(tab.draft.lut >= 0, rows_d * V + tab.draft.lut.int(), -1).to(torch.int32)
        flut = tab.final.lut.to(torch.int32)
        thr = tab.accept_thr
        jk = torch.arange(k, dtype=torch.int32)  # (k,)
        sdt = stage.dtype

        def draw_f(Jc, b, u, out):  # out (a,) <- flat cells f = J V + x, x ~ q(. | J); b = bucket of u
            f = torch.index_select(dlut, 0, (Jc << logdM) + b, out=out)
            amb = (f < 0).nonzero().squeeze(1)
            if amb.numel():
                Ja = Jc[amb]
                f[amb] = (shl(Ja, V, V2, logV) + sample_categorical(tab.draft.probs[Ja], u[amb])).to(torch.int32)
            return f

        def draw_final(rows, u):  # (a,) y from the residual / bonus rows
            y = flut.index_select(0, (rows << logfM) + (u * fM).to(torch.int32))
            amb = (y < 0).nonzero().squeeze(1)
            if amb.numel():
                y[amb] = sample_categorical(tab.final.probs[rows[amb]], u[amb]).to(torch.int32)
            return y

        def run_chunk(c0, c1, u, J, n_out, alive, base, done_all):
            """One round for sequences c0..c1 of the batch; u (a, 2k+1) their uniforms."""
            t0 = time.perf_counter()
            a = c1 - c0
            Jc = J[c0:c1]  # (a,) int32
            Js = torch.empty(k + 1, a, dtype=torch.int32)  # (k+1, a) J_0..J_k
            F = torch.empty(k, a, dtype=torch.int32)  # (k, a) f_1..f_k
            Js[0] = Jc
            b = (u[:, :k] * dM).to(torch.int32)  # (a, k) buckets of the draft uniforms
            for i in range(k):  # ---- draft: x_i ~ q(. | J_{i-1})
                f = draw_f(Jc, b[:, i], u[:, i], F[i])
                if C == 1:
                    Js[i + 1].zero_()
                elif C2:
                    torch.bitwise_and(f, C - 1, out=Js[i + 1])
                else:
                    torch.remainder(f, C, out=Js[i + 1])
                Jc = Js[i + 1]
            t1 = time.perf_counter()
            # ---- target: accept x_i iff u'_i q_i(x_i) < p_i(x_i), i.e. u'_i < thr; n = accepted prefix
            still = u[:, k] < thr.index_select(0, F[0])  # (a,) all of x_1..x_i accepted
            n = still.to(torch.int32)
            for i in range(1, k):
                still &= u[:, k + i] < thr.index_select(0, F[i])
                n += still
            t2 = time.perf_counter()
            nl = n.long()
            Jn = Js.gather(0, nl.unsqueeze(0)).squeeze(0)  # (a,) J_n
            # ---- resample at the first rejection, or the bonus from p_{k+1} (rows C..2C-1)
            y = draw_final(Jn + shl(still.to(torch.int32), C, C2, logC), u[:, 2 * k])  # (a,)
            nc, al = n_out[c0:c1], alive[c0:c1]
            remaining = W - nc
            m = torch.minimum(n + 1, remaining) * al  # (a,) tokens written this round
            done = m == remaining
            X = (F & (V - 1) if V2 else F % V).to(sdt)  # (k, a) x_1..x_k
            if eos_token_id is not None:
                first = torch.full_like(m, k + 1)
                for jj in range(k, -1, -1):  # first EOS among x_1..x_n, y within the m written
                    tok_is_eos = (y == eos_token_id) & (n == jj)
                    if jj < k:
                        tok_is_eos |= (X[jj] == eos_token_id) & (n > jj)
                    first = torch.where(tok_is_eos & (m > jj), jj, first)
                has_eos = first <= k
                m = torch.where(has_eos, first + 1, m)
                done |= has_eos
            # x_j to cell n_out + j (junk from j = n on), then y to cell n_out + n
            start = base[c0:c1] + nc  # (a,) int64
            stage.scatter_(0, (start + jk.unsqueeze(1)).view(-1), X.view(-1))
            stage.scatter_(0, start + nl, y.to(sdt))
            n_out[c0:c1] = nc + m
            done_all[c0:c1] = done
            J[c0:c1] = context(shl(Jn, V, V2, logV) + y)
            hist = torch.bincount(nl if bool(al.all()) else torch.where(al, nl, k + 1), minlength=k + 2)
            t3 = time.perf_counter()
            return hist, m.sum(), (t1 - t0, t2 - t1, t3 - t2)

        pool = ThreadPoolExecutor(workers) if workers > 1 else None
        base = torch.arange(B, dtype=torch.long) * Ws  # (A,) first staging cell of each sequence
        idx = torch.arange(B)  # (A,) global ids
        n_out = torch.zeros(B, dtype=torch.int32)  # (A,)
        lengths = torch.zeros(B, dtype=torch.long)  # (B,) filled when sequences leave the batch
        alive = torch.ones(B, dtype=torch.bool)  # (A,)
        stats = SpecStats(k)
        r = 0
        try:
            while True:
                A = idx.numel()
                done_all = torch.empty(A, dtype=torch.bool)
                state = (J, n_out, alive, base, done_all)
                t_round = time.perf_counter()
                results, t_rng = [], 0.0
                for c0 in range(0, A, self.chunk_size):  # uniforms drawn in order on this thread
                    c1 = min(A, c0 + self.chunk_size)
                    t0 = time.perf_counter()
                    u = torch.rand(c1 - c0, 2 * k + 1, generator=generator, dtype=dt)  # (a, 2k+1) as uniforms()
                    t_rng += time.perf_counter() - t0
                    results.append(run_chunk(c0, c1, u, *state) if pool is None else
                                   pool.submit(run_chunk, c0, c1, u, *state))
                if pool is not None:
                    results = [f.result() for f in results]
                wall = time.perf_counter() - t_round
                hist = sum(h for h, _, _ in results)
                emitted = int(sum(e for _, e, _ in results))
                td, tt, ts = (t_rng + sum(t[0] for _, _, t in results), sum(t[1] for _, _, t in results),
                              sum(t[2] for _, _, t in results))
                scale = wall / max(td + tt + ts, 1e-12)  # with worker threads: share of the round's wall time
                td, tt, ts = td * scale, tt * scale, ts * scale
                self._record(stats, r, A, hist[:k + 1].numpy(), emitted, 0.0, td, td + tt, td + tt + ts, t_clock)
                r += 1
                # ---- drop finished sequences (the generic path's rule, so the uniforms line up) ----
                alive = alive & ~done_all
                n_alive = int(alive.sum())
                if n_alive == 0:
                    break
                if n_alive < self.compact_below * A:
                    lengths[idx] = n_out.long()
                    sel = alive.nonzero().squeeze(1)
                    idx, alive, J, base, n_out = idx[sel], alive[sel], J[sel], base[sel], n_out[sel]
            lengths[idx] = n_out.long()
            tic = time.perf_counter()
            staged = stage.view(B, Ws)[:, :W]  # (B, W)
            tokens = torch.empty(B, W, dtype=torch.long)
            cols = torch.arange(W)
            for c0 in range(0, B, self.chunk_size):  # PAD past each end; chunks keep the passes in cache
                c1 = min(B, c0 + self.chunk_size)
                tokens[c0:c1] = staged[c0:c1]
                tokens[c0:c1].masked_fill_(cols >= lengths[c0:c1, None], PAD)
            t_clock["sampler"] += time.perf_counter() - tic
        finally:
            if pool is not None:
                pool.shutdown()
        return GenerationResult(tokens=tokens, lengths=lengths, stats=stats, timings=t_clock)

    @property
    def target_dtype(self):
        return getattr(self.target, "dtype", torch.float32)


def speculative_generate(target: LanguageModel, draft: LanguageModel, prompts: Prompts, *, k: int,
                         max_new_tokens: int, config: SamplingConfig = SamplingConfig(),
                         eos_token_id: Optional[int] = None,
                         generator: Optional[torch.Generator] = None) -> GenerationResult:
    """Sample continuations of ``prompts`` from ``target``, using ``draft`` to propose k tokens a round.

    This is the *sampler call signature* the harness verifies: any function with these arguments
    that returns a :class:`GenerationResult` can be plugged into ``python -m harness verify``.
    """
    return SpeculativeSampler(target, draft, k, config).generate(prompts, max_new_tokens, eos_token_id, generator)
