"""`tune --acceptance` against vLLM (CPU) measured: predicted vs measured S per k and batch, and tune's k vs the
measured best (issue 43, item 3).

    python experiments/vllm_speedup.py --vllm-python .venv-vllm/bin/python --k 1,2,3,4 --batches 1,4 \\
        --repeats 3 --rounds 1 --out <tmp>/vllm_speedup
    python experiments/vllm_tune_check.py --speedup <tmp>/vllm_speedup --out results/engines/vllm/tune

From one experiments/vllm_speedup.py run (its runs.csv and the engines' own counters in acceptance/), only what a
vLLM user has: the target-only tokens/s of the ``plain`` engine and the draft's of the ``draft-only`` engine,
per timed call at each batch (decode rate: B (N - 1) / (t_generate - t_first_token), the call's first-token
time taken out, as a user reads vLLM's generation throughput), and the vLLM /metrics spec-decode counters of
the deepest ``spec-k`` engine.  ``python -m harness tune --acceptance`` is run on them (the command is printed
and stored), and its S per (k, B) set beside the measured S of every ``spec-k`` engine (table.csv of the
run).  The pick is within 5 % when the measured S of tune's k is at least 0.95 x the best measured S at that
batch (plain decoding, S = 1, counted among the candidates).  The per-request JSONL counters are read too, and
their per-position alphas set beside the /metrics ones.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pandas as pd  # noqa: E402

from harness.core.figures import md_table  # noqa: E402
from harness.core.provenance import atomic_write_csv, atomic_write_json, atomic_write_text, command_line, metadata  # noqa: E402
from harness.speedup.engine_acceptance import read_acceptance  # noqa: E402


def rates(runs: pd.DataFrame, config: str, N: int) -> str:
    """``B:TOK_S,...``: one decode rate per timed call (rep) of ``config``."""
    r = runs[runs.config == config].pivot_table(index=["round", "rep", "batch"], columns="kind",
                                                values="seconds").reset_index()
    r["rate"] = r.batch * (N - 1) / (r.generate - r.first_token)
    return ",".join(f"{int(b)}:{x:.4g}" for b, x in zip(r.batch, r.rate))


def run_tune(acceptance: Path, runs: pd.DataFrame, ks, batches, N: int, tmp: Path):
    """The tune command (argv, as stored) and its speedups / recommendation frames."""
    argv = ["tune", "--acceptance", str(acceptance), "--draft", "model", "--target-only-rates",
            rates(runs, "plain", N), "--draft-rates", rates(runs, "draft-only", N), "--batch",
            ",".join(map(str, batches)), "--k", ",".join(map(str, ks)), "--max-new-tokens", str(N),
            "--replicates", "400", "--out", str(tmp / "tune")]
    p = subprocess.run([sys.executable, "-m", "harness", *argv], capture_output=True, text=True, cwd=REPO)
    if p.returncode != 0:
        raise SystemExit(f"vllm_tune_check: tune exited {p.returncode}: {p.stderr.strip()[-500:]}")
    return argv, pd.read_csv(tmp / "tune" / "speedups.csv"), pd.read_csv(tmp / "tune" / "recommendation.csv"), \
        (tmp / "tune" / "recommendation.md").read_text()


def rep_range(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (k, B): the range of one timed call's tokens/s over plain's median (the spread behind the medians)."""
    g = runs[runs.kind == "generate"].assign(tps=lambda d: d.tokens / d.seconds)
    plain = g[g.config == "plain"].groupby("batch").tps.median()
    spec = g[g.config.str.startswith("spec-k")].assign(k=lambda d: d.config.str[6:].astype(int))
    spec = spec.assign(s=spec.tps / spec.batch.map(plain))
    return spec.groupby(["k", "batch"]).s.agg(measured_rep_lo="min", measured_rep_hi="max").reset_index()


def compare(grid: pd.DataFrame, rec: pd.DataFrame, measured: pd.DataFrame,
            spread: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per (k, B): predicted vs measured S; per B: tune's pick vs the measured best)."""
    t = grid.merge(measured[["k", "batch", "measured_speedup"]], on=["k", "batch"]).merge(spread, on=["k", "batch"])
    t["error_pct"] = 100 * (t.speedup / t.measured_speedup - 1)
    picks = []
    for r in rec.itertuples():
        m = t[t.batch == r.batch].set_index("k").measured_speedup
        best_k = int(m.idxmax()) if m.max() > 1 else 0
        best = max(float(m.max()), 1.0)
        got = 1.0 if r.k == 0 else float(m[r.k])
        picks.append({"batch": r.batch, "tune_k": r.k, "tune_predicted_speedup": r.speedup,
                      "tune_lo": r.speedup_lo, "tune_hi": r.speedup_hi, "tie": r.tie, "measured_best_k": best_k,
                      "measured_best_speedup": best, "measured_speedup_of_tune_k": got,
                      "shortfall_pct": 100 * (1 - got / best), "within_5pct": got >= 0.95 * best})
    return t, pd.DataFrame(picks)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--speedup", type=Path, required=True, help="an experiments/vllm_speedup.py output folder")
    ap.add_argument("--out", type=Path, default=REPO / "results" / "engines" / "vllm" / "tune")
    args = ap.parse_args(argv)
    src = json.loads((args.speedup / "meta.json").read_text())
    runs, measured = pd.read_csv(args.speedup / "runs.csv"), pd.read_csv(args.speedup / "table.csv")
    ks, batches, N = src["config"]["k"], src["config"]["batches"], src["config"]["max_new_tokens"]
    args.out.mkdir(parents=True, exist_ok=True)
    prom = args.out / f"spec-k{max(ks)}.prom"  # the counters tune reads, committed beside the table
    atomic_write_text(prom, "".join((args.speedup / "acceptance" / f"spec-k{max(ks)}-r{r}.prom").read_text()
                            for r in range(src["config"]["rounds"])))
    with tempfile.TemporaryDirectory(prefix="specverify-vllm-tune-") as tmp:
        rel = prom.relative_to(REPO) if prom.is_relative_to(REPO) else prom
        tune_argv, grid, rec, md = run_tune(rel, runs, ks, batches, N, Path(tmp))
    table, picks = compare(grid, rec, measured, rep_range(runs))
    acc = args.speedup / "acceptance"  # an interleaved run keeps only the last-created engine's counters (one
    # Prometheus registry per process): the others are absent
    alphas = pd.concat([read_acceptance(acc / f"spec-k{k}-r0{ext}").frame().assign(k_run=k, source=ext[1:])
                        for k in ks for ext in (".prom", ".jsonl") if (acc / f"spec-k{k}-r0{ext}").is_file()],
                       ignore_index=True)
    meta = metadata({"name": "vllm-tune-check", "speedup_run": src["commit"], "speedup_command": src.get("command"),
                     "tune_command": "python -m harness " + " ".join(tune_argv[:-2] + ["--out", "<tmp>/tune"])}, 0)
    meta["command"] = command_line([__file__, *(argv if argv is not None else sys.argv[1:])])
    for name, df in (("table.csv", table), ("picks.csv", picks), ("alphas.csv", alphas)):
        atomic_write_csv(args.out / name, df, meta)
    atomic_write_json(args.out / "meta.json", meta)
    atomic_write_text(args.out / "tune.md", md.replace(str(Path(tmp)), "<tmp>"))
    atomic_write_text(args.out / "table.md", md_table(table.to_dict("records"), list(table.columns)) + "\n\n"
                      + md_table(picks.to_dict("records"), list(picks.columns)) + "\n")
    print(table.round(3).to_string(index=False), picks.round(3).to_string(index=False), sep="\n\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
