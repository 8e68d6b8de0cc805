"""One speculative round of a published method, as forward calls, and the speedup the roofline gives it.

Published measurements come from engines whose rounds differ in shape; a row of
``harness/configs/fidelity/published.toml`` names its method and the calls follow from it:

    chain        k sequential draft calls (the first feeds ``draft_first_tokens`` tokens, default 2:
                 the bonus token and the last accepted one; then 1 token each) and one verification of
                 k + 1 tokens                                  (vLLM draft models and EAGLE, HF assisted
                                                               generation, the A40 self-draft)
    eagle-tree   SGLang's EAGLE tree: ``steps`` draft calls, the first of 1 token, the others of ``topk``
                 tokens (one per branch kept), one verification of ``num_draft`` tokens, and the draft's
                 "extend" call over the tokens just accepted (round(E) tokens)

and emits E tokens per sequence, taken from the row (never fitted):

    tokens_per_round        the published mean accepted length (bonus included: vLLM V1's and SGLang's
                            "acceptance length", Spec-Bench's "#mean accepted tokens")
    accepted_per_position   vLLM's per-position acceptance rates: the fraction of rounds whose position i
                            was accepted (unconditional, so E = 1 + sum; not a chain of conditional alphas)
    alpha                   a per-token acceptance (scalar: iid; list: conditional alpha_i), E = 1 + sum_j
                            prod_{i<=j} alpha_i

    S = E T_t(1, B, L) / (sum_calls T_d(m, B, L) + T_t(n_verify, B, L))

or, for a row measured as a whole fixed-length run (``prompt_tokens`` P and ``output_tokens`` O: output tokens
over the wall time of a batch whose every sequence emits O tokens), with the prefills inside:

    S = (T_t(P) + (O − 1) T_t(1, B, L)) / (T_t(P) + T_d(P) + ((O − 1) / E) T_round)

(T(P): the prompt forward, whose lm_head covers the last token only; it emits the first output token)

Both models see the context L (KV-cache bytes and attention FLOPs in every call), the draft ``draft_context``
instead where its cache is bounded; a mixture-of-experts
target's verification reads the experts its B n_verify tokens are routed to (:mod:`.model`).
"""
from __future__ import annotations

import numpy as np

from harness.speedup.roofline.model import ConfigError, Roofline
from harness.speedup.roofline.speedup import PairCosts, tokens_per_round

__all__ = ["METHODS", "row_tokens", "round_calls", "round_seconds_of", "row_run", "row_speedup"]

METHODS = ("chain", "eagle-tree")


def row_tokens(row: dict, alpha=None):
    """E of the row (module docstring), or None when the row gives no acceptance.  ``alpha`` overrides
    the row's (for the iid alpha a measurement needs)."""
    if alpha is not None:
        return tokens_per_round("chain", alpha, row["k"])
    if row.get("tokens_per_round") is not None:
        e = float(row["tokens_per_round"])
        if not e >= 1.0:
            raise ConfigError(f"row {row['id']}: `tokens_per_round` must be >= 1 (bonus included); got {e!r}")
        return e
    pos = row.get("accepted_per_position")
    if pos is not None:
        a = np.asarray(pos, dtype=np.float64)
        if a.ndim != 1 or a.size > row["k"] or not np.all((a >= 0) & (a <= 1)) or np.any(np.diff(a) > 1e-9):
            raise ConfigError(f"row {row['id']}: `accepted_per_position` must be at most k = {row['k']} "
                              f"non-increasing rates in [0, 1]; got {pos!r}")
        return 1.0 + float(a.sum())
    if row.get("alpha") is not None:
        return tokens_per_round("chain", row["alpha"], row["k"])
    return None


def round_calls(row: dict, e: float) -> tuple[list, int]:
    """(tokens per sequence of each draft call, tokens verified) of one round of the row's method."""
    method, k = row.get("method", "chain"), row["k"]
    if method == "chain":
        return [int(row.get("draft_first_tokens", 2))] + [1] * (k - 1), k + 1
    if method == "eagle-tree":
        try:
            steps, topk, n = (int(row[f]) for f in ("steps", "topk", "num_draft"))
        except KeyError as err:
            raise ConfigError(f"row {row['id']}: method 'eagle-tree' needs `{err.args[0]}`") from None
        return [1] + [topk] * (steps - 1) + [max(1, int(round(e)))], n
    raise ConfigError(f"row {row['id']}: `method` must be one of {METHODS}; got {method!r}")


def round_seconds_of(costs: PairCosts, row: dict, e: float) -> float:
    """Seconds of one round of the row's method at its batch and context (the draft's own KV length is
    ``draft_context`` where it keeps a bounded cache, e.g. StreamingLLM's budget in MagicDec)."""
    B, L = row["batch"], row["context"]
    Ld = row.get("draft_context", L)
    drafts, n = round_calls(row, e)
    return float(sum(costs.draft(m, B, Ld) for m in drafts) + costs.target(n, B, L) + costs.round_overhead(row["k"], B))


def row_run(row: dict):
    """(P, O) of a row measured as a whole fixed-length run (``prompt_tokens`` P, ``output_tokens`` O: output
    tokens over the wall time of a batch whose every sequence emits O tokens, prefill inside), else None (a
    row gives both or neither)."""
    P, O = row.get("prompt_tokens"), row.get("output_tokens")
    if P is None and O is None:
        return None
    ok = (lambda v, least: isinstance(v, int) and not isinstance(v, bool) and v >= least)  # noqa: E731
    if not (ok(P, 1) and ok(O, 2)):
        raise ConfigError(f"row {row.get('id', '?')}: `prompt_tokens` (an integer >= 1) and `output_tokens` (an "
                          f"integer >= 2) must be given together; got {P!r}, {O!r}")
    return P, O


def row_speedup(costs: PairCosts, row: dict, e: float) -> float:
    """S of the module docstring: E target-only steps' time over one round's.  A whole-run row (:func:`row_run`)
    adds the prefill (the target's alone; the target's and the draft's with speculation), which emits the first
    token: O − 1 target-only steps against (O − 1) / E rounds,
    S = (T_t(P) + (O − 1) t_ar) / (T_t(P) + T_d(P) + ((O − 1) / E) t_round)."""
    B, L = row["batch"], row["context"]
    t_ar = float(costs.target(1, B, L)) + costs.token_overhead(B)
    run = row_run(row)
    if run is None:
        return e * t_ar / round_seconds_of(costs, row, e)
    P, O = run
    pre = _prefill(costs.target, P, B) + costs.token_overhead(B)  # the prompt's step is an engine step too
    return (pre + (O - 1) * t_ar) / (pre + _prefill(costs.draft, P, B) + (O - 1) / e * round_seconds_of(costs, row, e))


def _prefill(model, P: int, B: int) -> float:
    """A prompt forward of P tokens per sequence: a roofline's prefill (logits of the last token only); any other
    (n, B, L) cost as a forward of P tokens."""
    return float(model(P, B, 0, prefill=True) if isinstance(model, Roofline) else model(P, B, 0))
