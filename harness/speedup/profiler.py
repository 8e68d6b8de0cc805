"""Per-call timing of target and draft forwards, and of the sampler's own logic.

What is timed (``op`` column; the names :class:`harness.speedup.costmodel.CostTable` looks up)
    <role>.forward   one ``model.forward`` scoring n tokens for each of B sequences, from a state
                     holding ``context_len`` tokens (rolled back after each call, so the context
                     stays fixed);  n = 1 .. k + 1
    <role>.rollback  the ``model.rollback`` that drops those n tokens again
    <role>.prefill   ``model.prefill`` of B prompts, n = tokens consumed (prompt length - 1)
    spec.overhead    per round: a speculative run on zero-cost models (:class:`NullModel`, same V,
                     dtype, device and sampling controls; all drafts accepted) minus the null calls,
                     divided by the rounds; n = k
    ar.overhead      per token: the same for target-only decoding; n = 1

In situ (:func:`profile_in_situ`, what the sweep's real-model cells use): the same operations timed
inside real runs of the very sampler calls that are measured — a target-only and a speculative run of
the cell (own seed), with every model call wrapped by :class:`CallRecorder`.  ``<role>.forward`` and
``<role>.prefill`` are then the calls as the runs make them (context growing from the prompt, the
other model's weights and the sampler's tensors passing through the caches between calls), and
``spec.overhead`` / ``ar.overhead`` are everything else in the run (warping, drawing, verification,
roll-backs, book-keeping, the call's own set-up) per round / per token.  The isolated profile of a
model on its own (``profile_model``) and the null-model overhead (``profile_sampler_overhead``) differ
from that state: on the tiny pair the null models' overhead was about half of the overhead measured
in situ, and the model fed with it over-predicted the speedup.  In-situ rows carry ``context_len`` -1
(the runs' own contexts, prompt to prompt + max_new_tokens).

How it is timed
    CPU: the clock (``time.perf_counter`` unless a clock is injected, e.g. the virtual clock of
    :mod:`harness.speedup.synthetic`) around each call.  CUDA: ``torch.cuda.Event(enable_timing=True)``
    recorded around the call and read after ``torch.cuda.synchronize()``; the synchronised wall
    time is kept too (``wall_s``).  ``warmup`` full passes are discarded first; then ``repeats``
    passes visit every (op, n, B) once each, in a fresh random order per pass, so load spikes
    on a shared machine spread over all points instead of biasing one.
    Timing does not depend on weights: a model with random weights of a realistic shape gives the
    cost curves of the real one.

Output: one DataFrame row per (op, n, B) with the summaries (median, mean, std, quartiles, min,
max, count) *and* the raw samples (``samples_s``, a list) next to them.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import pandas as pd
import torch

from harness.core.provenance import portable
from specimpl.autoregressive import autoregressive_generate
from specimpl.errors import check_arg
from specimpl.model import LanguageModel, ModelState, Prompts, as_prompt_list
from specimpl.sampling import SamplingConfig
from specimpl.speculative import SpeculativeSampler
from specimpl.speculative import speculative_generate

__all__ = ["NullModel", "profile_model", "profile_sampler_overhead", "profile_pair", "summarise", "Timer",
           "CallRecorder", "profile_in_situ"]


class _PerfClock:
    virtual = False

    @staticmethod
    def now() -> float:
        return time.perf_counter()


class Timer:
    """Times one callable: CUDA events on a CUDA device (unless the clock is virtual), else the clock."""

    def __init__(self, device="cpu", clock=None):
        self.device = torch.device(device)
        self.clock = _PerfClock() if clock is None else clock
        self.cuda = self.device.type == "cuda" and not getattr(self.clock, "virtual", False)

    @property
    def kind(self) -> str:
        """How this timer reads time: 'cuda_events', 'virtual' or 'perf_counter'."""
        if self.cuda:
            return "cuda_events"
        return "virtual" if getattr(self.clock, "virtual", False) else "perf_counter"

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def __call__(self, fn):
        """Run ``fn()``; return (result, seconds, wall seconds, process CPU seconds)."""
        if self.cuda:
            self.sync()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            w0, c0 = time.perf_counter(), time.process_time()
            start.record()
            out = fn()
            end.record()
            self.sync()
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            return out, start.elapsed_time(end) / 1e3, wall, cpu
        self.sync()
        c0 = time.process_time()
        t0 = self.clock.now()
        out = fn()
        self.sync()
        dt = self.clock.now() - t0
        cpu = dt if getattr(self.clock, "virtual", False) else time.process_time() - c0
        return out, dt, dt, cpu


@dataclass
class NullState(ModelState):
    pass


class NullModel(LanguageModel):
    """A zero-cost model: every position's logits are one fixed random row per sequence.

    Used to time the sampler's own logic.  With the same null model as target and draft, p = q
    at every position, so every draft is accepted and a run of R rounds emits R (k + 1) tokens.
    """

    def __init__(self, vocab_size: int, max_batch: int = 64, dtype=torch.float32, device="cpu", seed: int = 0):
        check_arg(isinstance(vocab_size, int) and vocab_size >= 2, "vocab_size", vocab_size, "an integer >= 2")
        self.vocab_size, self.dtype, self.device = vocab_size, dtype, torch.device(device)
        g = torch.Generator().manual_seed(seed)
        self._logits = torch.randn(max_batch, 1, vocab_size, generator=g).to(dtype=dtype, device=self.device)  # (Bmax, 1, V)
        self.name = f"null(V={vocab_size})"

    def prefill(self, prompts: Prompts) -> NullState:
        plist = as_prompt_list(prompts, self.vocab_size)
        check_arg(len(plist) <= self._logits.shape[0], "prompts", f"batch of {len(plist)}",
                  f"at most max_batch={self._logits.shape[0]} sequences")
        return NullState(lengths=torch.tensor([len(p) - 1 for p in plist], dtype=torch.long, device=self.device))

    def forward(self, state, tokens, n_new=None):
        B, T = tokens.shape
        state.lengths = state.lengths + (T if n_new is None else n_new)
        return self._logits[:B].expand(B, T, self.vocab_size)  # (B, T, V)

    def rollback(self, state, lengths):
        state.lengths = torch.minimum(state.lengths, lengths)

    def select(self, state, index):
        return NullState(lengths=state.lengths[index])


def _check_ints(name, values, lo=1):
    check_arg(isinstance(values, (list, tuple, range)) and len(values) > 0
              and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= lo for v in values),
              name, values, f"a non-empty list of integers >= {lo}")
    return sorted(set(int(v) for v in values))


def summarise(samples: dict, meta: dict, wall: Optional[dict] = None, cpu: Optional[dict] = None) -> pd.DataFrame:
    """Rows (op, n, batch) of summaries, the raw samples kept in ``samples_s``.

    ``cpu`` (same keys) adds the process CPU time of each sample: ``cpu_samples_s``, ``cpu_median_s``,
    ``cpu_mean_s``.  On a CPU shared with other work, single-threaded CPU time is what the call
    costs the process, wall time what it cost in that minute's contention.
    """
    rows = []
    for (op, n, B), xs in samples.items():
        a = np.asarray(xs, dtype=np.float64)
        q25, q50, q75 = np.percentile(a, [25, 50, 75])
        row = {**meta, "op": op, "role": op.split(".")[0], "n": n, "batch": B, "count": a.size, "median_s": q50,
               "mean_s": a.mean(), "std_s": a.std(ddof=1) if a.size > 1 else 0.0, "q25_s": q25, "q75_s": q75,
               "min_s": a.min(), "max_s": a.max(), "samples_s": [float(x) for x in a]}
        if wall is not None:
            row["wall_median_s"] = float(np.median(wall[(op, n, B)]))
        if cpu is not None:
            c = np.asarray(cpu[(op, n, B)], dtype=np.float64)
            row.update(cpu_median_s=float(np.median(c)), cpu_mean_s=float(c.mean()),
                       cpu_samples_s=[float(x) for x in c])
        rows.append(row)
    return pd.DataFrame(rows).sort_values(["op", "batch", "n"], ignore_index=True)


def _random_prompts(B: int, length: int, V: int, g: torch.Generator) -> list[list[int]]:
    return torch.randint(0, V, (B, length), generator=g).tolist()


@torch.no_grad()
def profile_model(model: LanguageModel, role: str, n_tokens: Sequence[int], batch_sizes: Sequence[int] = (1,),
                  context_len: int = 32, prompt_len: Optional[int] = None, repeats: int = 15, warmup: int = 2,
                  clock=None, seed: int = 0, progress=None) -> pd.DataFrame:
    """Time ``<role>.forward`` (n tokens at batch B, fixed context), ``<role>.rollback`` and ``<role>.prefill``.

    ``prompt_len`` (default ``context_len``) is the prompt length whose prefill is timed.
    """
    check_arg(isinstance(model, LanguageModel), "model", type(model).__name__, "a specimpl LanguageModel")
    check_arg(isinstance(role, str) and role.isidentifier(), "role", role, "a name such as 'target' or 'draft'")
    ns, bs = _check_ints("n_tokens", n_tokens), _check_ints("batch_sizes", batch_sizes)
    check_arg(isinstance(context_len, int) and context_len >= 1, "context_len", context_len, "an integer >= 1")
    check_arg(isinstance(repeats, int) and repeats >= 1, "repeats", repeats, "an integer >= 1")
    check_arg(isinstance(warmup, int) and warmup >= 0, "warmup", warmup, "an integer >= 0")
    prompt_len = context_len if prompt_len is None else prompt_len
    check_arg(isinstance(prompt_len, int) and prompt_len >= 1, "prompt_len", prompt_len, "an integer >= 1")
    dev = torch.device(getattr(model, "device", "cpu"))
    timer = Timer(dev, clock)
    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    V = model.vocab_size
    states = {B: model.prefill(_random_prompts(B, context_len + 1, V, g)) for B in bs}
    prompts = {B: _random_prompts(B, prompt_len, V, g) for B in bs}
    points = [("forward", n, B) for B in bs for n in ns] + [("prefill", prompt_len - 1, B) for B in bs]
    samples: dict = {}
    wall: dict = {}
    cpu: dict = {}
    for rep in range(warmup + repeats):
        for i in rng.permutation(len(points)):
            kind, n, B = points[i]
            if kind == "forward":
                st = states[B]
                tok = torch.randint(0, V, (B, n), generator=g).to(dev)  # (B, n)
                res = [(f"{role}.forward", *timer(lambda: model.forward(st, tok))[1:]),
                       (f"{role}.rollback", *timer(lambda: model.rollback(st, st.lengths - n))[1:])]
            else:
                res = [(f"{role}.prefill", *timer(lambda: model.prefill(prompts[B]))[1:])]
            if rep >= warmup:
                for op, t, wt, ct in res:
                    samples.setdefault((op, n, B), []).append(t)
                    wall.setdefault((op, n, B), []).append(wt)
                    cpu.setdefault((op, n, B), []).append(ct)
        if progress is not None:
            progress.update(1)
    meta = {"model": portable(getattr(model, "name", type(model).__name__)), "device": str(dev),
            "timer": timer.kind, "context_len": context_len}
    return summarise(samples, meta, wall, cpu)


def _null_call_costs(tnull, dnull, ks, bs, prompt_len, repeats, clock, seed) -> dict:
    """{(op, n, B): (mean seconds, mean CPU seconds)} of the null models' own calls (``t.*``, ``d.*``)."""
    nt = {}
    for role, m, ns in (("t", tnull, sorted({1} | {k + 1 for k in ks})), ("d", dnull, [1, 2])):
        nprof = profile_model(m, role, ns, bs, context_len=prompt_len, prompt_len=prompt_len,
                              repeats=repeats, warmup=1, clock=clock, seed=seed)
        nt.update({(r.op, r.n, r.batch): (r.mean_s, r.cpu_mean_s) for r in nprof.itertuples()})
    return nt


