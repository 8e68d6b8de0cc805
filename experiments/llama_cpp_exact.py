"""llama.cpp (llama-cpp-python) verified at exact-law strength: the table of results/engines/llama_cpp/.

    python experiments/llama_cpp_exact.py --out results/engines/llama_cpp

For each mode (plain sampling; prompt-lookup speculation, k = 4, verified by exact match)
``python -m harness sample --engine llama-cpp`` draws completions on the exact Markov pair
(specimpl/assets/exact_pair/markov_target: V = 16, law exact at every position; one 4-token prompt) through
llama.cpp's Python API, and ``verify-samples --exact`` judges them against the float64 law (per-position token
TV certificate); for prompt lookup ``harness.samples.rules`` checks the engine's acceptances against p(d | c).
Exact-match verification draws one uniform per position whether a draft is there or not, so with the same
per-request seeds the two modes' completions coincide token for token (the coupled check of
experiments/llama_cpp_check.py): the table shows that (``same_as_plain``) instead of hiding it.  Each mode's
report and engine summary go under ``--out/<mode>/``; sample files are not kept (``--keep-samples`` keeps them).

Every report carries ``verify-samples``' dependence stage (:mod:`harness.samples.dependence`): the table gives its
line per mode, then a second table of its two tests (repeats against the law's expectation, the pairs' agreement
against within-prompt permutations), what each would detect at the file's size, and the stage's seconds.  Here
every request has its own seed (``request_seed(run seed, request index)``) and no ``-n<i>`` id, so the siblings
test's designated pairs are file neighbours (requests 2i, 2i + 1): two consecutive requests of one 2,000-request
chunk, run one after the other by the same engine process on the same ``Llama`` (reset and reseeded between).
Copies across the two engine processes (say both drew one stream from the load-time seed) are the duplicates
test's: it compares every completion with every earlier one of the prompt, wherever it sits.
results/engines/llama_cpp/dependence/ is this script at 20,000 completions per mode (``--per-prompt 20000``).
"""
from __future__ import annotations

import argparse
import hashlib
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

TARGET = "specimpl/assets/exact_pair/markov_target"
MODES = {"plain": ["--spec", "none"], "prompt-lookup": ["--spec", "ngram", "--k", "4"]}
COMMON = ["--engine", "llama-cpp", "--target", TARGET, "--prompt-vocab", "13", "--prompt-lengths", "4", "4",
          "--max-new-tokens", "8", "--no-progress"]  # a 4-token prompt: prefill is a third of the work at 35
COLUMNS = ["engine", "mode", "verdict", "max_position_tv_upper", "max_position_tv_hat", "rejecting_tests",
           "first_rejecting", "completions", "completions_per_s", "engine_generate_s", "tokens_per_s", "verify_wall_s",
           "dependence_s", "same_as_plain", "rule", "dependence"]
PAIRS = re.compile(r"^[\d,]+ designated pairs of completions \(([^)]*)\)")


def _run(cmd: list[str]) -> tuple[int, float, str]:
    tic = time.perf_counter()
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    return p.returncode, time.perf_counter() - tic, (p.stderr or "").strip()


def dependence_columns(report: Path) -> dict:
    """The dependence stage of a ``verify-samples`` report (meta.json ``info``): its two tests' statistics, p-values
    and planner figures, which rule designated the sibling pairs, the finding and the stage's seconds."""
    info = json.loads((Path(report) / "meta.json").read_text()).get("info") or {}
    if "dependence" not in info:
        return {"dependence": "not run (the report predates the dependence stage)"}
    dep = info["dependence"]
    t = {x["name"]: x for x in dep["tests"]}
    d, s = t["duplicates"], t["siblings"]
    m = PAIRS.match(s["what"])
    return {"dependence": dep["line"], "dependence_found": dep["finding"] is not None, "finding": dep["finding"] or "",
            "repeats": d["statistic"], "repeats_expected": d["expected"], "duplicates_p": d["pvalue"],
            "copies_detected": d["detects"], "pairs": s["n"], "pairs_by": m.group(1) if m else "",
            "siblings_p": s["pvalue"], "shared_detected": s["detects"],
            "dependence_s": round(info["wall_dependence_s"], 1) if "wall_dependence_s" in info else float("nan")}


def judge(mode: str, samples: Path, d: Path, epsilon: float, run=_run) -> dict:
    """``verify-samples --exact`` on one mode's file (report under ``d/report``): the certificate's columns, the
    dependence stage's (:func:`dependence_columns`) and, for prompt lookup, the acceptance rule's line.  ``run``
    runs a command in the repository: (exit status, wall seconds, stderr)."""
    rc, wall, err = run([sys.executable, "-m", "harness", "verify-samples", "--samples", str(samples), "--target",
                         TARGET, "--exact", "--epsilon", str(epsilon), "--no-progress", "--out", str(d / "report")])
    if rc not in (0, 1, 4):
        return {"verdict": f"error (exit {rc})", "detail": err[-240:], "verify_wall_s": round(wall, 1)}
    row = {**report_row(d / "report"), **dependence_columns(d / "report"), "verify_wall_s": round(wall, 1)}
    if mode != "plain":
        rules = subprocess.run([sys.executable, "-m", "harness.samples.rules", str(samples), TARGET, TARGET],
                               cwd=REPO, capture_output=True, text=True)
        row["rule"] = rules.stdout.strip().splitlines()[-1] if rules.returncode == 0 and rules.stdout.strip() else ""
    return row


