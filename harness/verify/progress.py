"""The draw's progress bar: progress in expected work, and an ETA from the measured cost of each kind of work.

A token of the exact-law scenarios (vectorised n-gram draws) costs ~0.1 µs of a core; a token of the real-model
runs costs thousands of times more (transformer forwards): ~600 µs on the shipped tiny pair, ~120 µs on the
exact transformer pair (batches of 2,048 rows).  Counted in tokens, with tqdm's rate, the bar's first ETA read
97:41:56 for a run of two minutes: the real-model tasks are drawn first (the longest), and tokens at their rate
were extrapolated to a billion exact-law tokens.  Here:

* the bar's percentage counts expected work, :data:`COST_US` x tokens by kind (priors per token from the
  committed run, results/verify/meta.json ``timing``: 1.105 G exact-law tokens, 110,784 tiny-pair tokens in 66 s
  of sampler time; the exact pair's from a 360 k-token ``--scenario real_model`` draw, 56 s of CPU; AMD EPYC);
* the ETA is what is left of each kind times that kind's *measured* seconds per token (each finished task
  reports its own compute seconds), over the workers drawing in parallel.  A kind not yet measured is priced by
  its prior times the machine's measured speed against the priors (the other kinds'); before any task has
  finished there is no ETA (``?``), not a guess from a start-up with nothing counted.  A long task in flight is
  not credited until it finishes, so the ETA errs long, by at most one task per worker.
"""
from __future__ import annotations

import sys
import threading
from typing import Optional

from harness.verify.shards import ExactTask, RealTask

__all__ = ["COST_US", "CostBar", "kind_of", "eta_seconds"]

COST_US = {"law": 0.12, "exact": 120.0, "real": 600.0}  # prior core-microseconds per token, by kind of work
MIN_MEASURED = {"law": 100_000, "exact": 1_000, "real": 1_000}  # tokens before a kind's own rate replaces its prior


def kind_of(task) -> str:
    """The kind of work of a draw task: ``real`` (tiny pair), ``exact`` (exact transformer pair) or ``law``."""
    return "real" if isinstance(task, RealTask) else "exact" if isinstance(task, ExactTask) else "law"


def eta_seconds(left: dict, done_tokens: dict, done_s: dict, lanes: int) -> Optional[float]:
    """Seconds to draw ``left`` (tokens per kind) on ``lanes`` parallel workers, given the tokens and compute
    seconds of the finished tasks per kind; None before any finished task was timed."""
    measured = [k for k in done_s if done_tokens.get(k, 0) > 0 and done_s[k] > 0]
    if not measured:
        return None
    speed = sum(done_s[k] for k in measured) / sum(COST_US[k] * 1e-6 * done_tokens[k] for k in measured)
    cost = 0.0
    for kind, n in left.items():
        if n <= 0:
            continue
        own = done_tokens.get(kind, 0) >= MIN_MEASURED[kind] and done_s.get(kind, 0) > 0
        per_token = done_s[kind] / done_tokens[kind] if own else COST_US[kind] * 1e-6 * speed
        cost += n * per_token
    return cost / max(1, lanes)


class CostBar:
    """A tqdm bar over expected work with the measured ETA of :func:`eta_seconds` and the tokens drawn.
    ``totals``: tokens to draw per kind; ``lanes``: workers drawing in parallel.  :meth:`update` takes the tokens
    of a finished task, their kind and (where timed) the task's compute seconds; :meth:`drop` takes tokens that
    will not be drawn.  Safe to call from the background real-model thread."""

    def __init__(self, totals: dict, desc: str, progress: bool, lanes: int = 1, file=None):
        from tqdm import tqdm
        self.left = {k: int(v) for k, v in totals.items()}
        self.done_tokens = {k: 0 for k in totals}
        self.done_s = {k: 0.0 for k in totals}
        self.lanes, self._lock = lanes, threading.Lock()
        self.bar = tqdm(total=self._cost(totals), desc=desc, disable=not progress, file=file or sys.stderr,
                        mininterval=1.0, bar_format="{desc}: {percentage:3.0f}%|{bar}| [{elapsed}{postfix}]")
        self._show()

    @staticmethod
    def _cost(tokens_by_kind: dict) -> float:
        return sum(COST_US[k] * n for k, n in tokens_by_kind.items()) / 1e6  # expected core-seconds

    def eta(self) -> Optional[float]:
        return eta_seconds(self.left, self.done_tokens, self.done_s, self.lanes)

    def _show(self) -> None:
        from tqdm import tqdm
        eta = self.eta()
        drawn, total = sum(self.done_tokens.values()), sum(self.done_tokens.values()) + sum(self.left.values())
        left = "?" if eta is None else tqdm.format_interval(eta)
        self.bar.set_postfix_str(f"ETA {left}, {tqdm.format_sizeof(drawn)}/{tqdm.format_sizeof(total)} tok",
                                 refresh=False)

    def update(self, tokens: int, kind: str = "law", seconds: Optional[float] = None) -> None:
        """A finished task's ``tokens`` of ``kind``; ``seconds``: its compute time (None: not timed, e.g. resumed)."""
        with self._lock:
            self.left[kind] -= int(tokens)
            if seconds is not None:
                self.done_tokens[kind] += int(tokens)
                self.done_s[kind] += float(seconds)
            self._show()
            self.bar.update(self._cost({kind: tokens}))

    def drop(self, tokens: int, kind: str = "law") -> None:
        """``tokens`` of ``kind`` that will not be drawn (a run stopped early) leave the total."""
        with self._lock:
            self.left[kind] -= int(tokens)
            self.bar.total -= self._cost({kind: tokens})
            self._show()
            self.bar.refresh()

    def close(self) -> None:
        self.bar.close()
