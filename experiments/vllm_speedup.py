"""vLLM (CPU) speculative vs plain tokens/s on the shipped tiny pair, measured side by side and predicted from
target-only / draft-only profiling (issue 25, item 4).

    python experiments/vllm_speedup.py --vllm-python .venv-vllm/bin/python --out results/engines/vllm/speedup

Engines (one per process, vLLM 0.32 CPU with the fix plugin): ``plain`` (the tiny target alone),
``draft-only`` (the tiny draft served alone: the draft's own per-step cost), and ``spec-k<k>`` (target + draft,
vLLM's draft_model method, probabilistic drafts).  ``--rounds`` rounds of processes, the configurations'
order rotated each round; in each process ``--repeats`` timed ``generate`` calls per batch (B prompts of
``--prompt-len`` tokens, ``--max-new-tokens`` tokens each, EOS ignored, temperature 1) and one single-token
call (prefill + first token).  Measured S = tokens/s of spec over plain in the same round (medians of each
process's calls), the median over rounds.

Prediction, nothing taken from the speculative runs (:func:`predict`): per-step decode time t_ar(B) =
(t_generate - t_first) / (N - 1) of ``plain`` and t_d(B) of ``draft-only``, both calls' first-token times, the
tiny target's (k + 1)-token minus 1-token forward from the harness profiler (torch, same shapes), and the
acceptance histogram measured with the harness's own chain sampler on the same prompts; the round process of
:func:`harness.speedup.costmodel.simulate_rounds` (finished requests leave the batch at once: continuous
batching).  Two bounds on a round's draft cost: ``engine-step`` (each of the k drafts costs a whole draft-only
engine step, scheduler included) and ``forward-only`` (each costs the draft's torch forward alone).
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

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from harness.core.figures import md_table  # noqa: E402
from harness.core.provenance import atomic_write_csv, atomic_write_json, atomic_write_text, command_line, metadata  # noqa: E402
from harness.core.threads import with_threads  # noqa: E402
from harness.samples.engines.server import stop_group  # noqa: E402
from harness.samples.engines.vllm_engine import _worker_env  # noqa: E402
from harness.speedup.costmodel import conditional_alphas, simulate_rounds  # noqa: E402
from harness.speedup.profiler import profile_model  # noqa: E402
from harness.speedup.tune import measure_acceptance  # noqa: E402
from specimpl.hf import TINY_PAIR_DIR, load_pair, tiny_pair_prompts  # noqa: E402

WORKER = REPO / "experiments" / "vllm_speedup_worker.py"


def _configs(ks) -> dict:
    t, d = str(TINY_PAIR_DIR / "target"), str(TINY_PAIR_DIR / "draft")
    out = {"plain": (t, None), "draft-only": (d, None)}
    for k in ks:
        out[f"spec-k{k}"] = (t, {"method": "draft_model", "model": d, "num_speculative_tokens": k,
                                 "draft_sample_method": "probabilistic"})
    return out


def run_engine(python: str, target, spec, prompts, args, configs=None) -> dict:
    """One worker process (one engine, or with ``configs`` all of them interleaved); its JSON summary.  Exit 3
    with the log's tail if the engine fails."""
    with tempfile.TemporaryDirectory(prefix="specverify-vllm-speedup-") as tmp:
        job = {"target": target, "speculative": spec, "prompts": prompts, "batches": args.batches,
               "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "temperature": 1.0,
               "engine_args": {"max_num_seqs": max(args.batches)}, "out": str(Path(tmp) / "out.json")}
        if configs is not None:  # six engines in one process: a smaller KV cache each (the calls need ~100 KiB)
            job.update(configs={n: {"target": t, "speculative": s} for n, (t, s) in configs.items()},
                       engine_args={"max_num_seqs": max(args.batches), "kv_cache_memory_bytes": 1 << 28})
        (Path(tmp) / "job.json").write_text(json.dumps(job))
        with open(Path(tmp) / "log", "w") as lf:
            proc = subprocess.Popen([python, str(WORKER), str(Path(tmp) / "job.json")], env=_worker_env("fixed"),
                                    stdout=lf, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                rc = proc.wait(1800)
            finally:
                stop_group(proc)
        if rc != 0:
            tail = (Path(tmp) / "log").read_text(errors="replace").strip().splitlines()[-3:]
            raise SystemExit(f"vllm_speedup: the worker for {target} (spec {spec}) exited {rc}: {' | '.join(tail)}")
        return json.loads(Path(job["out"]).read_text())


def measure(args, prompts) -> pd.DataFrame:
    """Every timed call: (round, config, rep, batch, kind, seconds, tokens, drafted, accepted)."""
    cfgs = _configs(args.k)
    names = list(cfgs)
    rows, counters = [], {}
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t, spec = cfgs[name]
            s = run_engine(args.vllm_python, t, spec, prompts, args)
            print(f"vllm_speedup: round {r} {name}: started in {s['startup_s']:.1f} s", file=sys.stderr)
            rows += [{"round": r, "config": name, **x} for x in s["rows"]]
            if s.get("spec_requests"):
                counters[(r, name)] = (s["spec_requests"], s["metrics_prom"])
            engine = s["engine"]
    return pd.DataFrame(rows), engine, counters


def measure_interleaved(args, prompts):
    """As :func:`measure`, every engine in one worker process, their timed calls interleaved (``--interleave``)."""
    cfgs = _configs(args.k)
    s = run_engine(args.vllm_python, None, None, prompts, args, configs=cfgs)
    runs = pd.DataFrame([{"round": 0, **x} for x in s["rows"]])
    counters = {(0, n): ([x for x in s["spec_requests"] if x["config"] == n], prom)
                for n, prom in s["metrics_prom"].items()}
    return runs, s["engines"][f"spec-k{max(args.k)}"], counters


def write_counters(out: Path, counters: dict) -> None:
    """The engines' own acceptance counters, in the formats ``tune --acceptance`` reads: acceptance/<config>-r<round>
    .jsonl (vLLM's per-request spec_decode_metrics of the timed calls) and .prom (its /metrics spec-decode counters,
    every call of the process)."""
    (out / "acceptance").mkdir(parents=True, exist_ok=True)
    for (r, name), (reqs, prom) in counters.items():
        prom = prom.replace(str(REPO) + "/", "")  # model_name="<checkout>/specimpl/...": repository-relative
        atomic_write_text(out / "acceptance" / f"{name}-r{r}.jsonl", "".join(json.dumps(x) + "\n" for x in reqs))
        atomic_write_text(out / "acceptance" / f"{name}-r{r}.prom", prom)


def _per_step(runs: pd.DataFrame, N: int) -> pd.DataFrame:
    """Per (round, config, batch): medians of generate and first-token seconds, tokens/s and the per-step time."""
    g = runs.groupby(["round", "config", "batch", "kind"]).seconds.median().unstack("kind").reset_index()
    tok = runs[runs.kind == "generate"].groupby(["round", "config", "batch"]).tokens.median().reset_index()
    g = g.merge(tok, on=["round", "config", "batch"])
    g["tokens_per_s"] = g.tokens / g.generate
    g["step_s"] = (g.generate - g.first_token) / (N - 1)
    return g


def _interp(table: dict, A: int) -> float:
    """Linear in log batch between the measured batches (ends held)."""
    bs = sorted(table)
    return float(np.interp(np.log(A), np.log(bs), [table[b] for b in bs]))


def predict(step: pd.DataFrame, forwards: pd.DataFrame, hists: dict, args) -> pd.DataFrame:
    """Predicted S per (k, B, variant) from the plain and draft-only engines and the torch forwards."""
    med = step.groupby(["config", "batch"])[["generate", "first_token", "step_s"]].median()
    t_ar = {b: med.loc[("plain", b), "step_s"] for b in args.batches}
    t_d = {b: med.loc[("draft-only", b), "step_s"] for b in args.batches}
    f = forwards.set_index(["op", "n", "batch"]).cpu_median_s
    N, rows = args.max_new_tokens, []
    for k in args.k:
        a = conditional_alphas(hists[("chain", k)])
        for B in args.batches:
            rounds = simulate_rounds(a, B, N - 1, 400, np.random.default_rng(0), compact_below=1.0)
            plain = med.loc[("plain", B), "first_token"] + (N - 1) * t_ar[B]
            for variant in ("engine-step", "forward-only"):
                def round_s(A):
                    dv = _interp({b: f[("target.forward", k + 1, b)] - f[("target.forward", 1, b)] for b in args.batches}, A)
                    draft = _interp(t_d, A) if variant == "engine-step" else _interp(
                        {b: f[("draft.forward", 1, b)] for b in args.batches}, A)
                    return _interp(t_ar, A) + dv + k * draft
                spec = (med.loc[("plain", B), "first_token"] + med.loc[("draft-only", B), "first_token"]
                        + sum(r * round_s(A) for A, r in enumerate(rounds) if r > 0))
                rows.append({"k": k, "batch": B, "variant": variant, "predicted_speedup": plain / spec,
                             "predicted_rounds": float(rounds.sum())})
    return pd.DataFrame(rows)


def measured_speedup(step: pd.DataFrame, ks) -> pd.DataFrame:
    """Per (k, B): S = spec tokens/s over plain tokens/s in the same round; median, min, max over rounds."""
    p = step.pivot_table(index=["round", "batch"], columns="config", values="tokens_per_s").reset_index()
    rows = []
    for k in ks:
        s = p[f"spec-k{k}"] / p["plain"]
        for B, x in s.groupby(p.batch):
            rows.append({"k": k, "batch": B, "measured_speedup": float(x.median()), "measured_min": float(x.min()),
                         "measured_max": float(x.max()), "rounds": int(x.size),
                         "plain_tokens_per_s": float(p.plain[p.batch == B].median()),
                         "spec_tokens_per_s": float(p[f"spec-k{k}"][p.batch == B].median())})
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm-python", default=str(REPO / ".venv-vllm" / "bin" / "python"))
    ap.add_argument("--out", type=Path, default=REPO / "results" / "engines" / "vllm" / "speedup")
    ap.add_argument("--k", type=lambda s: [int(x) for x in s.split(",")], default=[2, 4])
    ap.add_argument("--batches", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 16])
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--interleave", action="store_true",
                    help="hold every engine in one worker process and interleave their timed calls (a random order "
                         "per repeat and batch): robust to a shared machine's load drifting between engines")
    args = ap.parse_args(argv)
    if not Path(args.vllm_python).exists():
        print(f"vllm_speedup: `--vllm-python` {args.vllm_python!r} does not exist (make vllm-venv)", file=sys.stderr)
        return 2
    prompts = tiny_pair_prompts(max(args.batches), args.prompt_len, seed=args.seed)
    target, draft = load_pair(str(TINY_PAIR_DIR / "target"), str(TINY_PAIR_DIR / "draft"), local_files_only=True)
    acc, _, hists = with_threads(1, lambda: measure_acceptance(target, draft, prompts, ["chain"], args.k,
                                                                args.max_new_tokens, args.seed))
    ctx = args.prompt_len + args.max_new_tokens // 2  # one thread, process CPU time: robust to the shared machine
    forwards = with_threads(1, lambda: pd.concat([
        profile_model(target, "target", [1] + [k + 1 for k in args.k], args.batches, ctx, repeats=7),
        profile_model(draft, "draft", [1], args.batches, ctx, repeats=7)], ignore_index=True))
    runs, engine, counters = (measure_interleaved if args.interleave else measure)(args, prompts)
    step = _per_step(runs, args.max_new_tokens)
    table = measured_speedup(step, args.k).merge(
        predict(step, forwards, hists, args).pivot_table(index=["k", "batch"], columns="variant",
                                                         values="predicted_speedup").reset_index(), on=["k", "batch"])
    spec = runs[(runs.kind == "generate") & runs.config.str.startswith("spec")]
    vacc = spec.groupby(spec.config.str[6:].astype(int)).apply(lambda x: x.accepted.sum() / x.drafted.sum())
    table["vllm_acceptance_rate"] = table.k.map(vacc)
    table["harness_acceptance_rate"] = table.k.map(
        {r.k: (r.tokens_per_round - 1) / r.k for r in acc.itertuples()})
    meta = metadata({**vars(args), "name": "vllm-speedup", "engine": engine}, args.seed)
    meta["command"] = command_line([__file__, *(argv if argv is not None else sys.argv[1:])])  # paths portable
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_csv(args.out / "runs.csv", runs, meta)
    atomic_write_csv(args.out / "steps.csv", step, meta)
    atomic_write_csv(args.out / "forwards.csv", forwards.drop(columns=["samples_s", "cpu_samples_s"]), meta)
    atomic_write_csv(args.out / "table.csv", table, meta)
    atomic_write_json(args.out / "meta.json", meta)
    write_counters(args.out, counters)
    atomic_write_text(args.out / "table.md", md_table(table.to_dict("records"), list(table.columns)) + "\n")
    print(table.round(3).to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
