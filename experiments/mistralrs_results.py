"""mistral.rs 0.9.5 (CPU) verified at exact-law strength: results/engines/mistralrs/ (issue 41.6).

    python experiments/mistralrs_results.py --mistralrs-python .venv-mistralrs/bin/python --out results/engines/mistralrs

Writes probe.md (what the engine's Python API does on this CPU, asked of the engine: experiments/mistralrs_probe.py)
and the table of plain-decoding rows: ``python -m harness sample --engine mistralrs`` on the shipped exact pair's
target (``exact``: V = 16, real attention and RoPE; exported by :func:`harness.samples.engines.mistralrs_engine.export`)
-- one 4-token prompt, 4 new tokens, temperature 1, EOS ignored, no seed (the engine refuses one on CPU), one
engine process -- then ``verify-samples --exact`` against the float64 law of the first 4 tokens at ``--epsilon``.
Rows: the KV cache in float32 (``--kv-precision f32``) and at the engine's CPU default, float16.  Sizes: the planner
asks ~27k completions for epsilon = 0.02 and ~109k for 0.01 at 4 positions; at ~280 completions per second here when quiet
(9-19 under load)
(one process: a second process would draw the same stream) the f32 row draws 30k and the f16 row 10k
(``--completions`` sets every row's size).  results/engines/mistralrs/certify-0.01/ is ``--rows plain-kv-f32
--completions 130000 --epsilon 0.01`` (the planner asks ~109k; the machine quiet: ~280 completions/s).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pandas as pd  # noqa: E402

from harness.core.figures import md_table  # noqa: E402
from harness.core.provenance import atomic_write_csv, atomic_write_text, metadata  # noqa: E402
from harness.samples.engines.mistralrs_engine import export  # noqa: E402
from harness.samples.report import report_row  # noqa: E402

# row -> (sample options, completions): the f32 row is sized for epsilon = 0.02 (~27k), the f16 row (the engine's
# own CPU default) is a smaller check that the float16 cache moves no position's law by more than its bound
ROWS = {"plain-kv-f32": (["--kv-precision", "f32"], 30_000), "plain-kv-f16": (["--kv-precision", "f16"], 10_000)}
COMMON = ["--engine", "mistralrs", "--target", "exact", "--prompt-vocab", "13", "--prompt-lengths", "4", "4",
          "--n-prompts", "1", "--max-new-tokens", "4", "--no-progress"]
COLUMNS = ["row", "verdict", "max_position_tv_upper", "max_position_tv_hat", "completions", "completions_per_s",
           "sample_wall_s", "verify_wall_s", "dependence", "detail"]


def _run(cmd: list[str]) -> tuple[int, float, str]:
    tic = time.perf_counter()
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    return p.returncode, time.perf_counter() - tic, (p.stdout + p.stderr).strip()


def one(name: str, args, out: Path) -> dict:
    opts, n = ROWS[name]
    n = args.completions or n
    d = out / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    samples = d / "samples.jsonl"
    rc, wall, err = _run([sys.executable, "-m", "harness", "sample", *COMMON, *opts, "--mistralrs-python",
                          args.mistralrs_python, "--n-per-prompt", str(n), "--out", str(samples)])
    row = {"engine": "mistralrs 0.9.5 (CPU)", "row": name, "completions": n,
           "sample_wall_s": round(wall, 1)}
    if rc != 0:
        return {**row, "verdict": f"engine failed (exit {rc})", "detail": err.splitlines()[-1][:300] if err else ""}
    engine = json.loads(Path(str(samples) + ".engine.json").read_text())
    Path(str(samples) + ".engine.json").unlink()
    (d / "engine.json").write_text(json.dumps({k: v for k, v in engine.items() if k != "pid"}, indent=1))
    row["completions_per_s"] = round(n / engine["generate_s"], 1)
    rc, wall, err = _run([sys.executable, "-m", "harness", "verify-samples", "--samples", str(samples), "--target",
                          "exact", "--exact", "--epsilon", str(args.epsilon), "--no-progress", "--out", str(d / "report")])
    row.update(report_row(d / "report") if rc in (0, 1, 4) else {"verdict": f"error (exit {rc})", "detail": err[-240:]},
               verify_wall_s=round(wall, 1))
    samples.unlink()
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mistralrs-python", default=".venv-mistralrs/bin/python")
    ap.add_argument("--out", type=Path, default=REPO / "results" / "engines" / "mistralrs")
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--completions", type=int, default=0, help="every row's size (0: each row's own)")
    ap.add_argument("--epsilon", type=float, default=0.02)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    probe = subprocess.run([args.mistralrs_python, str(REPO / "experiments" / "mistralrs_probe.py"),
                            str(export(REPO / "specimpl" / "assets" / "exact_pair" / "target"))],
                           capture_output=True, text=True, check=True).stdout
    rows = []
    for name in args.rows.split(","):
        rows.append(one(name, args, args.out))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    df = pd.DataFrame(rows)
    meta = metadata({"rows": args.rows, "completions": args.completions, "epsilon": args.epsilon}, None)
    head = f"<!-- {json.dumps({k: meta[k] for k in ('commit', 'dirty', 'command') if k in meta})} -->\n"
    atomic_write_text(args.out / "probe.md", head + probe)
    atomic_write_csv(args.out / "table.csv", df, meta)
    atomic_write_text(args.out / "table.md", head + md_table(df.to_dict("records"), [c for c in COLUMNS if c in df]))
    atomic_write_text(args.out / "meta.json", json.dumps(meta, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