def _null_cost(nt: dict, kind: str, k: int, B: int, P1: int, r: int) -> list:
    """[seconds, CPU seconds] the null calls of one timed run took: a speculative run of r rounds at draft
    length k ('spec'), or r target-only steps ('ar'), each after a prefill of P1 tokens."""
    if kind == "ar":
        return [nt[("t.prefill", P1, B)][j] + r * nt[("t.forward", 1, B)][j] for j in (0, 1)]
    return [nt[("t.prefill", P1, B)][j] + nt[("d.prefill", P1, B)][j]
            + r * (nt[("d.forward", 2, B)][j] + (k - 1) * nt[("d.forward", 1, B)][j]
                   + nt[("t.forward", k + 1, B)][j] + nt[("t.rollback", 1, B)][j]
                   + nt[("d.rollback", 1, B)][j]) for j in (0, 1)]


@torch.no_grad()
def profile_sampler_overhead(vocab_size: int, ks: Sequence[int], batch_sizes: Sequence[int] = (1,),
                             config: SamplingConfig = SamplingConfig(), rounds: int = 16, prompt_len: int = 8,
                             repeats: int = 7, warmup: int = 1, dtype=torch.float32, device="cpu", clock=None,
                             seed: int = 0, sampler_cls=SpeculativeSampler, wrap_target=None,
                             wrap_draft=None) -> pd.DataFrame:
    """``spec.overhead`` (per round, n = k) and ``ar.overhead`` (per token, n = 1): the samplers' own logic.

    Each sample runs the real sampler on :class:`NullModel` target and draft for ``rounds`` rounds
    and subtracts the null calls' own (profiled) time, so what is left is warping, drawing,
    verification and book-keeping — the part of a round that neither model's forward pays for.
    ``wrap_target`` / ``wrap_draft`` (model -> model) may give the null models the real ones'
    timing behaviour (e.g. :class:`harness.speedup.synthetic.TimedModel` waits), so that the overhead is
    measured between calls like the real ones (caches cooled by a wait, a CPU handed to another
    process); their calls' profiled time is subtracted all the same.
    """
    ks, bs = _check_ints("ks", ks), _check_ints("batch_sizes", batch_sizes)
    check_arg(isinstance(rounds, int) and rounds >= 1, "rounds", rounds, "an integer >= 1")
    dev = torch.device(device)
    null = NullModel(vocab_size, max_batch=max(bs), dtype=dtype, device=dev, seed=seed)
    tnull = null if wrap_target is None else wrap_target(null)
    dnull = null if wrap_draft is None else wrap_draft(null)
    timer = Timer(dev, clock)
    g = torch.Generator(device=dev).manual_seed(seed)
    gp = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    prompts = {B: _random_prompts(B, prompt_len, vocab_size, gp) for B in bs}
    nt = _null_call_costs(tnull, dnull, ks, bs, prompt_len, max(repeats, 5), clock, seed)
    points = [("spec", k, B) for B in bs for k in ks] + [("ar", 1, B) for B in bs]
    samples: dict = {}
    cpu: dict = {}
    for rep in range(warmup + repeats):
        for i in rng.permutation(len(points)):
            kind, k, B = points[i]
            if kind == "spec":
                sampler = sampler_cls(tnull, dnull, k, config)
                res, dt, _, ct = timer(lambda: sampler.generate(prompts[B], rounds * (k + 1), None, g))
                r = len(res.stats.rounds)
            else:
                res, dt, _, ct = timer(lambda: autoregressive_generate(tnull, prompts[B], max_new_tokens=rounds,
                                                                       config=config, generator=g))
                r = rounds
            null_cost = _null_cost(nt, kind, k, B, prompt_len - 1, r)
            if rep >= warmup:
                samples.setdefault((f"{kind}.overhead", k, B), []).append((dt - null_cost[0]) / r)
                cpu.setdefault((f"{kind}.overhead", k, B), []).append((ct - null_cost[1]) / r)
    meta = {"model": f"sampler(V={vocab_size},{config.describe()},{str(dtype).replace('torch.', '')})",
            "device": str(dev), "timer": timer.kind, "context_len": prompt_len}
    return summarise(samples, meta, cpu=cpu)


