"""Batch-level and sampling-parameter probes of vLLM 0.32.0 (CPU, fix plugin loaded), each judged at epsilon 0.02.

    python experiments/vllm_probes.py --vllm-python .venv-vllm/bin/python --out results/engines/vllm/probes

Engines have broken losslessness at the batch level before (rows sharing a stream, a path that ignored a
control).  Each probe draws completions of the exact Markov pair (one prompt of token ids, 8 new tokens, EOS
ignored) with speculation on (a draft model, probabilistic drafts, k = 4) under one batch condition and judges
them at token TV epsilon = 0.02:

exact law (``verify-samples --exact``; a file holding several controls is split by controls and each part judged
on its own, since a certificate is stated for one law):
    mixed_rows                 one generate call whose rows cycle through T = 1 (8 tokens), T = 0.6 (5 tokens),
                               top_p = 0.8 (3 tokens), twice, then greedy (8 tokens): mixed temperatures / top-p /
                               greedy rows and ragged max_tokens in one batch (the former greedy_mixed probe)
    seeding_mixed              seeded and unseeded requests in one batch
    max_num_seqs_1 / _2 / _4   the engine batches at most 1, 2, 4 requests
    top_k_no_temperature       top_k = 5 with the temperature left unset (vLLM's default 1.0 applies): crashes
    n_2_seeded / n_2_unseeded  SamplingParams.n = 2, with and without a request seed; the n completions of one
                               request are also judged for independence (the dependence stage's siblings test
                               pairs the ``-n<i>`` completions of one request and those sharing a seed)
    prefix_caching_on          prefix caching on (every other probe runs with it off, vLLM's default here)
    chunked_prefill_seeded     seeded requests whose prefill is chunked (64 tokens a step): crashes
    chunked_prefill_unseeded   the same without seeds
    server_concurrent          ``vllm serve`` (started here on 127.0.0.1, stopped after) and three concurrent
                               clients (``--engine openai``, 8 requests in flight each) at T = 1, T = 0.6 and
                               top_p = 0.8: each client's file judged on its own
two-sample (``verify-samples --baseline``: no exact law in our sample format or scorer; the speculative file is
judged against vLLM's own plain decoding under the same controls, which trusts vLLM's non-speculative path for
these controls):
    min_p                      min_p = 0.1 (vLLM refuses it with speculation: the row says so)
    penalties                  repetition 1.3, presence 0.5, frequency 0.5 (in ``x_penalties``)

Sizes are fixed in advance: 45,000 completions per judged law (the planner asks ~28.7k for epsilon = 0.02 at
this prompt and family; its figure is the *expected* bound, so 1.6 times it), except where a probe's throughput
here makes that size cost more than its share of the hour (``BELOW_SIZE``: the row states the size that would
certify and the engine time it would take at the rate measured; the planner's size is in ``needed_for_0.02``); penalties 60,000 a side (the two-sample planner asks ~162,000).  The table (probes.md / probes.csv): probe, part, verdict, largest per-position token-TV bound, the
completions the planner asks for epsilon = 0.02, completions drawn, the engine's completions per second, how
long the certificate took (verify-samples wall time), the dependence stage's line.  A probe whose engine fails
is reported as such (exit status and root cause; reproductions in experiments/vllm_crash_repro.py).
"""
from __future__ import annotations

import argparse
import json
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

EPSILON = 0.02
PAIR = "specimpl/assets/exact_pair"
TARGET = f"{PAIR}/markov_target"
COMMON = ["--target", TARGET, "--prompt-vocab", "13", "--n-prompts", "1", "--max-new-tokens", "8", "--no-progress"]
BASE = ["--engine", "vllm", "--k", "4", "--spec", "draft", "--draft", f"{PAIR}/markov_draft", *COMMON]
MIXED = [{"temperature": 1.0}, {"temperature": 0.6, "max_new_tokens": 5}, {"top_p": 0.8, "max_new_tokens": 3}] * 2 + \
    [{"temperature": 0}]  # greedy every 7th row (its one-hot law certifies at ~530)
