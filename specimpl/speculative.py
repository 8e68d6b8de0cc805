"""The reference speculative sampler (Leviathan et al. 2023; Chen et al. 2023): the algorithm.

Notation, used throughout this repository
-----------------------------------------
    p      target distribution (after the sampling controls), the law the output must follow
    q      draft distribution (after the *same* controls): exactly what each draft token is drawn from
    k      draft length: tokens proposed per round
    x_i    i-th draft token, x_i ~ q_i,           i = 1..k
    p_i    target's next-token law before x_i;   p_{k+1} the law after x_k (the bonus position)
    n      accepted drafts in a round, 0..k
    y      the round's final token: the residual draw at the first rejection, or the bonus
    B, V   batch size, vocabulary size (A: sequences still in the batch)

One round: the draft proposes x_1..x_k; the target scores [pending, x_1..x_k] in one call and
returns p_1..p_{k+1}.  Position i is accepted iff u_i * q_i(x_i) < p_i(x_i) with a fresh
u_i ~ U(0,1) (accept with probability min(1, p/q); a token with q_i(x_i) = 0 is rejected).  At
the first rejection n = i - 1 and the round emits y ~ norm(max(0, p_i - q_i)); if all k pass it
emits the bonus y ~ p_{k+1}.  The round emits x_1..x_n, y: between 1 and k + 1 tokens.

What lives here: :func:`verify_block`, the accept/resample step, a pure function of its inputs
(uniforms included) so tests can hand it fixed numbers; :class:`SpeculativeSampler`, the round
loop over any :class:`specimpl.model.LanguageModel`, which draws those uniforms from an explicit
``torch.Generator`` (the same seed gives bit-identical output) and whose steps are small methods
so a catalogue of buggy variants can override exactly one (see ``harness.controls.chain``); and
:func:`speculative_generate`, the sampler call signature the harness verifies.  The same round
loop on lookup tables, for n-gram toy models, is :mod:`specimpl.tabular`; the output type is
:mod:`specimpl.result`.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from specimpl.errors import check_arg
from specimpl.inputs import (check_finite_laws, check_generate_args, check_generator, check_logits_vocab, law_sums,
                             prompt_batch)
from specimpl.model import LanguageModel, ModelState, Prompts, check_same_vocab
from specimpl.result import PAD, GenerationResult, SpecStats, emit_round
from specimpl.sampling import SamplingConfig, check_probs, sample_categorical, warp
from specimpl.tabular import TabularSpeculative, is_tabular_pair
from specimpl.timing import device_syncer

__all__ = ["verify_block", "verify_block_checked", "SpeculativeSampler", "speculative_generate", "GenerationResult",
           "SpecStats", "PAD"]


def verify_block(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor, u_accept: torch.Tensor,
                 u_final: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Modified rejection sampling of one block of k drafts (notation of the module docstring).

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
    q_n = q.gather(1, at_n.clamp(max=k - 1)).squeeze(1)  # (B, V) q_{n+1} (unused when n = k)
    rejected = (n < k).unsqueeze(-1)  # (B, 1)
    residual = torch.where(rejected, (p_n - q_n).clamp_(min=0), p_n)  # (B, V) unnormalised
    # The residual sums to TV(p, q) > 0 whenever a rejection is possible; in float round-off it
    # can vanish (p == q), and then p itself is the right law.
    empty = residual.sum(-1, keepdim=True) <= 0  # (B, 1)
    residual = torch.where(empty, p_n, residual)  # (B, V)
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
    if torch.is_tensor(q) and q.dim() == 3 and q.shape[-1] != V:
        raise ValueError(f"`p` and `q` must have the same number of columns (vocabulary size V, the last axis); "
                         f"got p of shape {tuple(p.shape)} (V = {V}) and q of shape {tuple(q.shape)} "
                         f"(V = {q.shape[-1]})")
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
class _Rows:
    """The generic loop's batch: the A sequences not yet compacted away, and the tokens each model
    has emitted but not yet been fed."""

    tstate: ModelState  # target: every token but t_pending
    dstate: ModelState  # draft: every token but the d_npend of d_pending
    t_pending: torch.Tensor  # (A,) the target's one unfed token
    d_pending: torch.Tensor  # (A, 2) left-aligned tokens the draft has not fed
    d_npend: torch.Tensor  # (A,) 1 or 2
    d_two: np.ndarray  # (A,) host copy of d_npend == 2
    idx: np.ndarray  # (A,) global ids
    alive: np.ndarray  # (A,) bool not finished


class SpeculativeSampler:
    """Batched speculative sampling with ragged acceptance, EOS and max_new_tokens.

    Subclass and override one of :meth:`warp_target`, :meth:`warp_draft`, :meth:`draw_draft`,
    :meth:`uniforms`, :meth:`verify` to build a variant; :meth:`generate` is the round loop.  It
    works with any :class:`LanguageModel` through ``forward`` / ``rollback`` / ``select``.

    ``tabular=True`` opts in to :class:`specimpl.tabular.TabularSpeculative`, the same round loop on
    lookup tables, whenever both models are plain n-gram tables of one dtype
    (:func:`specimpl.tabular.is_tabular_pair`); it reproduces this loop's output bit for bit but
    never calls the five methods above, so opting in vouches that they are the reference ones.
    :func:`speculative_generate` opts in; the default (False) and every variant that does not pass
    ``tabular=True`` itself run the generic loop.

    ``validate=True`` checks p and q with :func:`specimpl.sampling.check_probs` every round (generic
    loop only; costs a few passes over the batch).  Independently, every round checks that the warped
    p and q are finite (:func:`specimpl.inputs.check_finite_laws`: one sum each) and raises a
    ``ValueError`` naming the model, round and row otherwise; NaN/inf logits would else turn into
    a run of the last vocabulary id.  The class attribute ``check_finite`` turns this off (benchmarks).
    """

    compact_below = 0.5  # drop finished sequences from the batch when fewer than this share are active
    check_finite = True  # raise NonFiniteLawError when a warped p or q holds NaN/inf (one sum per law per round)

    def __init__(self, target: LanguageModel, draft: LanguageModel, k: int, config: SamplingConfig = SamplingConfig(),
                 *, validate: bool = False, tabular: bool = False):
        check_same_vocab(target, draft)
        k, _, _ = check_generate_args(k, 1, config, None, target.vocab_size)
        self.target, self.draft, self.k, self.config = target, draft, k, config
        self.validate, self.tabular = bool(validate), bool(tabular)
        self._tabular_loop: Optional[TabularSpeculative] = None

    # -- the steps a variant may override ------------------------------------------------------
    def warp_target(self, logits: torch.Tensor) -> torch.Tensor:
        return warp(logits, self.config)  # (B, k+1, V)

    def warp_draft(self, logits: torch.Tensor) -> torch.Tensor:
        return warp(logits, self.config)  # (B, V)

    def draw_draft(self, q: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        return sample_categorical(q, u)  # (B,)

    def uniforms(self, B: int, generator, dtype, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Fresh U(0,1): draft draws (B, k), acceptance (B, k), final draw (B,)."""
        u = torch.rand(B, 2 * self.k + 1, generator=generator, dtype=dtype, device=device)  # (B, 2k+1)
        return u[:, :self.k], u[:, self.k:2 * self.k], u[:, 2 * self.k]

    def verify(self, p, q, x, u_accept, u_final):
        return verify_block(p, q, x, u_accept, u_final)  # n (B,), y (B,)

    # -- the round loop ------------------------------------------------------------------------
    def generate(self, prompts: Prompts, max_new_tokens: int, eos_token_id: Optional[int] = None,
                 generator: Optional[torch.Generator] = None) -> GenerationResult:
        """Continue each prompt by up to ``max_new_tokens`` tokens (fewer after ``eos_token_id``)."""
        _, max_new_tokens, eos_token_id = check_generate_args(self.k, max_new_tokens, self.config, eos_token_id,
                                                              self.target.vocab_size)
        check_generator(generator, self.target.device)
        if self.uses_tabular_path:
            if self._tabular_loop is None:
                self._tabular_loop = TabularSpeculative(self.target, self.draft, self.k, self.config,
                                                        compact_below=self.compact_below)
            return self._tabular_loop.generate(prompts, max_new_tokens, eos_token_id, generator)
        return self._generate_generic(prompts, max_new_tokens, eos_token_id, generator)

    @property
    def uses_tabular_path(self) -> bool:
        """Opted in (``tabular=True``), not validating, and both models tabular."""
        return self.tabular and not self.validate and is_tabular_pair(self.target, self.draft)

    @property
    def target_dtype(self):
        return getattr(self.target, "dtype", torch.float32)

    def _generate_generic(self, prompts, max_new_tokens, eos_token_id, generator) -> GenerationResult:
        # Tensors that the models and the verify step see stay on the device; the few small
        # integers of the bookkeeping (n, y, x of each round, output buffer, lengths) live on the
        # host as numpy arrays, where an operation costs a microsecond instead of a torch dispatch.
        k, dev = self.k, self.target.device
        sync = device_syncer(dev)
        clock = {"draft": 0.0, "target": 0.0, "sampler": 0.0}
        tic = time.perf_counter()
        rows = self._prefill(prompts)
        sync()
        clock["prefill"] = time.perf_counter() - tic
        B = rows.idx.size
        out = np.full((B, max_new_tokens + k + 1), PAD, dtype=np.int64)  # host output buffer
        n_out = np.zeros(B, dtype=np.int64)  # (B,) emitted so far
        j = np.arange(k + 1)  # (k+1,)
        stats = SpecStats(k)
        rnd = 0
        while True:
            A, idx = rows.idx.size, rows.idx
            rnd += 1
            # ---- draft: k autoregressive proposals x_i ~ q_i ------------------------------------
            tic = time.perf_counter()
            u_draft, u_acc, u_fin = self.uniforms(A, generator, self.target_dtype, dev)
            q, tokens = self._propose(rows, u_draft, rnd)  # (A, k, V), (A, k+1) pending, x_1..x_k
            x = tokens[:, 1:]  # (A, k)
            sync()
            t1 = time.perf_counter()
            # ---- target: score pending + k drafts in one call ---------------------------------
            logits = check_logits_vocab("target", self.target, self.target.forward(rows.tstate, tokens), f"round {rnd}")
            p = self.warp_target(logits)  # (A, k+1, V)
            sync()
            t2 = time.perf_counter()
            # ---- accept / resample -------------------------------------------------------------
            total = law_sums(q, p) if self.check_finite else None  # read after the host copies below
            if self.validate:
                check_probs("p", p)
                check_probs("q", q)
            n, y = self.verify(p, q, x, u_acc, u_fin)  # (A,), (A,)
            n_h, y_h, x_h = n.cpu().numpy(), y.cpu().numpy(), x.cpu().numpy()  # host copies
            self._check_finite(p, q, total, rnd)  # before anything of this round is emitted
            emit, m, done = emit_round(x_h, n_h, y_h, max_new_tokens - n_out[idx], rows.alive, eos_token_id)
            # positions >= n_out hold PAD for every sequence, so finished rows (m = 0, all PAD) may write too
            out[idx[:, None], n_out[idx][:, None] + j] = emit
            n_out[idx] += m
            self._roll_back(rows, n_h, x_h, y_h, y)
            sync()
            t3 = time.perf_counter()
            # ---- instrumentation (live rows only; acceptance before EOS/length truncation) -------
            stats.add_round(A, np.bincount(n_h[rows.alive], minlength=k + 1), int(m.sum()), t1 - tic, t2 - t1, t3 - t2)
            clock["draft"] += t1 - tic
            clock["target"] += t2 - t1
            clock["sampler"] += t3 - t2
            if self._retire(rows, done):
                break
        tokens = torch.from_numpy(np.ascontiguousarray(out[:, :max_new_tokens])).to(dev)
        return GenerationResult(tokens=tokens, lengths=torch.from_numpy(n_out).to(dev), stats=stats, timings=clock)

    def _check_finite(self, p, q, total, rnd: int) -> None:
        """Round ``rnd``'s warped laws must be finite; ``total`` the 0-d :func:`law_sums` of q and p, or None
        (check off)."""
        if total is None or math.isfinite(total.item()):
            return
        check_finite_laws("draft", q, f"round {rnd}", self.config)
        check_finite_laws("target", p, f"round {rnd}", self.config)

    def _prefill(self, prompts) -> _Rows:
        """Both models consume every prompt token but the last, which is pending for both."""
        dev = self.target.device
        batch, last = prompt_batch(prompts, self.target.vocab_size, dev)  # last (B,)
        tstate = self.target.prefill(batch)
        dstate = self.draft.prefill(batch)
        B = last.shape[0]
        return _Rows(tstate, dstate, t_pending=last, d_pending=torch.stack([last, torch.zeros_like(last)], 1),
                     d_npend=torch.ones(B, dtype=torch.long, device=dev), d_two=np.zeros(B, dtype=bool),
                     idx=np.arange(B), alive=np.ones(B, dtype=bool))

    def _propose(self, rows: _Rows, u_draft: torch.Tensor, rnd: int = 0):
        """The draft's k proposals x_i ~ q_i: q (A, k, V) and tokens (A, k+1) = t_pending, x_1..x_k."""
        A, V = rows.idx.size, self.target.vocab_size
        where = f"round {rnd}"
        logits = check_logits_vocab("draft", self.draft, self.draft.forward(rows.dstate, rows.d_pending, rows.d_npend),
                                    where)  # (A, 2, V)
        if not rows.d_two.any():  # (A, V) after the last fed token
            logits = logits[:, 0]
        else:
            logits = logits.gather(1, (rows.d_npend - 1).view(A, 1, 1).expand(A, 1, V)).squeeze(1)
        qs, tokens = [], [rows.t_pending]
        for i in range(self.k):
            q_i = self.warp_draft(logits)  # (A, V)
            x_i = self.draw_draft(q_i, u_draft[:, i])  # (A,)
            qs.append(q_i)
            tokens.append(x_i)
            if i < self.k - 1:
                logits = check_logits_vocab("draft", self.draft, self.draft.forward(rows.dstate, x_i.unsqueeze(1)),
                                            where)[:, 0]  # (A, V)
        return torch.stack(qs, 1), torch.stack(tokens, 1)

    def _roll_back(self, rows: _Rows, n_h, x_h, y_h, y) -> None:
        """Roll both models back to the accepted prefix; y (and x_k, after n = k, for the draft) become pending.

        The target fed pending + x_1..x_k and keeps pending + x_1..x_n; the draft fed up to x_{k-1}
        and keeps up to x_min(n, k-1).  Host arrays n_h, x_h, y_h; y (A,) on the device."""
        k, dev = self.k, self.target.device
        self.target.rollback(rows.tstate, rows.tstate.lengths + torch.from_numpy(n_h - k).to(dev))
        self.draft.rollback(rows.dstate, rows.dstate.lengths + torch.from_numpy(np.minimum(n_h, k - 1) - (k - 1)).to(dev))
        d_two = n_h == k  # the draft never fed x_k: it becomes pending, with y
        rows.d_pending = torch.from_numpy(np.stack([np.where(d_two, x_h[:, -1], y_h),
                                                    np.where(d_two, y_h, 0)], 1)).to(dev)  # (A, 2)
        rows.d_npend = torch.from_numpy(1 + d_two.astype(np.int64)).to(dev)  # (A,)
        rows.d_two = d_two
        rows.t_pending = y

    def _retire(self, rows: _Rows, done: np.ndarray) -> bool:
        """Mark sequences that ended this round; compact the batch when fewer than ``compact_below`` of it
        are alive.  True when no sequence is left."""
        rows.alive = rows.alive & ~done
        n_alive = int(rows.alive.sum())
        if n_alive == 0:
            return True
        if n_alive < self.compact_below * rows.idx.size:
            sel_h = rows.alive.nonzero()[0]
            sel = torch.from_numpy(sel_h).to(self.target.device)
            rows.idx, rows.alive, rows.d_two = rows.idx[sel_h], rows.alive[sel_h], rows.d_two[sel_h]
            rows.tstate = self.target.select(rows.tstate, sel)
            rows.dstate = self.draft.select(rows.dstate, sel)
            rows.d_pending, rows.d_npend, rows.t_pending = rows.d_pending[sel], rows.d_npend[sel], rows.t_pending[sel]
        return False


def speculative_generate(target: LanguageModel, draft: LanguageModel, prompts: Prompts, *, k: int,
                         max_new_tokens: int, config: SamplingConfig = SamplingConfig(),
                         eos_token_id: Optional[int] = None,
                         generator: Optional[torch.Generator] = None) -> GenerationResult:
    """Sample continuations of ``prompts`` from ``target``, using ``draft`` to propose k tokens a round.

    This is the *sampler call signature* the harness verifies: any function with these arguments
    that returns a :class:`GenerationResult` can be plugged into ``python -m harness verify``.
    The reference sampler, so it opts in to the lookup-table loop for two n-gram models.
    """
    sampler = SpeculativeSampler(target, draft, k, config, tabular=True)
    return sampler.generate(prompts, max_new_tokens, eos_token_id, generator)
