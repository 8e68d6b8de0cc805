"""Calibration (issue 24, item 1): the real-model certificate under a per-sequence bug.

    .venv/bin/python experiments/realmodel_dependence.py [--reps-old 4000] [--reps-new 2000] [--out results/calibrate]

A lossy sampler whose bug is *per sequence* (each sequence is bugged or not, with probability 1/2, and every token
of a bugged sequence is drawn from the bugged law) makes the tokens -- and the PIT values -- of one sequence
dependent.  Two certificates, each simulated with a known distance:

A. the old one: the DKW bound over the N * T pooled PIT values (N = 384, T = 64, the default run's sizes),
   sup|F_n - x| + sqrt(ln(2/delta) / (2 N T)), which assumes the N * T values independent.  Bugged sequences'
   PIT values are iid with CDF x^a (others iid uniform), so the pooled law is (x + x^a) / 2 and its Kolmogorov
   distance from U(0, 1) is D = max_x (x - x^a) / 2, computed exactly.  A miss: bound < D.

B. the new one (harness.verify.exactmodel): n sequences of J = 4 tokens, V = 16, the sequence the unit; a bugged
   sequence draws all its tokens iid from r, an unbugged one from p (the "target": every position's law p, pairs
   p x p, ...).  The law of each position is (p + r) / 2, of each pair (p x p + r x r) / 2, of each 3-window
   likewise, so every true TV is known exactly; the bound is the battery's own
   (harness.verify.battery.tv_interval, finite-sample) on the counts of whole sequences.  A miss: bound < TV.

For contrast, B's tokens are also pooled over positions and bounded as n * J iid draws (the token as the unit: the
old certificate's mistake, on tokens).  Misses are counted at the gate's delta (1.1e-6, the old audit's) and at a measurable delta (0.05), with
Clopper-Pearson 95 % intervals.  Writes realmodel_dependence.csv and .md (with provenance) to --out.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import optimize

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.core.provenance import atomic_write_csv, atomic_write_text, metadata  # noqa: E402
from harness.stats import clopper_pearson  # noqa: E402
from harness.verify.battery import tv_interval  # noqa: E402

SEED = 20261202
DELTAS = (1.1e-6, 0.05)


# ------------------------------------------------------------------------------------------ A: pooled DKW
def pooled_distance(a: float) -> float:
    """Kolmogorov distance of the pooled law (x + x^a) / 2 from U(0, 1): max_x (x - x^a) / 2 (a > 1)."""
    r = optimize.minimize_scalar(lambda x: -(x - x ** a), bounds=(0, 1), method="bounded", options={"xatol": 1e-12})
    return float(-r.fun / 2)


def pooled_ks(u: np.ndarray) -> float:
    """sup |F_n(x) - x| of the values ``u`` (1-d), exactly (both sides of each jump)."""
    s = np.sort(u)
    n = s.size
    i = np.arange(1, n + 1)
    return float(max((i / n - s).max(), (s - (i - 1) / n).max()))


def old_certificate(reps: int, N: int, T: int, a: float, rng) -> pd.DataFrame:
    D = pooled_distance(a)
    rows = []
    for _ in range(reps):
        bugged = rng.random(N) < 0.5  # (N,) per-sequence bug
        u = rng.random((N, T))
        u[bugged] = u[bugged] ** (1 / a)  # CDF x^a
        d = pooled_ks(u.ravel())
        rows.append({f"upper_{delta:g}": min(1.0, d + math.sqrt(math.log(2 / delta) / (2 * N * T))) for delta in DELTAS})
    out = pd.DataFrame(rows)
    out["true"] = D
    return out


# ------------------------------------------------------------------------------------------ B: sequence unit
def mixture_laws(p: np.ndarray, r: np.ndarray, J: int, W: int) -> dict:
    """The exact laws of the lossy sampler (position, pair, W-window) and the target's, each (cells,)."""
    def power(x, k):
        out = x
        for _ in range(k - 1):
            out = np.outer(out, x).ravel()
        return out
    return {name: ((power(p, k) + power(r, k)) / 2, power(p, k)) for name, k in (("position", 1), ("pair", 2),
                                                                                 (f"window{W}", W))}


