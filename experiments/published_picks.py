"""Would the roofline pick the right k on a GPU?  Its choice per (pair, batch) of a published k sweep against the
measured best, speculation off included (issue 25, item 3, on published GPU measurements).

    python experiments/published_picks.py [--results results/roofline] [--group a40-goodput]

Reads the stored fidelity table (results/roofline/fidelity_published.csv, written by
``python -m harness.speedup.roofline.fidelity``).  For every (pair, batch) of the group's speedup rows, with "off"
(S = 1) added: the model's pick (the largest predicted S), the measured best, the measured S of the model's pick
and the gap 1 - S(pick) / S(best) (the rule of tune_check: within 5 %; off wherever every measured k loses).
The predictions are the fidelity table's: calibrated on target-only figures only, acceptance the logged one.
Writes ``picks.md`` beside the table (with the table's provenance and this checkout's) and prints it; a checkout
whose results/ were just rewritten reads dirty, so run it on a table written outside the tree, as
experiments/regenerate_results.sh does.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's harness

import pandas as pd  # noqa: E402

from harness.core.figures import md_table  # noqa: E402
from harness.core.provenance import atomic_write_text, git_commit, read_table_csv  # noqa: E402

GAP = 0.05  # tune_check's rule: the pick's measured S within 5 % of the best measured


def picks(t: pd.DataFrame, group: str) -> pd.DataFrame:
    a = t[(t.group == group) & (t.quantity == "speedup")].copy()
    a["pair"] = a.id.str.extract(r"^[^-]+-(.*)-k\d+-b\d+$")[0]
    if a.pair.isna().any():
        raise SystemExit(f"--group {group}: row ids must read <source>-<pair>-k<k>-b<batch>; got "
                         f"{a.id[a.pair.isna()].iloc[0]!r}")
    if a.empty:
        raise SystemExit(f"--group {group}: no speedup rows of that group in the table")
    rows = []
    for (pair, b), g in a.groupby(["pair", "batch"], sort=False):
        meas = {**{f"k = {k}": s for k, s in zip(g.k, g.measured)}, "off": 1.0}
        pred = {**{f"k = {k}": s for k, s in zip(g.k, g.predicted)}, "off": 1.0}
        pick, best = max(pred, key=pred.get), max(meas, key=meas.get)
        gap = 1.0 - meas[pick] / meas[best]
        rows.append({"pair": pair, "batch": int(b), "model pick": pick, "predicted S": pred[pick],
                     "measured best": best, "best S": meas[best], "measured S of the pick": meas[pick],
                     "gap": gap, "right": gap <= GAP})
    return pd.DataFrame(rows)


def _here() -> str:
    g = git_commit()
    return f"{'dirty' if g.get('dirty') else 'clean'} {str(g.get('commit'))[:7]}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=Path("results/roofline"))
    ap.add_argument("--group", default="a40-goodput")
    a = ap.parse_args(argv)
    t = read_table_csv(a.results / "fidelity_published.csv")
    p = picks(t, a.group)
    meta = json.loads((a.results / "meta.json").read_text())
    off_all = p[p["best S"] <= 1.0]
    text = (f"# The roofline's pick against the measured best: {a.group}\n\nFrom the stored fidelity table "
            f"(commit {str(meta.get('commit', '?'))[:10]}), written from {_here()} by "
            f"`python experiments/published_picks.py --group {a.group}`.\n\n"
            + md_table(p.to_dict("records"), list(p.columns)) +
            f"\n**{int(p.right.sum())} of {len(p)}** (pair, batch) within {GAP:.0%} of the measured best; where every "
            f"measured k loses ({len(off_all)}), the model says off at {int((off_all['model pick'] == 'off').sum())}.\n")
    atomic_write_text(a.results / "picks.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
