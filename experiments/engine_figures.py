"""Engines verified from their samples (issue 13's figures): for each engine and each engine-level control,
the verdict of ``verify-samples`` in both modes with its certified epsilon or its evidence, the tokens
scored and the wall times; and the completions the planners ask for to certify 0.01 per position (scored: the
token TV of each step from the engine's own prefixes, and the PIT law's Kolmogorov distance, which is not a token
TV; two-sample: the token TV).

    python experiments/engine_figures.py --out results/engines            # the commented defaults below
    python experiments/engine_figures.py --quick --out /tmp/engines       # a small look (~3 min)
    python experiments/engine_figures.py --llama --out results/engines    # llama.cpp too (the `llama` extra)

Every run takes the path a user takes: ``python -m harness sample`` writes a sample file and ``python -m
harness verify-samples`` reads it, in a subprocess each, timed by the wall clock around it:

* scored: against the shipped tiny target in float64 (``--dtype float64``);
* two-sample: against target-only samples of the same prompts and controls (our autoregressive sampler,
  another seed): no model.

Rows (``runs.csv``, ``table.md``): engines under test (ours, transformers' assisted generation and prompt
lookup; llama.cpp's prompt lookup on and off through its Python API on token ids, with ``--llama``), the
engine-level controls of :mod:`harness.samples.controls` (must be lossy), and one row per mode with the
planners' completions for epsilon = 0.01 at this run's sizes (scored: the token-TV planner of
:func:`harness.samples.certificate.token_tv_bounds`, read from the report's ``completions_needed_at``, and
:func:`~harness.samples.certificate.scored_n_for_distance` for the PIT law; two-sample:
:func:`~harness.samples.certificate.two_sample_n_for_tv`).  The verdict's epsilon
is ``--epsilon``; "bound" is the largest per-position upper bound, i.e. the smallest epsilon this sample
certifies when nothing rejects.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.core.provenance import (atomic_write_csv, atomic_write_json, atomic_write_text, metadata,  # noqa: E402
                                     read_table_csv)

DEFAULTS = dict(
    big_prompts=256, big_per_prompt=32,   # ours speculative and its baselines: 8,192 completions (certifies 0.05 scored)
    prompts=64, per_prompt=16,            # transformers and the controls: 1,024 completions (batch 1 for transformers)
    llama_prompts=200, llama_per_prompt=32,  # llama.cpp (--llama): 6,400 completions per run (6,336 certify 0.05 scored)
    tokens=32,                            # new tokens per completion
    k=4,                                  # draft tokens a round
    epsilon=0.05,                         # the certificate's tolerance per position
    planner_epsilon=0.01,                 # the planners' figure: completions to certify 0.01 per position
    seed=0,
)
QUICK = dict(big_prompts=32, big_per_prompt=8, prompts=16, per_prompt=4, llama_prompts=16, llama_per_prompt=4)
TARGET = "specimpl/assets/tiny_pair/target"
VOCAB = 259  # the tiny pair's byte-level vocabulary: 256 bytes and 3 specials

# name: (role, sample arguments, size, temperature of the baseline)
RUNS = {
    "ours_speculative": ("lossless", ["--engine", "ours", "--method", "speculative"], "big", 1.0),
    "hf_assisted": ("lossless", ["--engine", "hf", "--hf-mode", "assistant"], "small", 1.0),
    "hf_prompt_lookup": ("lossless", ["--engine", "hf", "--hf-mode", "prompt_lookup"], "small", 1.0),
    "temperature_ignored": ("lossy control", ["--engine", "ours", "--control", "temperature_ignored",
                                              "--temperature", "0.5"], "small", 0.5),
    "shared_stream": ("lossy control", ["--engine", "ours", "--control", "shared_stream"], "small", 1.0),
    "stop_truncation": ("lossy control", ["--engine", "ours", "--control", "stop_truncation"], "small", 1.0),
}


def _harness(*args: str) -> float:
    """Run ``python -m harness ARGS`` from the repository root; its wall time (exit 0, 1 or 4 expected: certified, lossy, inconclusive)."""
    tic = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "harness", *args], cwd=REPO, capture_output=True, text=True)
    if p.returncode not in (0, 1, 4):
        raise SystemExit(f"python -m harness {' '.join(args)} exited {p.returncode}:\n{p.stderr[-2000:]}")
    return time.perf_counter() - tic


def _size(a, size: str) -> list[str]:
    n, m = (a.big_prompts, a.big_per_prompt) if size == "big" else (a.prompts, a.per_prompt)
    return ["--n-prompts", str(n), "--n-per-prompt", str(m)]


def sample(a, work: Path, name: str, args: list[str], size: str, seed: int) -> tuple[Path, float]:
    f = work / f"{name}.jsonl"
    wall = _harness("sample", *args, *_size(a, size), "--k", str(a.k), "--max-new-tokens", str(a.tokens),
                    "--seed", str(seed), "--prompt-seed", str(a.seed), "--out", str(f), "--no-progress")
    return f, wall


def baseline(a, work: Path, size: str, temperature: float) -> tuple[Path, float]:
    """Target-only samples of the same prompts and controls (the two-sample mode's reference)."""
    return sample(a, work, f"baseline_{size}_T{temperature:g}", ["--engine", "ours", "--method", "autoregressive",
                                                                  "--temperature", f"{temperature:g}"],
                  size, a.seed + 1000)


def verify(a, work: Path, name: str, samples: Path, mode: str, reference: str) -> dict:
    """One verify-samples run; its verdict, bound, needed completions and first rejections."""
    out = work / f"verify_{name}_{mode}"
    opt = (["--target", reference, "--dtype", "float64"] if mode == "scored" else
           ["--baseline", reference, "--vocab-size", str(VOCAB)])
    wall = _harness("verify-samples", "--samples", str(samples), *opt, "--epsilon", str(a.epsilon),
                    "--seed", str(a.seed), "--out", str(out), "--no-progress")
    meta = json.loads((out / "meta.json").read_text())
    tests = read_table_csv(out / "tests.csv")
    rej = tests[tests["reject"]].sort_values("p_adjusted")
    b, info = meta["bounds"], meta["info"]
    return dict(mode=mode, verdict=meta["verdict"], completions=meta["completions"],
                tokens=info.get("tokens_scored", info.get("tokens_compared")), tests=len(tests),
                rejected=len(rej), first_rejections="; ".join(
                    f"{r.family}/{r.test}" + (f"@{int(r.position)}" if r.position >= 0 else "") +
                    f" p_adj {r.p_adjusted:.2g}" for r in rej.head(3).itertuples()),
                bound=b.get("max_upper"), completions_needed=b.get("completions_needed"),
                completions_needed_at=b.get("completions_needed_at") or {},
                delta_each=b.get("delta_each"), reach=min(b["n"]) / meta["completions"] if b.get("n") else None,
                verify_wall_s=wall, headline=meta["headline"], report=out)


def planner_rows(a, rows: list[dict]) -> list[dict]:
    """Completions to certify ``planner_epsilon`` per position in each mode, at the delta and reach measured:
    scored token TV (the report's own planner at this epsilon, when it planned it), scored PIT Kolmogorov
    distance, two-sample token TV."""
    from harness.samples.certificate import scored_n_for_distance, two_sample_n_for_tv
    from harness.laws.scenarios import load_settings
    s = load_settings()
    out = []

    def row(mode, n, r, what):
        return dict(engine=f"planner (epsilon {a.planner_epsilon:g})", role="planner", mode=mode, completions_needed=n,
                    delta_each=r["delta_each"], reach=r["reach"],
                    headline=f"{n} completions {'per file ' if mode == 'two-sample' else ''}certify {what} "
                             f"{a.planner_epsilon:g} per position (power {s.power:g}, T = {a.tokens})")
    sc = next(x for x in rows if x["engine"] == "ours_speculative" and x["mode"] == "scored")
    tv = (sc.get("completions_needed_at") or {}).get(f"{a.planner_epsilon:g}")
    if tv is not None:
        out.append(row("scored", int(tv), sc, "token TV of each step from the engine's own prefixes"))
    out.append(row("scored", scored_n_for_distance(a.planner_epsilon, sc["delta_each"], s.power, sc["reach"]), sc,
                   "PIT Kolmogorov distance"))
    ts = next(x for x in rows if x["engine"] == "ours_speculative" and x["mode"] == "two-sample")
    out.append(row("two-sample", two_sample_n_for_tv(a.planner_epsilon, VOCAB + 1, ts["delta_each"], s.power), ts,
                   "token TV"))
    return out


def llama_files(a, work: Path) -> dict:
    """llama.cpp's prompt lookup on and off, Python API on token ids (the records the check writes)."""
    from harness.samples.engines import llama_cpp as L
    from harness.samples.engines.gguf_export import export_gguf
    from specimpl.hf import TINY_PAIR_DIR, tiny_pair_prompts
    gguf = work / "target.gguf"
    export_gguf(TINY_PAIR_DIR / "target", gguf)
    prompts = tiny_pair_prompts(a.llama_prompts, length=48, min_length=8, seed=a.seed)
    files = {}
    for name, k, seed in (("llama_cpp_plain", None, a.seed + 1), ("llama_cpp_prompt_lookup", a.k, a.seed + 2)):
        llm = L.load_llama(gguf, kv="float32", draft_k=k, n_ctx=256)
        engine = L.api_engine_block(llm, kv="float32", gguf_path=gguf)
        tic = time.perf_counter()
        recs = list(L.api_records(llm, prompts, per_prompt=a.llama_per_prompt, max_new_tokens=a.tokens, seed=seed,
                                  engine=engine))
        wall = time.perf_counter() - tic
        L.write_jsonl(work / f"{name}.jsonl", recs)
        files[name] = (work / f"{name}.jsonl", wall)
        del llm
    return files


def run_all(a, work: Path) -> pd.DataFrame:
    rows, bases = [], {}
    for name, (role, args, size, temp) in RUNS.items():
        print(f"[{time.strftime('%H:%M:%S')}] {name}", file=sys.stderr, flush=True)
        f, wall = sample(a, work, name, args, size, a.seed)
        if (size, temp) not in bases:
            bases[(size, temp)] = baseline(a, work, size, temp)[0]
        for mode, ref in (("scored", TARGET), ("two-sample", str(bases[(size, temp)]))):
            rows.append(dict(engine=name, role=role, sample_wall_s=wall, **verify(a, work, name, f, mode, ref)))
    if a.llama:
        print(f"[{time.strftime('%H:%M:%S')}] llama.cpp", file=sys.stderr, flush=True)
        files = llama_files(a, work)
        plain = files["llama_cpp_plain"][0]
        for name, (f, wall) in files.items():
            rows.append(dict(engine=name, role="lossless", sample_wall_s=wall, **verify(a, work, name, f, "scored", TARGET)))
            if name != "llama_cpp_plain":
                rows.append(dict(engine=name, role="lossless", sample_wall_s=wall,
                                 **verify(a, work, name, f, "two-sample", str(plain))))
    return pd.DataFrame(rows + planner_rows(a, rows))


def table_md(df: pd.DataFrame, a, meta: dict) -> str:
    lines = ["# Engines verified from their samples", "",
             f"`python -m harness verify-samples` on files written by `python -m harness sample`; {a.tokens} new "
             f"tokens per completion; certificate epsilon {a.epsilon:g} per position at simultaneous confidence "
             "0.999, one Holm family per run at 1e-4. Scored: against the tiny target in float64 (the bound is the "
             "token TV of each step from the engine's own prefixes, harness/stats/rbtv.py; each report states the "
             "PIT law's Kolmogorov bound beside it). Two-sample: against target-only samples of the same "
             "prompts and controls (the bound is the token TV per position over V + 1 = 260 cells). `bound`: the "
             "largest per-position upper bound (the epsilon this sample certifies when nothing rejects).", "",
             "| engine | role | mode | verdict | completions | tokens | bound | needed for eps | first rejections "
             "| sample s | verify s |", "|---|---|---|---|---:|---:|---:|---:|---|---:|---:|"]
    for r in df[df.role != "planner"].itertuples():
        lines.append(f"| {r.engine} | {r.role} | {r.mode} | **{r.verdict}** | {r.completions:.0f} | {r.tokens:.0f} | "
                     f"{r.bound:.3g} | {r.completions_needed:.0f} | {r.first_rejections or '-'} | {r.sample_wall_s:.0f} "
                     f"| {r.verify_wall_s:.0f} |")
    lines += ["", "## Completions to certify %g per position (planners): scored = the token TV of each step from the "
              "engine's own prefixes, and the Kolmogorov distance of each position's PIT law (not a token TV); "
              "two-sample = the token TV; exact mode (a token TV against the enumerated law): results/engines/vllm/"
              % a.planner_epsilon, ""]
    lines += [f"- {r.mode}: {r.headline}; each position's bound at miss probability {r.delta_each:.2g}"
              + (f", reach {r.reach:.3g}" if r.mode == "scored" else "") for r in df[df.role == "planner"].itertuples()]
    lines += ["", f"commit {meta['commit'][:12]}{' (dirty)' if meta['dirty'] else ''}; command `{meta['command']}`"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for k, v in DEFAULTS.items():
        ap.add_argument("--" + k.replace("_", "-"), type=type(v), default=v)
    ap.add_argument("--quick", action="store_true", help="small sizes: " + json.dumps(QUICK))
    ap.add_argument("--llama", action="store_true", help="llama.cpp runs too (needs the `llama` extra)")
    ap.add_argument("--out", type=Path, default=REPO / "results" / "engines")
    ap.add_argument("--work", type=Path, help="sample files and reports (default: OUT/work, removed at the end)")
    a = ap.parse_args(argv)
    if a.quick:
        for k, v in QUICK.items():
            setattr(a, k, v)
    work = a.work or a.out / "work"
    work.mkdir(parents=True, exist_ok=True)
    df = run_all(a, work.resolve())
    meta = metadata({k: getattr(a, k) for k in [*DEFAULTS, "llama"]}, a.seed)
    rep = a.out / "reports"
    for r in df[df.role != "planner"].itertuples():  # each run's summary.md beside the table
        (rep / f"{r.engine}_{r.mode}").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(r.report) / "summary.md", rep / f"{r.engine}_{r.mode}" / "summary.md")
    atomic_write_csv(a.out / "runs.csv", df.drop(columns=["report"]), meta)
    atomic_write_text(a.out / "table.md", table_md(df, a, meta))
    atomic_write_json(a.out / "meta.json", meta)
    if a.work is None:
        shutil.rmtree(work)
    print((a.out / "table.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