def new_certificate(reps: int, n: int, J: int, W: int, V: int, shift: float, rng) -> pd.DataFrame:
    p = rng.dirichlet(np.full(V, 0.7))
    r = (1 - shift) * p + shift * np.eye(V)[int(np.argmax(p))]  # the bugged law: mass moved to the mode
    laws = mixture_laws(p, r, J, W)
    true = {k: 0.5 * float(np.abs(q - t).sum()) for k, (q, t) in laws.items()}
    cdf = np.cumsum(r), np.cumsum(p)
    rows = []
    for _ in range(reps):
        bugged = rng.random(n) < 0.5  # (n,) per-sequence bug: all J tokens from r
        u = rng.random((n, J))
        x = np.where(bugged[:, None], np.searchsorted(cdf[0], u, side="right"),
                     np.searchsorted(cdf[1], u, side="right")).clip(max=V - 1)  # (n, J)
        row = {}
        for name, (_, target) in laws.items():
            k = 1 if name == "position" else (2 if name == "pair" else W)
            starts = range(J - k + 1)
            for delta in DELTAS:
                ups = []
                for s in starts:
                    code = np.zeros(n, np.int64)
                    for t in range(s, s + k):
                        code = code * V + x[:, t]
                    ups.append(tv_interval(np.bincount(code, minlength=V ** k), target, delta)[2])
                row[f"{name}_min_upper_{delta:g}"] = min(ups)  # the smallest over positions: a miss anywhere
        for delta in DELTAS:  # the token as the unit (the old mistake, on tokens): n * J pooled tokens as iid draws
            row[f"pooled_tokens_upper_{delta:g}"] = tv_interval(np.bincount(x.ravel(), minlength=V), p, delta)[2]
        rows.append(row)
    out = pd.DataFrame(rows)
    for name, tv in true.items():
        out[f"{name}_true"] = tv
    return out


# ------------------------------------------------------------------------------------------ report
def _miss_rows(label: str, what: str, upper: pd.Series, true: float, delta: float, unit: str) -> dict:
    m, R = int((upper < true).sum()), len(upper)
    lo, hi = clopper_pearson(m, R, 0.05)
    return {"certificate": label, "law": what, "unit": unit, "delta": delta, "true_distance": true, "replicates": R,
            "misses": m, "miss_rate": m / R, "cp95_low": lo, "cp95_high": hi, "valid_at_delta": bool(lo <= delta)}


