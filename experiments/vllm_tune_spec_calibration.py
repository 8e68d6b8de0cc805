"""What a spec calibration would buy tune on vLLM (CPU): the draft's cost inside the engine fitted from the measured
speedups of two spec depths, the other depths predicted (issue 43, item 3; an analysis of committed measurements,
nothing is run).

    python experiments/vllm_tune_spec_calibration.py --check results/engines/vllm/tune/interleaved-k4-r9 \\
        --calibrate-k 1,2 --out results/engines/vllm/tune/spec-calibration/interleaved-k4-r9

tune prices a drafted token at the draft served alone (``--draft-rates``: the draft-only engine's step).  Inside
the spec engine it is cheaper and the round carries a fixed cost of its own, so tune under-predicts deep k.  Here,
per batch B, from an experiments/vllm_tune_check.py folder (its table.csv: tune's tokens per round E_k from the
engine's acceptance counters, tune's target step t(B), the measured speedup S_k of each ``spec-k`` engine):

- the measured round time of depth k is R_k = E_k t(B) / S_k (the tokens a round yields per request, at the
  measured rate);
- R_k = t(B) + c + k d is fitted by least squares on the calibration depths only (two depths identify the round's
  fixed cost c and the in-engine cost d per drafted token);
- every depth's S is predicted as E_k t(B) / (t(B) + c + k d), the best of plain decoding (S = 1) and the depths
  is picked, and its measured S set against the measured best: within 5 % when at least 0.95 x the best, as
  experiments/vllm_tune_check.py judges tune's own pick.

The calibration depths are fitted exactly (with two of them), so only the other depths are evaluation; the table
says which is which.  The measured S are medians of the timed calls (their per-call range: measured_rep_lo/hi).
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

from harness.core.figures import md_table  # noqa: E402
from harness.core.provenance import atomic_write_csv, atomic_write_json, atomic_write_text, command_line, metadata  # noqa: E402


def fit_round(k: np.ndarray, rounds: np.ndarray, t: float) -> tuple[float, float]:
    """(c, d) of rounds = t + c + k d, least squares over the given depths (at least two distinct)."""
    if len(set(k.tolist())) < 2:
        raise ValueError(f"`--calibrate-k` needs two distinct depths measured at this batch; got {sorted(set(k))}")
    d, c = np.polyfit(k.astype(float), rounds - t, 1)
    return float(c), float(d)


def calibrate(table: pd.DataFrame, cal_ks: list[int]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per (k, B): measured and fitted round, predicted and measured S; per B: the pick vs the measured best)."""
    rows, picks = [], []
    for B, g in table.groupby("batch"):
        g = g.set_index("k").sort_index()
        t = float(g.target_step_s.iloc[0])
        measured_round = g.tokens_per_round * t / g.measured_speedup  # (K,) R_k
        cal = g.index.isin(cal_ks)
        c, d = fit_round(g.index[cal].to_numpy(), measured_round[cal].to_numpy(), t)
        fitted = t + c + g.index.to_numpy() * d
        pred = g.tokens_per_round * t / fitted
        for k in g.index:
            rows.append({"k": k, "batch": B, "role": "calibration" if k in cal_ks else "evaluation",
                         "measured_round_ms": 1e3 * measured_round[k], "fitted_round_ms": 1e3 * (t + c + k * d),
                         "draft_ms_in_engine": 1e3 * d, "round_fixed_ms": 1e3 * c, "predicted_speedup": pred[k],
                         "measured_speedup": g.measured_speedup[k], "measured_rep_lo": g.measured_rep_lo[k],
                         "measured_rep_hi": g.measured_rep_hi[k], "error_pct": 100 * (pred[k] / g.measured_speedup[k] - 1)})
        pick = int(pred.idxmax()) if pred.max() > 1 else 0
        best_k = int(g.measured_speedup.idxmax()) if g.measured_speedup.max() > 1 else 0
        best = max(float(g.measured_speedup.max()), 1.0)
        got = 1.0 if pick == 0 else float(g.measured_speedup[pick])
        picks.append({"batch": B, "calibrated_k": pick, "measured_best_k": best_k, "measured_best_speedup": best,
                      "measured_speedup_of_calibrated_k": got, "shortfall_pct": 100 * (1 - got / best),
                      "within_5pct": got >= 0.95 * best})
    return pd.DataFrame(rows), pd.DataFrame(picks)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", type=Path, required=True, help="an experiments/vllm_tune_check.py output folder")
    ap.add_argument("--calibrate-k", default="1,2", help="the spec depths the round is fitted on (default 1,2)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    cal_ks = [int(x) for x in args.calibrate_k.split(",")]
    table, picks = calibrate(pd.read_csv(args.check / "table.csv"), cal_ks)
    src = json.loads((args.check / "meta.json").read_text())
    check = args.check.resolve()
    meta = metadata({"name": "vllm-tune-spec-calibration", "calibrate_k": cal_ks,
                     "check": str(check.relative_to(REPO)) if check.is_relative_to(REPO) else args.check.name,
                     "check_commit": src.get("commit")}, 0)
    meta["command"] = command_line([__file__, *(argv if argv is not None else sys.argv[1:])])
    args.out.mkdir(parents=True, exist_ok=True)
    for name, df in (("table.csv", table), ("picks.csv", picks)):
        atomic_write_csv(args.out / name, df, meta)
    atomic_write_json(args.out / "meta.json", meta)
    atomic_write_text(args.out / "table.md", md_table(table.to_dict("records"), list(table.columns)) + "\n\n"
                      + md_table(picks.to_dict("records"), list(picks.columns)) + "\n")
    print(table.round(3).to_string(index=False), picks.round(3).to_string(index=False), sep="\n\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
