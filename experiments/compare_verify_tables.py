"""Do two `verify` results folders agree?  Bit for bit, to 1e-9 relative (+ 1e-15 absolute), and in their verdicts (issue 26).

    python experiments/compare_verify_tables.py A B --out results/verify/cross_machine.md

A and B are `verify` output folders (tests.csv, distributions.parquet, meta.json), e.g. the committed
results/verify (made on one machine) and a fresh `make verify` on another.  Rows are matched by position (the
battery's order is fixed by the scenarios and seeds; a differing key column is reported as a mismatch).
Reported separately for the exact-law scenarios (whose draws should reproduce across machines under one
ATen kernel set, see the README's "What reproduces across machines") and for the real-model rows (float32
forwards, which reproduce only in distribution):

* rows equal as text (bit for bit), rows differing only below 1e-9 relative, rows differing beyond it;
* which columns differ and the largest relative / absolute difference;
* whether every row's verdict is the same;
* whether the token count tables (distributions.parquet: observed counts per position and symbol) are equal.

Exit 0 when every exact-law row agrees within that tolerance and every verdict agrees, 1 otherwise, 2 on bad input.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from harness.core.provenance import atomic_write_text, read_table_csv  # noqa: E402

RTOL = 1e-9
ATOL = 1e-15  # a floor for values at zero: an acceptance difference of 0.0 vs -1.1e-16 is one float64 rounding
KEYS = ["scenario", "run", "role", "family", "test", "position"]
REAL = "real_model"


def _load(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    for name in ("tests.csv", "distributions.parquet", "meta.json"):
        if not (folder / name).is_file():
            print(f"compare_verify_tables: {str(folder)!r} has no {name} (a verify results folder is needed)", file=sys.stderr)
            raise SystemExit(2)
    tests = read_table_csv(folder / "tests.csv", dtype=str, keep_default_na=False)
    return tests, pd.read_parquet(folder / "distributions.parquet"), json.loads((folder / "meta.json").read_text())


def _row_classes(a: pd.DataFrame, b: pd.DataFrame) -> tuple[pd.Series, pd.Series, dict]:
    """Per row: differs as text; differs beyond RTOL.  Per column: (rows beyond RTOL, max rel, max abs)."""
    text = (a != b)
    beyond = pd.DataFrame(False, index=a.index, columns=a.columns)
    cols = {}
    for c in a.columns[text.any()]:
        x, y = pd.to_numeric(a[c], errors="coerce"), pd.to_numeric(b[c], errors="coerce")
        numeric = x.notna() & y.notna()
        rel = (x - y).abs() / np.maximum(x.abs(), y.abs())
        far = text[c] & (~numeric | ~np.isclose(x.fillna(0), y.fillna(0), rtol=RTOL, atol=ATOL))
        beyond[c] = far
        cols[c] = (int(text[c].sum()), int(far.sum()), float(rel[text[c] & numeric].max()) if (text[c] & numeric).any() else float("nan"),
                   float((x - y).abs()[text[c] & numeric].max()) if (text[c] & numeric).any() else float("nan"))
    return text.any(axis=1), beyond.any(axis=1), cols


def _machine(meta: dict) -> str:
    m = meta.get("machine", {})
    return (f"commit {meta.get('commit', '?')[:12]}, {m.get('cpu', '?')} ({', '.join(m.get('cpu_simd', []))}; torch kernels "
            f"{m.get('torch_cpu_capability', '?')}), {meta.get('created_utc', '?')}")


def compare(a_dir: Path, b_dir: Path) -> tuple[str, bool]:
    (ta, da, ma), (tb, db, mb) = _load(a_dir), _load(b_dir)
    if ta.shape != tb.shape or list(ta.columns) != list(tb.columns) or not (ta[KEYS] == tb[KEYS]).all().all():
        return f"tests.csv of {a_dir} and {b_dir} do not hold the same rows (shape {ta.shape} vs {tb.shape})", False
    text, beyond, cols = _row_classes(ta, tb)
    real = ta["scenario"] == REAL
    verdict_same = bool((ta["verdict"] == tb["verdict"]).all()) if "verdict" in ta else bool((ta["pass"] == tb["pass"]).all())
    counts_same = da.drop(columns="expected").equals(db.drop(columns="expected"))
    exp_rel = float(((da["expected"] - db["expected"]).abs() / da["expected"].abs().clip(lower=1e-300)).max())
    lines = [f"# Two `verify` tables compared\n",
             f"A: `{a_dir}` ({_machine(ma)})  ",
             f"B: `{b_dir}` ({_machine(mb)})\n",
             "Tolerance: |a - b| <= 1e-9 max(|a|, |b|) + 1e-15.\n", "| rows | count | equal as text | differ only within the tolerance | differ beyond it |", "|---|---|---|---|---|"]
    for name, m in (("exact-law scenarios", ~real), ("real-model rows (float32 forwards)", real)):
        lines.append(f"| {name} | {int(m.sum())} | {int((m & ~text).sum())} | {int((m & text & ~beyond).sum())} | {int((m & beyond).sum())} |")
    lines += ["", f"Every row's verdict the same: **{'yes' if verdict_same else 'NO'}**.  Token count tables "
              f"(distributions.parquet, {len(da):,} rows: observed counts per scenario, run, position and symbol) equal: "
              f"**{'yes' if counts_same else 'NO'}**; their float64 expected counts differ by at most {exp_rel:.2g} relative.", "",
              "| column | rows differing as text | beyond the tolerance | largest rel | largest abs |", "|---|---|---|---|---|"]
    lines += [f"| {c} | {n} | {f} | {r:.3g} | {d:.3g} |" for c, (n, f, r, d) in cols.items()]
    exact_far = [" / ".join(map(str, r)) for r in ta.loc[~real & beyond, KEYS].itertuples(index=False)]
    if exact_far:
        lines += ["", "Exact-law rows beyond the tolerance: " + "; ".join(exact_far[:20])]
    ok = verdict_same and counts_same and not exact_far
    return "\n".join(lines) + "\n", ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--out", type=Path, help="write the markdown here (else stdout)")
    args = ap.parse_args(argv)
    text, ok = compare(args.a, args.b)
    text += f"\nCommand: `python experiments/compare_verify_tables.py {args.a} {args.b}" + (f" --out {args.out}`\n" if args.out else "`\n")
    if args.out:
        atomic_write_text(args.out, text)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
