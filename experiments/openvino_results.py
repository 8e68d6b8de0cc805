"""OpenVINO GenAI 2026.4.1 (CPU) verified at exact-law strength: the table of results/engines/openvino/.

    python experiments/openvino_results.py --openvino-python .venv-openvino/bin/python --out results/engines/openvino

Each row is ``python -m harness sample --engine openvino`` on the shipped exact pair (``exact`` / ``exact-draft``:
V = 16 Llama models with real attention, exported to OpenVINO IR in float32 by our own command,
:mod:`harness.samples.engines.openvino_export`) -- one 4-token prompt, 4 new tokens, temperature 1, EOS ignored,
per-request seeds, KV cache f32 -- then ``verify-samples --exact`` against the target's float64 law of the
first 4 tokens (every position, pair and the 4-window tested; a token-TV bound per position at confidence 0.999).
Sizes: the planner asks ~109k completions for epsilon = 0.01 (a 20k plain draw bounded 0.024), so the rows
meant to certify draw 200k; the draft-model row that upstream reports lossy draws 10k (its loss shows at a few
hundred); the rows that locate the loss draw 10k-20k.  The plain and lookup rows share their seeds, and the table
says which share of their completions are identical request by request.  Prompt lookup runs 256 requests per ``generate`` call: 1,024 or more crash the engine (see README).

Columns: verdict, largest per-position bound and estimate, the estimate at each position, the first rejecting
tests, completions, completions per second drawn here (engine generate time) and each step's wall time, the
engine's speculative counters (draft / accepted tokens over the run), and the verdict's headline (an
inconclusive row names the size that would certify).  Each row's report and engine summary go under
``--out/<row>/``; the sample files are not kept (``--keep-samples`` keeps them).
"""
from __future__ import annotations

import argparse
import json
import re
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
from harness.samples.report import report_row  # noqa: E402

# row -> (sample options, completions); prefix caching off unless the row says on
ROWS = {
    "plain": (["--spec", "none"], 200_000),
    "draft": (["--spec", "draft", "--draft", "exact-draft"], 10_000),
    "draft-prefix-caching": (["--spec", "draft", "--draft", "exact-draft", "--prefix-caching", "on"], 10_000),
    "lookup": (["--spec", "lookup", "--openvino-chunk", "256"], 200_000),
    "lookup-chunk-1024": (["--spec", "lookup", "--openvino-chunk", "1024"], 4096),
    "plain-prefix-caching": (["--spec", "none", "--prefix-caching", "on"], 20_000),
    # where the loss is (docs/engines.md, "Finding the OpenVINO loss"): one request per generate call, then also
    # 2 new tokens instead of 4
    "draft-one-request-per-call": (["--spec", "draft", "--draft", "exact-draft", "--openvino-chunk", "1"], 10_000),
    "draft-one-request-per-call-2-tokens": (["--spec", "draft", "--draft", "exact-draft", "--openvino-chunk", "1",
                                             "--max-new-tokens", "2"], 20_000),
}
KEEP = ("plain", "lookup")  # compared request by request (same seeds) before they are removed
COMMON = ["--engine", "openvino", "--target", "exact", "--k", "4", "--prompt-vocab", "13", "--prompt-lengths", "4", "4",
          "--n-prompts", "1", "--max-new-tokens", "4", "--kv-precision", "f32", "--no-progress"]


def _run(cmd: list[str], env=None) -> tuple[int, float, str]:
    tic = time.perf_counter()
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
    return p.returncode, time.perf_counter() - tic, (p.stderr or "").strip()


def _counters(engine: dict) -> dict:
    calls = [c["counters"] for c in engine.get("calls", []) if c.get("counters")]
    if not calls:  # prompt lookup exposes no extended_perf_metrics: unknown, not zero
        return {"draft_tokens": None, "accepted_tokens": None, "acceptance": None}
    drafted = sum(c["draft_tokens"] for c in calls)
    accepted = sum(c["accepted_tokens"] for c in calls)
    return {"draft_tokens": drafted, "accepted_tokens": accepted,
            "acceptance": round(accepted / drafted, 4) if drafted else float("nan")}