def one(mode: str, args, out: Path) -> dict:
    d = out / mode
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    samples = d / "samples.jsonl"
    rc, wall, err = _run([sys.executable, "-m", "harness", "sample", *COMMON, *MODES[mode], "--n-prompts",
                          str(args.prompts), "--n-per-prompt", str(args.per_prompt), "--llama-workers",
                          str(args.workers), "--out", str(samples)])
    n = args.prompts * args.per_prompt
    row = {"engine": "llama.cpp (llama-cpp-python)", "mode": mode, "completions": n, "sample_wall_s": round(wall, 1)}
    if rc != 0:
        return {**row, "verdict": f"engine failed (exit {rc})", "detail": err.splitlines()[-1][:200] if err else ""}
    engine = json.loads(Path(str(samples) + ".engine.json").read_text())
    shutil.move(str(samples) + ".engine.json", d / "engine.json")
    row["engine"] = f"llama.cpp (llama-cpp-python {engine['engine']['version']})"
    row.update(engine_generate_s=round(engine["generate_s"], 1), tokens_per_s=round(engine["tokens_per_s"]),
               completions_per_s=round(engine["completions"] / engine["generate_s"]))
    row.update(judge(mode, samples, d, args.epsilon), tokens_sha256=tokens_digest(samples))
    if not args.keep_samples:
        samples.unlink()
    return row


def tokens_digest(samples: Path) -> str:
    """SHA-256 of the file's (request id, output tokens) in file order: equal digests, the same completions."""
    h = hashlib.sha256()
    with open(samples) as f:
        for line in f:
            r = json.loads(line)
            h.update(json.dumps([r["request_id"], r["output_ids"]]).encode())
    return h.hexdigest()


def _pct(x: float) -> str:
    return "-" if x != x else ("none" if x > 1 else f"{100 * x:.3g} %")


def dependence_md(df: pd.DataFrame) -> str:
    """The dependence stage's table: one line per mode (the columns of results/engines/dependence/table.md)."""
    lines = ["| engine | mode | dependence stage | completions | completions/s | repeats (expected) | duplicates p | "
             "copies detected | pairs | siblings p | shared streams detected | stage s | finding |",
             "|---|---|---|---:|---:|---|---:|---:|---|---:|---:|---:|---|"]
    for r in df.to_dict("records"):
        if "repeats" not in r or r["repeats"] != r["repeats"]:
            lines.append(f"| {r['engine']} | {r['mode']} | {r.get('dependence', r['verdict'])} | {r['completions']} |"
                         + " - |" * 9)
            continue
        stage = "**found**" if r["dependence_found"] else "none found at 0.001"
        lines.append(f"| {r['engine']} | {r['mode']} | {stage} | {r['completions']} | {r.get('completions_per_s', '-')} | "
                     f"{r['repeats']:.0f} ({r['repeats_expected']:.4g}) | {r['duplicates_p']:.2g} | "
                     f"{_pct(r['copies_detected'])} | {r['pairs']:,} ({r['pairs_by']}) | {r['siblings_p']:.2g} | "
                     f"{_pct(r['shared_detected'])} | {r['dependence_s']} | {r['finding'].replace('|', '/') or '-'} |")
    return "\n".join(lines) + "\n"


def table_md(df: pd.DataFrame, meta: dict) -> str:
    """The rows' table (:data:`COLUMNS`), then the dependence stage's."""
    head = f"<!-- {json.dumps({k: meta[k] for k in ('commit', 'dirty', 'command') if k in meta})} -->\n"
    main = md_table(df.to_dict("records"), [c for c in COLUMNS if c in df])
    return head + main + ("\n" + dependence_md(df) if "repeats" in df else "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "results" / "engines" / "llama_cpp")
    ap.add_argument("--modes", default="plain,prompt-lookup")
    ap.add_argument("--prompts", type=int, default=1, help="prompts (each certified on its own: bounds are per prompt)")
    ap.add_argument("--per-prompt", type=int, default=400_000, help="as the vLLM table: ~216k planned for 0.01")
    ap.add_argument("--workers", type=int, default=2, help="engine processes (one thread each)")
    ap.add_argument("--epsilon", type=float, default=0.01)
    ap.add_argument("--keep-samples", action="store_true")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for mode in args.modes.split(","):
        rows.append(one(mode, args, args.out))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    df = pd.DataFrame(rows)
    if "tokens_sha256" in df and (df["mode"] == "plain").any():  # exact-match verification: same seeds, same tokens
        df["same_as_plain"] = df["tokens_sha256"] == df.loc[df["mode"] == "plain", "tokens_sha256"].iloc[0]
    meta = metadata({"modes": args.modes, "prompts": args.prompts, "per_prompt": args.per_prompt,
                     "workers": args.workers, "epsilon": args.epsilon}, 0)
    atomic_write_csv(args.out / "table.csv", df, meta)
    atomic_write_text(args.out / "table.md", table_md(df, meta))
    atomic_write_text(args.out / "meta.json", json.dumps(meta, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