def profile_pair(target: LanguageModel, draft: LanguageModel, ks: Sequence[int], batch_sizes: Sequence[int] = (1,),
                 prompt_len: int = 16, max_new_tokens: int = 64, config: SamplingConfig = SamplingConfig(),
                 repeats: int = 15, warmup: int = 2, clock=None, seed: int = 0,
                 overhead_like_models: bool = False) -> pd.DataFrame:
    """Everything :class:`harness.speedup.costmodel.CostTable` needs for a (target, draft) pair and these k, B.

    Forwards are timed at the context a run sees half-way: prompt_len + max_new_tokens // 2 tokens.
    With ``overhead_like_models``, a model with a ``timed_like(model) -> model`` method
    (:class:`harness.speedup.synthetic.TimedModel`) lends its call timing to the null models of the overhead
    profile (slower: every null call then waits as long as the real one).
    """
    ks = _check_ints("ks", ks)
    ctx = prompt_len + max_new_tokens // 2
    parts = [
        profile_model(target, "target", sorted({1} | {k + 1 for k in ks}), batch_sizes, context_len=ctx,
                      prompt_len=prompt_len, repeats=repeats, warmup=warmup, clock=clock, seed=seed),
        profile_model(draft, "draft", [1, 2], batch_sizes, context_len=ctx, prompt_len=prompt_len,
                      repeats=repeats, warmup=warmup, clock=clock, seed=seed + 1),
        profile_sampler_overhead(target.vocab_size, ks, batch_sizes, config, prompt_len=prompt_len,
                                 repeats=max(3, repeats // 2), dtype=getattr(target, "dtype", torch.float32),
                                 device=getattr(target, "device", "cpu"), clock=clock, seed=seed + 2,
                                 wrap_target=getattr(target, "timed_like", None) if overhead_like_models else None,
                                 wrap_draft=getattr(draft, "timed_like", None) if overhead_like_models else None),
    ]
    return pd.concat(parts, ignore_index=True)


class CallRecorder(LanguageModel):
    """``inner`` with every ``prefill`` and ``forward`` timed by ``timer`` and appended to ``log`` as
    (op, n tokens, batch, seconds, wall seconds, CPU seconds); ``rollback`` and ``select`` pass through
    untimed (their cost is the sampler's overhead)."""

    def __init__(self, inner: LanguageModel, role: str, timer: Timer, log: list):
        check_arg(isinstance(inner, LanguageModel), "inner", type(inner).__name__, "a specimpl LanguageModel")
        self.inner, self.role, self.timer, self.log = inner, role, timer, log
        self.vocab_size, self.device = inner.vocab_size, inner.device
        self.dtype = getattr(inner, "dtype", torch.float32)
        self.name = getattr(inner, "name", type(inner).__name__)

    def prefill(self, prompts: Prompts) -> ModelState:
        plist = as_prompt_list(prompts, self.vocab_size)
        state, *t = self.timer(lambda: self.inner.prefill(plist))
        self.log.append((f"{self.role}.prefill", max(len(p) for p in plist) - 1, len(plist), *t))
        return state

    def forward(self, state, tokens, n_new=None):
        out, *t = self.timer(lambda: self.inner.forward(state, tokens, n_new))
        self.log.append((f"{self.role}.forward", int(tokens.shape[1]), int(tokens.shape[0]), *t))
        return out  # (B, T, V)

    def rollback(self, state, lengths) -> None:
        self.inner.rollback(state, lengths)

    def select(self, state, index):
        return self.inner.select(state, index)


def _in_situ_run(timer: Timer, run, log: list, op: str, n: int, B: int, per) -> list:
    """Time ``run()`` (whose model calls append to ``log``); the rows of its calls and one row
    (``op``, n, B) of the rest of the run divided by ``per(result)`` (rounds or tokens)."""
    res, *t = timer(run)
    calls = np.asarray([row[3:] for row in log], dtype=np.float64).sum(0) if log else np.zeros(3)
    m = per(res)
    return list(log) + [(op, n, B, *((np.asarray(t) - calls) / m))]


@torch.no_grad()
def profile_in_situ(target: LanguageModel, draft: LanguageModel, prompts: Prompts, k: int, max_new_tokens: int,
                    config: SamplingConfig = SamplingConfig(), seed: int = 0, clock=None, passes: int = 1,
                    sampler=None) -> pd.DataFrame:
    """Every operation :class:`harness.speedup.costmodel.CostTable` needs, timed inside ``passes`` real target-only
    and speculative runs (``sampler``, default :func:`specimpl.speculative.speculative_generate`) of
    ``prompts`` with draft length ``k``.  Rows as :func:`summarise`'s, one per (op, n, B) met; the
    forwards' samples are every call the runs made."""
    check_arg(isinstance(passes, int) and passes >= 1, "passes", passes, "an integer >= 1")
    sampler = speculative_generate if sampler is None else sampler
    dev = torch.device(getattr(target, "device", "cpu"))
    timer = Timer(dev, clock)
    g = torch.Generator(device=dev).manual_seed(seed)
    B, N = len(as_prompt_list(prompts, target.vocab_size)), max_new_tokens
    rows: list = []
    for _ in range(passes):
        log: list = []
        t = CallRecorder(target, "target", timer, log)
        rows += _in_situ_run(timer, lambda: autoregressive_generate(t, prompts, max_new_tokens=N, config=config,
                                                                    generator=g),
                             log, "ar.overhead", 1, B, lambda res: sum(r[0] == "target.forward" for r in log))
        log = []
        t, d = CallRecorder(target, "target", timer, log), CallRecorder(draft, "draft", timer, log)
        rows += _in_situ_run(timer, lambda: sampler(t, d, prompts, k=k, max_new_tokens=N, config=config,
                                                    generator=g),
                             log, "spec.overhead", k, B, lambda res: len(res.stats.rounds))
    samples, wall, cpu = {}, {}, {}
    for op, n, b, s, w, c in rows:
        samples.setdefault((op, n, b), []).append(s)
        wall.setdefault((op, n, b), []).append(w)
        cpu.setdefault((op, n, b), []).append(c)
    meta = {"model": f"in situ: {portable(getattr(target, 'name', 'target'))} / {portable(getattr(draft, 'name', 'draft'))}",
            "device": str(dev), "timer": timer.kind, "context_len": -1}
    return summarise(samples, meta, wall, cpu)
