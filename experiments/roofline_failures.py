"""Why each failing evaluation row of the published points fails: the rows off by more than 10 % or with the sign of
S - 1 wrong, grouped by cause, with what a multi-token verification would have to cost to explain each.

    PYTHONPATH=. python experiments/roofline_failures.py

A diagnostic, never an input: like ``alpha_required`` of the fidelity table, ``verify_row_cost_needed`` is the r at
which the row's prediction equals its measurement when every token a forward of the target scores beyond the first
adds r times a one-token step (T(n) = T_roofline(n) + r (n - 1) T(1): a multi-token forward of quantized weights that
does not amortise the weight read, as llama.cpp's small-batch decode on an RTX 3090 (8 rows 2.39x one row: r = 0.20)
and on Apple Metal (6.54x: r = 0.79) measures in the Qwen3.8 community table, sweeps/apple-silicon.md).  Nothing is
fitted: the r of each row is printed beside the cause its note names, and no prediction uses it.
"""
from __future__ import annotations

import math

import pandas as pd
from scipy.optimize import brentq

from harness.speedup.roofline.fidelity import failures, fidelity_table, load_published, row_costs
from harness.speedup.roofline.rounds import row_speedup, row_tokens
from harness.speedup.roofline.speedup import PairCosts

__all__ = ["verify_row_cost_needed", "table"]


def verify_row_cost_needed(row: dict, shapes: dict) -> float:
    """The r >= 0 at which the row's predicted S equals its measured one (nan where none in [0, 10] does: the row is
    under-predicted already, or no such cost explains it)."""
    if row.get("prompt_tokens") or row_tokens(row) is None:
        return float("nan")
    costs, rt, _ = row_costs(row, shapes)

    def s_at(r: float) -> float:
        tgt = (lambda n, B, L: float(rt(n, B, L)) + r * (n - 1) * float(rt(1, B, L)))  # noqa: E731
        c = PairCosts(tgt, costs.draft, costs.overhead_round_s, costs.overhead_token_s)
        return row_speedup(c, row, row_tokens(row)) - row["measured"]
    if s_at(0.0) < 0 or s_at(10.0) > 0:
        return float("nan")
    return float(brentq(s_at, 0.0, 10.0, xtol=1e-4))


def table() -> pd.DataFrame:
    pub = load_published()
    f = failures(fidelity_table(pub))
    rows = {r["id"]: r for r in pub["row"]}
    f = f.assign(verify_row_cost_needed=[verify_row_cost_needed(rows[i], pub["_shapes"]) for i in f.id])
    return f[["id", "hardware", "k", "measured", "predicted", "rel_err", "sign_ok", "fails_because",
              "verify_row_cost_needed"]]


def main() -> int:
    t = table()
    print("| id | hardware | k | measured | predicted | error | sign | kind | r needed |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in t.itertuples():
        need = "–" if math.isnan(r.verify_row_cost_needed) else f"{r.verify_row_cost_needed:.2f}"
        print(f"| {r.id} | {r.hardware} | {r.k} | {r.measured:.3g} | {r.predicted:.3g} | {100 * r.rel_err:+.0f} % | "
              f"{'right' if r.sign_ok else 'WRONG'} | {r.fails_because} | {need} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