CLIENTS = [[], ["--temperature", "0.6"], ["--top-p", "0.8"]]
N = 45_000  # completions per judged law
N2 = 60_000  # completions a side, two-sample
TWO_SAMPLE = ("min_p", "penalties")
PROBES = {  # name -> (extra sample options, requests per prompt)
    "mixed_rows": (["--row-controls", json.dumps(MIXED)], 7 * N // 2),
    "n_2_seeded": (["--n", "2"], N // 2),
    "n_2_unseeded": (["--n", "2", "--seeding", "none"], N // 2),
    "penalties": (["--repetition-penalty", "1.3", "--presence-penalty", "0.5", "--frequency-penalty", "0.5"], N2),
    "min_p": (["--min-p", "0.1"], 1_000),
    "top_k_no_temperature": (["--top-k", "5", "--omit-temperature"], 1_000),
    "chunked_prefill_seeded": (["--max-num-batched-tokens", "64", "--max-model-len", "64", "--max-num-seqs", "16"], 1_000),
    "chunked_prefill_unseeded": (["--max-num-batched-tokens", "64", "--max-model-len", "64", "--max-num-seqs", "16",
                                  "--seeding", "none"],
                                 10_000),
    "server_concurrent": ([], 1_000),
    "seeding_mixed": (["--seeding", "mixed"], N),
    "prefix_caching_on": (["--prefix-caching", "on"], N),
    "max_num_seqs_4": (["--max-num-seqs", "4"], 12_000),
    "max_num_seqs_2": (["--max-num-seqs", "2"], 6_000),
    "max_num_seqs_1": (["--max-num-seqs", "1"], 3_000),
}
NOT_DRAWN = {  # probes with no law to judge: why
    "top_k_no_temperature": "the engine crashes at its first step (a reproduction, not a sample)",
    "chunked_prefill_seeded": "the engine crashes at its first chunked step (a reproduction, not a sample)",
    "min_p": "vLLM refuses min_p with speculative decoding (VLLMValidationError at the request): no law to judge",
}
BELOW_SIZE = {"max_num_seqs_1": 1, "max_num_seqs_2": 1, "max_num_seqs_4": 1, "chunked_prefill_unseeded": 1,
              "server_concurrent": 3, "penalties": 2}  # drawn below the certifying size: files sharing the rate


def size_note(row: dict) -> str:
    """Why a row was not drawn at its certifying size: its fixed reason, or, for a probe drawn below size (its
    throughput here), the size that would certify (1.6 x the planner's figure, per law or per side) and the engine
    time it would take at the completions/s measured in this run."""
    name = row["probe"]
    if name in NOT_DRAWN:
        return NOT_DRAWN[name]
    need, rate = row.get("needed_for_0.02"), row.get("completions_per_s")
    if name not in BELOW_SIZE or row.get("verdict") != "inconclusive" or not need or not rate or need != need:
        return ""
    want = int(1.6 * float(need) + 0.5)
    mins = BELOW_SIZE[name] * want / float(rate) / 60
    per = "a side (spec and plain)" if name in TWO_SAMPLE else "per law"
    return (f"needs ~{want:,} {per} (1.6 x the planner's {int(need):,}): ~{mins:.0f} min of engine time at the "
            f"{float(rate):.0f} completions/s measured here{' (three clients together)' if BELOW_SIZE[name] == 3 else ''}")


def _run(cmd: list, timeout: float = 3600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def _verify(samples: Path, out: Path, baseline: Path | None = None) -> dict:
    mode = ["--baseline", str(baseline), "--vocab-size", "16"] if baseline else ["--target", TARGET, "--exact"]
    tic = time.perf_counter()
    p = _run([sys.executable, "-m", "harness", "verify-samples", "--samples", str(samples), *mode, "--epsilon",
              str(EPSILON), "--no-progress", "--out", str(out)])
    wall = round(time.perf_counter() - tic, 1)
    if p.returncode not in (0, 1, 4):
        return {"exit": p.returncode, "verdict": f"error {p.returncode}", "detail": p.stderr.strip()[-200:]}
    meta = json.loads((out / "meta.json").read_text())
    needed = (meta.get("bounds") or {}).get("completions_needed")
    return {"exit": p.returncode, **report_row(out), "needed_for_0.02": needed, "certificate_s": wall}


def _split(samples: Path) -> dict[str, Path]:
    """The records of a file, one file per controls (temperature, top_p, max_new_tokens, greedy), in order."""
    parts: dict[str, list] = {}
    with open(samples) as f:
        for line in f:
            c = json.loads(line)["controls"]
            key = ("greedy" if c["greedy"] else f"T={c['temperature']:g} top_p={c['top_p']:g}") + \
                f" max_tokens={c['max_new_tokens']}"
            parts.setdefault(key, []).append(line)
    out = {}
    for i, (key, lines) in enumerate(parts.items()):
        out[key] = samples.with_suffix(f".part{i}.jsonl")
        out[key].write_text("".join(lines))
    return out


def _sample(cmd: list, samples: Path) -> tuple[dict, str | None]:
    """Run one ``sample``; (its engine summary or {}, the failure line or None)."""
    samples.unlink(missing_ok=True)
    p = _run([sys.executable, "-m", "harness", "sample", *cmd, "--out", str(samples)])
    if p.returncode != 0:
        line = (p.stderr.strip().splitlines() or [""])[-1].split("; full traceback in")[0]  # no machine paths
        return {}, f"engine failed (exit {p.returncode}): " + line.removeprefix("python -m harness sample: failed: ")[:300]
    eng = Path(str(samples) + ".engine.json")
    return (json.loads(eng.read_text()) if eng.exists() else {}), None


def _rate(n: int, seconds: float | None) -> dict:
    return {"engine_generate_s": round(seconds, 1) if seconds else None,
            "completions_per_s": round(n / seconds, 1) if seconds else None}


def probe_offline(name: str, args, d: Path) -> list[dict]:
    extra, n = PROBES[name]
    samples = d / "samples.jsonl"
    eng, fail = _sample([*BASE, *extra, "--vllm-python", args.vllm_python, "--n-per-prompt", str(n)], samples)
    drawn = n * (2 if "--n" in extra else 1)
    opts = "--row-controls (T=1 / 8 tokens, T=0.6 / 5, top_p=0.8 / 3) x 2 + greedy / 8" if name == "mixed_rows" \
        else " ".join(extra)
    base = {"probe": name, "options": opts, "completions": drawn}
    if fail:
        return [{**base, "verdict": "engine failed", "detail": fail}]
    base.update(_rate(drawn, eng.get("generate_s")))
    parts = _split(samples)
    if len(parts) == 1:
        return [{**base, "part": "all", **_verify(samples, d / "report")}]
    return [{**base, "part": key, "completions": sum(1 for _ in open(f)), **_verify(f, d / f"report_part{i}")}
            for i, (key, f) in enumerate(parts.items())]


def probe_two_sample(name: str, args, d: Path) -> list[dict]:
    extra, n = PROBES[name]
    common = [*COMMON, "--engine", "vllm", "--k", "4", *extra, "--vllm-python", args.vllm_python,
              "--n-per-prompt", str(n)]
    spec, plain = d / "samples.jsonl", d / "baseline.jsonl"
    base = {"probe": name, "options": " ".join(extra) + " (spec vs plain)", "completions": n}
    e1, fail = _sample([*common, "--spec", "draft", "--draft", f"{PAIR}/markov_draft"], spec)
    e2, fail2 = (None, None) if fail else _sample([*common, "--spec", "none", "--seed", "1"], plain)
    if fail or fail2:
        return [{**base, "verdict": "engine failed", "detail": fail or fail2}]
    row = {**base, "part": "spec vs plain", **_rate(n, e1.get("generate_s")), **_verify(spec, d / "report", plain)}
    row["detail"] = f"{row.get('detail', '')} | plain: {n / e2['generate_s']:.0f} completions/s" if e2.get(
        "generate_s") else row.get("detail")
    return [row]


def probe_server(name: str, args, d: Path) -> list[dict]:
    """Three concurrent clients of one ``vllm serve`` (speculative, the fix plugin loaded), each its own controls."""
    from harness.samples.engines.vllm_engine import serve, speculative_config
    _, n = PROBES[name]
    spec = speculative_config("draft", 4, str(REPO / PAIR / "markov_draft"))
    files = [d / f"client{i}.jsonl" for i in range(len(CLIENTS))]
    with serve(str(REPO / TARGET), python=args.vllm_python, spec=spec, log_path=d / "server.log") as url:
        procs, tic = [], time.perf_counter()
        for i, (ctl, f) in enumerate(zip(CLIENTS, files)):
            f.unlink(missing_ok=True)
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "harness", "sample", "--engine", "openai", "--url", url, "--model",
                 str(REPO / TARGET), *COMMON[2:], "--n-per-prompt", str(n), "--ignore-eos", "--request-seeds",
                 "--seed", str(i), "--concurrency", "8", *ctl, "--out", str(f)], cwd=REPO,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        errs = [p.communicate()[1] for p in procs]
        wall = time.perf_counter() - tic
    (d / "server.log").unlink(missing_ok=True)
    rows = []
    for i, (ctl, f, p, err) in enumerate(zip(CLIENTS, files, procs, errs)):
        base = {"probe": name, "part": f"client {i}: " + (" ".join(ctl) or "T=1"), "completions": n,
                "options": "vllm serve + 3 concurrent clients (--concurrency 8 each)", **_rate(3 * n, wall)}
        if p.returncode != 0:
            rows.append({**base, "verdict": "engine failed", "detail": err.strip().splitlines()[-1][:240]})
        else:
            rows.append({**base, **_verify(f, d / f"report_client{i}")})
    return rows


def probe(name: str, args) -> list[dict]:
    d = args.out / name
    d.mkdir(parents=True, exist_ok=True)
    fn = probe_server if name == "server_concurrent" else probe_two_sample if name in TWO_SAMPLE else probe_offline
    rows = fn(name, args, d)
    if not args.keep_samples:
        for f in d.glob("*.jsonl"):
            f.unlink()
    (d / "rows.json").write_text(json.dumps(rows, indent=1))
    return rows


COLS = ["probe", "part", "options", "verdict", "max_position_tv_upper", "needed_for_0.02", "completions",
        "completions_per_s", "certificate_s", "first_rejecting", "not_drawn_at_size"]


def write_table(out: Path, names: list[str], meta: dict) -> None:
    """probes.csv / probes.md from every probe folder's rows.json (probes run in several invocations combine)."""
    rows = []
    for name in names:
        f = out / name / "rows.json"
        if f.exists():
            rows += json.loads(f.read_text())
    for r in rows:
        r["not_drawn_at_size"] = size_note(r)
    df = pd.DataFrame(rows)
    atomic_write_csv(out / "probes.csv", df, meta)
    head = f"<!-- commit {meta.get('commit')}{' (dirty)' if meta.get('dirty') else ''}; command {meta.get('command')} -->\n"
    atomic_write_text(out / "probes.md", head + md_table(df.to_dict("records"), [c for c in COLS if c in df]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm-python", default=".venv-vllm/bin/python")
    ap.add_argument("--out", type=Path, default=REPO / "results" / "engines" / "vllm" / "probes")
    ap.add_argument("--probes", default=",".join(PROBES), help="comma-separated probes to run (the table holds "
                                                               "every probe whose folder has rows.json)")
    ap.add_argument("--keep-samples", action="store_true")
    ap.add_argument("--table-only", action="store_true", help="rewrite probes.md / probes.csv from the probe "
                                                              "folders' rows.json, running nothing")
    args = ap.parse_args(argv)
    args.vllm_python = str(Path(args.vllm_python).absolute())
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.probes.split(","):
        if name not in PROBES:
            print(f"vllm_probes.py: error: `--probes` must name probes among {list(PROBES)}; got {name!r}",
                  file=sys.stderr)
            return 2
    if args.table_only:
        write_table(args.out, list(PROBES), metadata({"table_only": True, "epsilon": EPSILON}, 0))
        return 0
    for name in args.probes.split(","):
        tic = time.perf_counter()
        rows = probe(name, args)
        print(f"{name} ({time.perf_counter() - tic:.0f} s): " + "; ".join(
            f"{r.get('part', '')} {r.get('verdict')} {r.get('max_position_tv_upper', '')}" for r in rows),
            file=sys.stderr, flush=True)
        write_table(args.out, list(PROBES), metadata({"probes": args.probes, "epsilon": EPSILON}, 0))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