def summarize(old: pd.DataFrame, new: pd.DataFrame, W: int) -> pd.DataFrame:
    rows = [_miss_rows("old: pooled-PIT DKW (N*T values)", "Kolmogorov distance of the pooled PIT law",
                       old[f"upper_{d:g}"], float(old.true.iloc[0]), d, "PIT value") for d in DELTAS]
    rows += [_miss_rows("for contrast: the same tokens pooled, the token as the unit",
                        "token TV of the position-averaged marginal", new[f"pooled_tokens_upper_{d:g}"],
                        float(new["position_true"].iloc[0]), d, "token") for d in DELTAS]
    for name, words in (("position", "token TV of the marginal at each position"), ("pair", "each consecutive pair"),
                        (f"window{W}", f"every window of {W} tokens")):
        for d in DELTAS:
            rows.append(_miss_rows("new: exact pair, sequence the unit", words, new[f"{name}_min_upper_{d:g}"],
                                   float(new[f"{name}_true"].iloc[0]), d, "sequence"))
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame, meta: dict, args, wall: float) -> str:
    L = ["# Real-model certificate under a per-sequence bug (issue 24, item 1)", "",
         f"`{meta.get('command')}`; commit `{(meta.get('commit') or '?')[:12]}`"
         f"{' (dirty tree)' if meta.get('dirty') else ''}, seed {SEED}, {wall:.0f} s; machine "
         f"{meta['machine'].get('cpu')}, load at start {meta['machine'].get('loadavg_1_5_15')}.", "",
         "A lossy sampler with a per-sequence bug: each sequence is bugged with probability 1/2 and all of its "
         "tokens (PIT values) then come from the bugged law, so the values of one sequence are dependent. A miss: "
         "the upper confidence bound lies below the true distance (known exactly). Each bound is stated at "
         "confidence 1 - δ, so a valid one misses with probability ≤ δ; 95 % Clopper–Pearson interval on the miss "
         "rate.", "",
         f"- old (the certificate until this commit): DKW over the N·T = {args.N}·{args.T} pooled PIT values, "
         f"bugged PIT law x^{args.a:g}: pooled Kolmogorov distance {table.true_distance.iloc[0]:.4f}.",
         f"- new (`harness.verify.exactmodel`): n = {args.n:,} sequences of J = {args.J} tokens (V = {args.V}), the "
         "battery's finite-sample TV bound on the counts of whole sequences, for each position, pair and "
         f"{args.W}-window; a miss at any position / pair / window counts. Bugged law: {args.shift:g} of the mass "
         "moved to the target's mode.", "",
         "| certificate | law bounded | unit | δ | true distance | replicates | misses | miss rate [95 % CP] | "
         "valid at δ? |", "|---|---|---|---|---|---|---|---|---|"]
    for r in table.itertuples():
        ok = "yes" if r.cp95_low <= r.delta else "**no** (misses ≫ δ)"
        L.append(f"| {r.certificate} | {r.law} | {r.unit} | {r.delta:g} | {r.true_distance:.4f} | {r.replicates:,} | "
                 f"{r.misses} | {r.miss_rate:.4f} [{r.cp95_low:.2g}, {r.cp95_high:.2g}] | {ok} |")
    L += ["", "The contrast rows bound the same tokens pooled over positions as if independent (the old mistake, on "
          "tokens): they did not miss here only because the finite-sample TV bound is wide (set for the worst law of "
          "its size); its validity would rest on that slack, where the sequence unit's rests on nothing but the "
          "sequences' independence. DKW is tight, so the old PIT certificate's misses show at once.",
          "", "Valid at δ: the Clopper–Pearson interval reaches δ (a miss rate consistent with ≤ δ). At δ = 1.1e-6 "
          "no simulation of this size can show ≤ δ; zero misses there, with the measurable δ = 0.05 covered too, is "
          "the evidence, and the argument is exact: with the sequence as the unit the counts are multinomial "
          "whatever the dependence inside a sequence, so the bound's own guarantee applies unchanged.", ""]
    return "\n".join(L)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps-old", type=int, default=4000)
    ap.add_argument("--reps-new", type=int, default=2000)
    ap.add_argument("--N", type=int, default=384)
    ap.add_argument("--T", type=int, default=64)
    ap.add_argument("--a", type=float, default=2.5)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--J", type=int, default=4)
    ap.add_argument("--W", type=int, default=3)
    ap.add_argument("--V", type=int, default=16)
    ap.add_argument("--shift", type=float, default=0.3)
    ap.add_argument("--out", type=Path, default=Path("results/calibrate"))
    args = ap.parse_args(argv)
    tic = time.perf_counter()
    rng = np.random.default_rng(SEED)
    old = old_certificate(args.reps_old, args.N, args.T, args.a, rng)
    new = new_certificate(args.reps_new, args.n, args.J, args.W, args.V, args.shift, rng)
    table = summarize(old, new, args.W)
    wall = time.perf_counter() - tic
    meta = metadata({k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, SEED)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_csv(args.out / "realmodel_dependence.csv", table, meta)  # provenance in realmodel_dependence.csv.meta.json
    atomic_write_text(args.out / "realmodel_dependence.md", markdown(table, meta, args, wall))
    print(table.to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
