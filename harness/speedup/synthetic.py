"""Models with set, calibrated costs: validate the cost model where every cost is known.

A :class:`TimedModel` wraps any :class:`specimpl.model.LanguageModel` and makes each call take a
set time, a function of the tokens fed and the batch size (:class:`CallCost`):

    T(n, B) = t1 * (1 + token_slope * (n - 1)) * (1 + batch_slope * (B - 1))

token_slope = 0 is a purely memory-bound model (scoring k + 1 tokens costs what scoring one
does); token_slope = 1 is compute-bound (cost proportional to tokens).  The wrapped model does
the real work (an n-gram table: microseconds), then the call waits until its deadline.

Time is read from an injected clock: :class:`WallClock` (``time.perf_counter``; sleeps, or spins
when asked), :class:`HybridClock` (process CPU time for everything but the model calls, which
cost exactly their set time; nothing sleeps), or :class:`VirtualClock`, whose waits advance a
counter instantly, so a whole sweep runs in milliseconds with exactly known costs (the tests use it).

:func:`synthetic_pair` puts two timed n-gram models at a dialled acceptance: the draft's support
is disjoint from the target's except for a mixture weight alpha towards the target
(:func:`specimpl.ngram.disjoint_draft`), so sum_x min(p, q) = alpha in every context: acceptance
is iid across positions and equal to alpha exactly, the analytic model's own assumption.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Optional

import torch

from specimpl.errors import check_arg
from specimpl.model import LanguageModel, ModelState, Prompts, as_prompt_list
from specimpl.ngram import NGramModel, disjoint_draft, random_ngram

__all__ = ["CallCost", "WallClock", "HybridClock", "VirtualClock", "TimedModel", "synthetic_pair"]


@dataclass(frozen=True)
class CallCost:
    """Set cost of one call: T(n, B) = t1_s (1 + token_slope (n - 1)) (1 + batch_slope (B - 1)) seconds."""

    t1_s: float
    token_slope: float = 0.0
    batch_slope: float = 0.0

    def __post_init__(self):
        for name in ("t1_s", "token_slope", "batch_slope"):
            v = getattr(self, name)
            check_arg(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0,
                      name, v, "a finite number >= 0")

    def __call__(self, n: int, B: int) -> float:
        return self.t1_s * (1.0 + self.token_slope * (max(n, 1) - 1)) * (1.0 + self.batch_slope * (B - 1))

    def scaled(self, factor: float) -> "CallCost":
        return CallCost(self.t1_s * factor, self.token_slope, self.batch_slope)


class WallClock:
    """Real time (``time.perf_counter``).  Waits sleep (default: frees the CPU) or spin (``spin=True``)."""

    virtual = False

    def __init__(self, spin: bool = False):
        self.spin = spin

    def now(self) -> float:
        return time.perf_counter()

    def wait_until(self, deadline: float) -> None:
        if self.spin:
            while time.perf_counter() < deadline:
                pass
            return
        dt = deadline - time.perf_counter()
        if dt > 0:
            time.sleep(dt)


class HybridClock:
    """Process CPU time, plus the set cost of every model call: ``wait_until`` adds the wait, sleeps not.

    The sampler's own logic is timed for real (CPU seconds of this process, which other processes on
    a shared machine disturb far less than wall time), each model call costs exactly its set time.
    Runs take only their CPU time.
    """

    virtual = False

    def __init__(self):
        self.offset = 0.0

    def now(self) -> float:
        return time.process_time() + self.offset

    def wait_until(self, deadline: float) -> None:
        dt = deadline - self.now()
        if dt > 0:
            self.offset += dt


class VirtualClock:
    """Simulated time: ``wait_until`` jumps to the deadline; the real work between waits takes no time."""

    virtual = True

    def __init__(self, start: float = 0.0):
        self.t = float(start)

    def now(self) -> float:
        return self.t

    def wait_until(self, deadline: float) -> None:
        self.t = max(self.t, deadline)


class TimedModel(LanguageModel):
    """``inner`` with each prefill / forward taking ``cost(n tokens fed, B)`` on ``clock``."""

    def __init__(self, inner: LanguageModel, cost: CallCost, clock=None, name: Optional[str] = None):
        check_arg(isinstance(inner, LanguageModel), "inner", type(inner).__name__, "a specimpl LanguageModel")
        check_arg(isinstance(cost, CallCost), "cost", cost, "a harness.speedup.synthetic.CallCost")
        self.inner, self.cost = inner, cost
        self.clock = WallClock() if clock is None else clock
        self.vocab_size = inner.vocab_size
        self.device = inner.device
        self.dtype = getattr(inner, "dtype", torch.float32)
        self.name = name or f"timed({inner.name},{cost.t1_s * 1e3:g}ms)"

    def prefill(self, prompts: Prompts) -> ModelState:
        start = self.clock.now()
        plist = as_prompt_list(prompts, self.vocab_size)
        state = self.inner.prefill(plist)
        self.clock.wait_until(start + self.cost(max(len(p) for p in plist) - 1, len(plist)))
        return state

    def forward(self, state: ModelState, tokens: torch.Tensor, n_new: Optional[torch.Tensor] = None) -> torch.Tensor:
        start = self.clock.now()
        out = self.inner.forward(state, tokens, n_new)  # (B, T, V)
        self.clock.wait_until(start + self.cost(int(tokens.shape[1]), int(tokens.shape[0])))
        return out

    def rollback(self, state: ModelState, lengths: torch.Tensor) -> None:
        self.inner.rollback(state, lengths)

    def select(self, state: ModelState, index: torch.Tensor) -> ModelState:
        return self.inner.select(state, index)

    def timed_like(self, model: LanguageModel) -> "TimedModel":
        """``model`` with this model's call costs and clock (used to time the sampler's overhead)."""
        return TimedModel(model, self.cost, self.clock, name=f"timed({model.name})")

    def __repr__(self):
        return f"TimedModel({self.inner!r}, {self.cost})"


def synthetic_pair(alpha: float, c: float, target_cost: CallCost, vocab_size: int = 32, support: int = 8,
                   order: int = 2, seed: int = 0, clock=None) -> tuple[TimedModel, TimedModel, NGramModel, NGramModel]:
    """(target, draft, target table, draft table) with acceptance exactly ``alpha`` and cost ratio ``c``.

    The target is a random order-``order`` n-gram whose rows put mass on ``support`` < V tokens; the
    draft is :func:`specimpl.ngram.disjoint_draft` with overlap ``alpha``.  The draft's call cost is
    ``target_cost`` scaled by ``c`` (same token and batch slopes).  Both share ``clock``.
    """
    check_arg(isinstance(alpha, (int, float)) and 0 <= alpha <= 1, "alpha", alpha, "a number in [0, 1]")
    check_arg(isinstance(c, (int, float)) and math.isfinite(c) and c >= 0, "c", c, "a finite number >= 0")
    check_arg(isinstance(support, int) and 1 <= support < vocab_size, "support", support,
              f"an integer in [1, vocab_size) = [1, {vocab_size}) so that a disjoint draft exists")
    clock = WallClock() if clock is None else clock
    p = random_ngram(vocab_size, order, concentration=0.5, support=support, seed=seed, name=f"syn_target_s{seed}")
    q = disjoint_draft(p, overlap=float(alpha), seed=seed + 1)
    target = TimedModel(p, target_cost, clock, name=f"syn_target({target_cost.t1_s * 1e3:g}ms)")
    draft = TimedModel(q, target_cost.scaled(c), clock, name=f"syn_draft(alpha={alpha:g},c={c:g})")
    return target, draft, p, q