def one(name: str, args, out: Path) -> dict:
    opts, n = ROWS[name]
    n = min(n, args.max_per_prompt) if args.max_per_prompt else n
    d = out / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    samples = d / "samples.jsonl"
    rc, wall, err = _run([sys.executable, "-m", "harness", "sample", *COMMON, *opts, "--seed", str(args.seed),
                          "--openvino-python", args.openvino_python, "--n-per-prompt", str(n), "--out", str(samples)])
    row = {"engine": "openvino-genai 2026.4.1 (CPU)", "row": name, "options": " ".join(opts), "completions": n,
           "sample_wall_s": round(wall, 1)}
    if rc != 0:  # the failure's line goes to the table; the traceback (machine paths) is not kept
        samples.unlink(missing_ok=True)
        (d / "error.log").unlink(missing_ok=True)
        line = re.sub(r"(?<![\w.])/[^\s\"']*/([^/\s\"']+)", r"\1", err.splitlines()[0] if err else "")  # no machine paths
        return {**row, "verdict": f"engine failed (exit {rc})", "detail": line[:300]}
    engine = json.loads(Path(str(samples) + ".engine.json").read_text())
    shutil.move(str(samples) + ".engine.json", d / "engine.json")
    row.update(engine_generate_s=round(engine["generate_s"], 1),
               completions_per_s=round(n / engine["generate_s"]), **_counters(engine))
    rc, wall, err = _run([sys.executable, "-m", "harness", "verify-samples", "--samples", str(samples),
                          "--target", "exact", "--exact", "--epsilon", str(args.epsilon), "--no-progress",
                          "--out", str(d / "report")])
    row.update(report_row(d / "report") if rc in (0, 1, 4) else {"verdict": f"error (exit {rc})", "detail": err[-240:]},
               verify_wall_s=round(wall, 1))
    if rc in (0, 1, 4):
        hats = json.loads((d / "report" / "meta.json").read_text()).get("bounds", {}).get("hat") or []
        row["tv_hat_per_position"] = " ".join(f"{h:.3g}" for h in hats)
    if not args.keep_samples and name not in KEEP:
        samples.unlink()
    return row


def same_outputs(out: Path) -> float | None:
    """The share of requests whose completion is the same in the plain and lookup files (same request seeds)."""
    files = [out / n / "samples.jsonl" for n in KEEP]
    if not all(f.exists() for f in files):
        return None
    a, b = ({r["request_id"]: r["output_ids"] for r in map(json.loads, f.read_text().splitlines())} for f in files)
    return sum(a[k] == b.get(k) for k in a) / len(a)


COLUMNS = ["row", "verdict", "max_position_tv_upper", "max_position_tv_hat", "tv_hat_per_position", "first_rejecting",
           "completions", "completions_per_s", "sample_wall_s", "verify_wall_s", "draft_tokens", "acceptance",
           "same_as_plain"]


def table_md(df: pd.DataFrame, meta: dict) -> str:
    head = f"<!-- {json.dumps({k: meta[k] for k in ('commit', 'dirty', 'command') if k in meta})} -->\n"
    return head + md_table(df.to_dict("records"), [c for c in COLUMNS if c in df.columns])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--openvino-python", default=".venv-openvino/bin/python")
    ap.add_argument("--out", type=Path, default=REPO / "results" / "engines" / "openvino")
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--epsilon", type=float, default=0.01)
    ap.add_argument("--max-per-prompt", type=int, default=0, help="cap every row's size (a quick look; 0: none)")
    ap.add_argument("--keep-samples", action="store_true")
    args = ap.parse_args(argv)
    unknown = [r for r in args.rows.split(",") if r not in ROWS]
    if unknown:
        print(f"error: `--rows` must name rows of {list(ROWS)}; got {unknown}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.rows.split(","):
        rows.append(one(name, args, args.out))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    share = same_outputs(args.out)
    for row in rows:
        if row["row"] == "lookup" and share is not None:
            row["same_as_plain"] = round(share, 6)
    if not args.keep_samples:
        for n in KEEP:
            (args.out / n / "samples.jsonl").unlink(missing_ok=True)
    df = pd.DataFrame(rows)
    meta = metadata({"rows": args.rows, "seed": args.seed, "epsilon": args.epsilon,
                     "max_per_prompt": args.max_per_prompt}, args.seed)
    atomic_write_csv(args.out / "table.csv", df, meta)
    atomic_write_text(args.out / "table.md", table_md(df, meta))
    atomic_write_text(args.out / "meta.json", json.dumps(meta, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
