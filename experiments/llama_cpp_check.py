"""llama.cpp end to end (issue 13, item 4): the shipped tiny target as GGUF, its next-token laws against the
float64 Hugging Face model, samples with prompt-lookup speculation on and off (Python API on token ids, and
the OpenAI-compatible server), and their verification in one Holm family.

    python experiments/llama_cpp_check.py                     # the commented defaults below
    python experiments/llama_cpp_check.py --prompts 8 --per-prompt 4 --tokens 32 --no-server   # a quick look

Needs the ``llama`` extra (``pip install -e '.[llama]'``: llama-cpp-python, gguf).  Writes into ``--out``:
target.gguf, laws.csv (TV per KV dtype and evaluation mode), the sample files (``specverify.samples/1``,
each record checked by the format's reader before it is written; ``python -m harness verify-samples`` reads
them too), tests.csv (every test of the family, Holm-adjusted), runs.csv (one verdict per run) and
summary.json (provenance included).  This script verifies them in one family:

* scored: every output token's randomized PIT under the float64 HF target (plain sampling: the law is the
  softmax of the logits), tested by :func:`harness.verify.battery.plan_pit_value_tests` (pooled KS with a DKW
  bound, KS per position, PIT pairs) for the API runs; the server runs (ragged: EOS and lost bytes end a
  completion early) get pooled and per-position KS only (see :mod:`harness.samples.engines.llama_cpp`);
* two-sample: speculation on vs off, per-position token homogeneity (χ², cells pooled from the combined
  sample), and for the server the completion lengths too;
* coupled (diagnostic, outside the family): speculation on with the *same* per-request seeds as the plain
  run; exact-match verification draws one uniform per position either way, so the completions must agree
  token for token except where llama.cpp's batched and one-token evaluations round differently.

Measured 2026-12-01 on the 2-core machine under heavy load (llama-cpp-python 0.3.36; ``--prompts 32
--per-prompt 4 --tokens 32 --law-prompts 8 --server-prompts 12 --server-per-prompt 4``, the control run
separately with the same sizes): max TV of the next-token laws vs float64 HF 5.3e-6 (float32 KV) and 1.5e-3
(float16 KV) over 1024 positions; no loss detected in any of the four runs (4096 API / 1536 server tokens
each, family of 205 tests at 1e-4); the coupled run 128 of 128 completions identical; the lossy control
caught (pooled KS p 6.2e-9).  The two-sample token tests are vacuous at 128 completions per arm (cells
pooled to an expected 100 leave one cell per position): ~3.7k completions per arm detect TV 0.1 over 10
cells at this family's level (:func:`harness.stats.chi2_homogeneity_n_for_tv`).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import torch

from harness import stats
from harness.verify.battery import TestRow, TestSpec, plan_pit_value_tests
from harness.samples.engines import llama_cpp as L
from harness.samples.engines.gguf_export import export_gguf
from harness.core.provenance import atomic_write_csv, atomic_write_json, metadata
from harness.verify.family import PlannedTest, evaluate_family
from specimpl.hf import TINY_PAIR_DIR, HFModel, tiny_pair_prompts
from specimpl.speculative import PAD

DEFAULTS = dict(
    prompts=48,            # API: prompts (held-out stdlib text, <bos> + 8..48 bytes)
    per_prompt=8,          # API: completions per prompt and run (distinct seeds)
    tokens=64,             # new tokens per completion (API: past EOS; server: up to EOS)
    k=4,                   # prompt lookup: tokens proposed per draft
    law_prompts=8,         # laws: sequences of 128 tokens, every position compared
    server_prompts=24,     # server: prompts (printable ASCII only: text in, text out)
    server_per_prompt=4,   # server: completions per prompt and run
    seed=0,
)
SETTINGS = SimpleNamespace(family_alpha=1e-4, power=0.99, tv_confidence=0.999, raw={"source": "experiments/llama_cpp_check.py"})
EOS, BOS, V = 257, 256, 259
CONTROL = "api_llama_cpp_defaults"  # the lossy control: must be caught
PLAIN_LAW = {k: L._controls(1, None)[k] for k in ("temperature", "top_k", "top_p", "min_p")}


def check_plain(recs, name: str) -> None:
    """The scorer scores plain sampling; a run whose records say other controls were applied is refused
    (except the control, which is scored as plain on purpose: the misconfiguration a verifier must catch)."""
    bad = next((r for r in recs if {k: r["controls"][k] for k in PLAIN_LAW} != PLAIN_LAW), None)
    if bad is not None and name != CONTROL:
        raise SystemExit(f"{name}: request {bad['request_id']} applied controls {bad['controls']}, not plain "
                         f"sampling {PLAIN_LAW}; this scorer does not warp")


def _softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(x - x.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


@torch.no_grad()
def hf_logits(target: HFModel, ids: list[int]) -> np.ndarray:
    """(T, V) float64 logits of ``ids`` under the HF target (row t: the law of token t + 1)."""
    st = target.prefill([ids[:1]])  # an empty cache: the forward below reads every token
    return target.forward(st, torch.tensor([ids]))[0].double().numpy()  # (T, V)


def laws_table(gguf: Path, target: HFModel, n: int, seed: int) -> pd.DataFrame:
    """TV between llama.cpp's and the float64 target's next-token laws at every position of ``n`` sequences,
    per KV dtype and evaluation mode (whole sequence at once / one token per call), and between the two modes."""
    seqs = tiny_pair_prompts(n, length=128, seed=seed + 101)
    rows = []
    for kv in L.KV_TYPES:
        llm = L.load_llama(gguf, kv=kv, n_ctx=256)
        tv = {"batched": [], "incremental": [], "batched_vs_incremental": []}
        for ids in seqs:
            p = _softmax(hf_logits(target, ids))  # (T, V): the law after each prefix
            a, b = _softmax(L.api_logits(llm, ids)), _softmax(L.api_logits(llm, ids, step=1))
            tv["batched"].append(0.5 * np.abs(a - p).sum(-1))
            tv["incremental"].append(0.5 * np.abs(b - p).sum(-1))
            tv["batched_vs_incremental"].append(0.5 * np.abs(a - b).sum(-1))
        for mode, v in tv.items():
            v = np.concatenate(v)
            rows.append(dict(kv_dtype=kv, compared=mode, reference="HF float64" if mode != "batched_vs_incremental"
                             else "llama.cpp itself", positions=v.size, tv_mean=v.mean(), tv_median=np.median(v),
                             tv_p99=np.quantile(v, 0.99), tv_max=v.max()))
        del llm
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------- producing
def api_run(gguf: Path, prompts, a, *, draft_k, seed: int, out: Path, name: str, sampler=None) -> dict:
    """One Python-API run: records written to ``out/name.jsonl``; its wall time and draft counts."""
    llm = L.load_llama(gguf, kv="float32", draft_k=draft_k, n_ctx=256)
    engine = L.api_engine_block(llm, kv="float32", gguf_path=gguf, sampler=sampler)
    tic = time.perf_counter()
    recs = list(L.api_records(llm, prompts, per_prompt=a.per_prompt, max_new_tokens=a.tokens, seed=seed,
                              engine=engine, progress=True, sampler=sampler))
    wall = time.perf_counter() - tic
    L.write_jsonl(out / f"{name}.jsonl", recs)
    return dict(name=name, records=recs, wall_s=wall, **_draft_totals(recs))


def _draft_totals(recs) -> dict:
    d = [r["x_draft"] for r in recs if "x_draft" in r]
    if not d:
        return {}
    acc, drafted = sum(x["accepted"] for x in d), sum(x["drafted"] for x in d)
    return dict(accepted=acc, drafted=drafted, acceptance=acc / drafted if drafted else float("nan"))


def server_run(gguf: Path, prompts, a, *, draft_k, seed: int, out: Path, name: str) -> dict:
    """One HTTP run against ``python -m llama_cpp.server`` started here (localhost, stopped on exit)."""
    texts = [(i, p, L.prompt_text(p, BOS)) for i, p in enumerate(prompts)]
    engine = {"name": "llama.cpp", "package": "llama-cpp-python", "version": _version(), "interface": "http /v1/completions",
              "speculative": {"method": "prompt_lookup", "k": draft_k} if draft_k else None, "dtype": "float32",
              "kv_dtype": "float32", "flash_attn": False, "sampler": dict(L.PLAIN)}
    recs = []
    with L.serve(gguf, kv="float32", draft_k=draft_k, n_ctx=256, log_path=out / f"{name}.server.log") as url:
        tic = time.perf_counter()
        for i, p, text in texts:
            for j in range(a.server_per_prompt):
                s = L.request_seed(seed, i, j)
                ans = L.http_completion(url, text, max_tokens=a.tokens, seed=s)
                recs.append(L.http_record(ans, request_id=f"p{i}-s{j}", prompt_id=f"p{i}", prompt_ids=p,
                                          max_new_tokens=a.tokens, seed=s, eos=EOS, engine=engine))
        wall = time.perf_counter() - tic
    L.write_jsonl(out / f"{name}.jsonl", recs)
    return dict(name=name, records=recs, wall_s=wall)


def _version() -> str:
    import llama_cpp
    return llama_cpp.__version__


def ascii_prompts(n: int, seed: int) -> list[list[int]]:
    """``n`` prompts of printable ASCII (the server takes text), drawn as the API prompts are."""
    out, s = [], seed
    while len(out) < n:
        out += [p for p in tiny_pair_prompts(4 * n, length=48, min_length=8, seed=s) if L.prompt_text(p, BOS)]
        s += 1
    return out[:n]


# -------------------------------------------------------------------------------------------- scoring
@torch.no_grad()
def score(target: HFModel, recs, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """PIT values and log-probabilities (N, T) of every output token under the float64 target; NaN past a
    completion's end.  One forward per chunk of prompt + output[:-1]."""
    T = max(len(r["output_ids"]) for r in recs)
    gen = torch.Generator().manual_seed(seed)
    U, LP = np.full((len(recs), T), np.nan), np.full((len(recs), T), np.nan)
    for s in range(0, len(recs), 64):
        chunk = recs[s:s + 64]
        x = torch.full((len(chunk), T), PAD, dtype=torch.long)
        for b, r in enumerate(chunk):
            x[b, :len(r["output_ids"])] = torch.tensor(r["output_ids"], dtype=torch.long)
        pad = x == PAD
        xin = torch.cat([torch.tensor([[r["prompt_ids"][-1]] for r in chunk]), x[:, :-1]], 1).masked_fill(
            torch.cat([torch.zeros(len(chunk), 1, dtype=torch.bool), pad[:, :-1]], 1), 0)  # (n, T)
        logits = target.forward(target.prefill([r["prompt_ids"] for r in chunk]), xin)  # (n, T, V)
        p = torch.softmax(logits.double(), -1)  # plain sampling: the law is the softmax
        u = stats.pit_from_probs(p, x.masked_fill(pad, 0), generator=gen, pad_mask=pad if bool(pad.any()) else None)
        lp = torch.log_softmax(logits.double(), -1).gather(-1, x.masked_fill(pad, 0)[..., None])[..., 0]
        U[s:s + len(chunk)] = np.where(pad.numpy(), np.nan, u)
        LP[s:s + len(chunk)] = np.where(pad.numpy(), np.nan, lp.numpy())
    return U, LP


# -------------------------------------------------------------------------------------------- testing
def _row(statistic, pvalue, mde, unit, method, **extra) -> TestRow:
    return TestRow(statistic=float(statistic), pvalue=float(pvalue), min_detectable=float(mde),
                   min_detectable_unit=unit, method=method, **extra)


def _ks(x, with_bound: bool):
    def ev(alpha, power, delta):
        r = stats.pit_uniformity_test(x, alpha=alpha, power=power)
        extra = {}
        if with_bound:
            kb = stats.kolmogorov_upper_bound(x, delta=delta)
            extra = dict(kolmogorov_upper=kb.upper, kolmogorov_method=f"DKW, delta {delta:.2g} (Kolmogorov <= TV)")
        return _row(r.statistic, r.pvalue, r.min_detectable_distance, "Kolmogorov distance of PIT", r.method, n=r.n, **extra)
    return ev


def pit_specs(u: np.ndarray, min_n: int = 30) -> list[TestSpec]:
    """The PIT battery: the full one for complete (N, T) values; pooled and per-position KS for ragged ones
    (NaN past a completion's end; positions with fewer than ``min_n`` values are left out)."""
    if not np.isnan(u).any():
        return plan_pit_value_tests(u)
    specs = [TestSpec("pit", "pooled", None, True, _ks(u[~np.isnan(u)], True), wants_tv_bound=True)]
    for t in range(u.shape[1]):
        col = u[~np.isnan(u[:, t]), t]
        if col.size >= min_n:
            specs.append(TestSpec("pit", "position", t, True, _ks(col.copy(), False)))
    return specs


def _homog(a, b, unit: str):
    def ev(alpha, power, delta):
        r = stats.chi2_homogeneity(a, b, alpha=alpha, power=power)
        return _row(r.statistic, r.pvalue, r.min_detectable_tv, unit, r.method, df=r.df, n=r.n_a, cells=r.n_cells,
                    tv_hat=r.tv_hat)
    return ev


def two_sample_specs(ra, rb, T: int, lengths: bool, min_n: int = 30) -> list[TestSpec]:
    """Speculation on (``ra``) vs off (``rb``): token homogeneity at each position both runs reach
    ``min_n`` times, and (``lengths``) the homogeneity of completion lengths."""
    specs = []
    for t in range(T):
        a = np.bincount([r["output_ids"][t] for r in ra if len(r["output_ids"]) > t], minlength=V)
        b = np.bincount([r["output_ids"][t] for r in rb if len(r["output_ids"]) > t], minlength=V)
        if min(a.sum(), b.sum()) >= min_n:
            specs.append(TestSpec("two_sample", "tokens", t, True, _homog(a, b, "TV between the runs (tokens)")))
    if lengths:
        la = np.bincount([len(r["output_ids"]) for r in ra], minlength=T + 1)
        lb = np.bincount([len(r["output_ids"]) for r in rb], minlength=T + 1)
        specs.append(TestSpec("two_sample", "lengths", None, True, _homog(la, lb, "TV between the runs (lengths)")))
    return specs


def run_verdicts(table: pd.DataFrame, runs: dict) -> pd.DataFrame:
    """One row per run (or comparison): tests, rejections, the pooled PIT bound, the worst detectable effect."""
    rows = []
    for name, sub in table.groupby("run", sort=False):
        info = runs.get(name, {})
        pooled = sub[sub.test == "pooled"]
        rej = sub[sub.reject]
        control = name == CONTROL
        rows.append(dict(run=name, role="lossy control" if control else "under test", tests=len(sub),
                         rejected=len(rej), verdict="lossy" if len(rej) else "no loss detected",
                         passed=bool(len(rej)) if control else not len(rej),
                         caught_by=", ".join(f"{r.test}@{r.position}" for r in rej.itertuples())[:200],
                         min_p_adjusted=sub.p_adjusted.min(),
                         pit_ks=float(pooled.statistic.iloc[0]) if len(pooled) else np.nan,
                         pit_kolmogorov_upper=float(pooled.kolmogorov_upper.iloc[0]) if len(pooled) else np.nan,
                         worst_detectable=sub[sub.test != "pooled"].min_detectable.max(),
                         worst_detectable_unit=sub[sub.test != "pooled"].min_detectable_unit.iloc[0] if len(sub) > 1 else "",
                         tokens=info.get("tokens", np.nan), completions=info.get("completions", np.nan),
                         wall_s=info.get("wall_s", np.nan), acceptance=info.get("acceptance", np.nan)))
    return pd.DataFrame(rows)


def coupled(plain, spec) -> dict:
    """Speculation on vs off with the same per-request seeds: completions identical token for token."""
    same = [a["output_ids"] == b["output_ids"] for a, b in zip(plain, spec)]
    first = [next((t for t, (x, y) in enumerate(zip(a["output_ids"], b["output_ids"])) if x != y), None)
             for a, b in zip(plain, spec)]
    return dict(completions=len(same), identical=int(sum(same)),
                first_divergence=[f for f in first if f is not None][:20])


def logprob_gap(recs, lp_hf: np.ndarray) -> dict:
    """|engine log-probability - float64 scorer's| over the tokens where the engine reported one."""
    d = [abs(x - lp_hf[i, t]) for i, r in enumerate(recs) for t, x in enumerate(r.get("x_token_logprobs") or [])]
    return dict(tokens=len(d), max_abs=float(max(d)) if d else np.nan, mean_abs=float(np.mean(d)) if d else np.nan)


def produce(gguf, a, out) -> dict:
    """Every run: API plain / spec / spec with the plain run's seeds; server plain / spec."""
    prompts = tiny_pair_prompts(a.prompts, length=48, min_length=8, seed=a.seed)
    runs = {"api_plain": api_run(gguf, prompts, a, draft_k=None, seed=a.seed + 1, out=out, name="api_plain"),
            "api_spec": api_run(gguf, prompts, a, draft_k=a.k, seed=a.seed + 2, out=out, name="api_spec"),
            "api_spec_coupled": api_run(gguf, prompts, a, draft_k=a.k, seed=a.seed + 1, out=out, name="api_spec_coupled")}
    if a.control:  # llama-cpp-python's default sampler (min_p 0.05, top_k 40, top_p 0.95, temp 0.8), scored as plain
        runs[CONTROL] = api_run(gguf, prompts, a, draft_k=None, seed=a.seed + 5, out=out, name=CONTROL,
                                sampler=L.LLAMA_CPP_DEFAULTS)
    if a.server:
        sp = ascii_prompts(a.server_prompts, a.seed + 7)
        runs["server_plain"] = server_run(gguf, sp, a, draft_k=None, seed=a.seed + 3, out=out, name="server_plain")
        runs["server_spec"] = server_run(gguf, sp, a, draft_k=a.k, seed=a.seed + 4, out=out, name="server_spec")
    return runs


def verify(runs: dict, target, a) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Score, plan one family over every test, evaluate with Holm; (tests, verdicts, diagnostics)."""
    plan, info, extra = [], {}, {}
    for name in [n for n in runs if n != "api_spec_coupled"]:
        r = runs[name]
        check_plain(r["records"], name)
        tic = time.perf_counter()
        u, lp = score(target, r["records"], a.seed + 7919)
        info[name] = dict(tokens=int((~np.isnan(u)).sum()), completions=len(r["records"]), wall_s=r["wall_s"],
                          acceptance=r.get("acceptance", np.nan), score_s=time.perf_counter() - tic)
        scen = "llama.cpp " + name.split("_")[0]
        role = "lossy control" if name == CONTROL else "under test"
        plan += [PlannedTest(name, role, scen, s) for s in pit_specs(u)]
        if name.startswith("server"):
            extra[f"{name}_logprob_gap"] = logprob_gap(r["records"], lp)
            extra[f"{name}_truncated"] = sum("x_truncated_at" in x for x in r["records"])
            extra[f"{name}_eos"] = sum(x["finish_reason"] == "eos" for x in r["records"])
    for kind in ("api", "server"):
        if f"{kind}_spec" in runs:
            specs = two_sample_specs(runs[f"{kind}_spec"]["records"], runs[f"{kind}_plain"]["records"], a.tokens,
                                     lengths=kind == "server")
            plan += [PlannedTest(f"{kind}_spec_vs_plain", "under test", f"llama.cpp {kind}", s) for s in specs]
    table, levels = evaluate_family(plan, SETTINGS)
    extra["coupled"] = coupled(runs["api_plain"]["records"], runs["api_spec_coupled"]["records"])
    extra["family"] = dict(n_tests=levels.n_tests, alpha_each=levels.alpha_each, delta_each=levels.delta_each)
    return table, run_verdicts(table, info), {**extra, "runs": info}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for key, v in DEFAULTS.items():
        ap.add_argument(f"--{key.replace('_', '-')}", type=int, default=v)
    ap.add_argument("--no-server", dest="server", action="store_false")
    ap.add_argument("--no-control", dest="control", action="store_false", help="skip the lossy control run")
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "specverify_llama_cpp")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    gguf = export_gguf(TINY_PAIR_DIR / "target", a.out / "target.gguf")
    target = HFModel.from_pretrained(TINY_PAIR_DIR / "target", dtype=torch.float64, local_files_only=True)
    laws = laws_table(gguf, target, a.law_prompts, a.seed)
    print(laws.to_string(index=False), file=sys.stderr)
    runs = produce(gguf, a, a.out)
    table, verdicts, extra = verify(runs, target, a)
    config = {**vars(a), "out": str(a.out), "settings": vars(SETTINGS)}
    meta = metadata(config, a.seed)
    atomic_write_csv(a.out / "laws.csv", laws, meta)
    atomic_write_csv(a.out / "tests.csv", table, meta)
    atomic_write_csv(a.out / "runs.csv", verdicts, meta)
    atomic_write_json(a.out / "summary.json", {"meta": meta, "laws": laws.to_dict("records"),
                                               "verdicts": verdicts.to_dict("records"), **extra,
                                               "wall_s": time.perf_counter() - t0})
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(verdicts.to_string(index=False))
    print(json.dumps({k: v for k, v in extra.items() if k != "runs"}, indent=1, default=str))
    return 0 if verdicts.passed.all() else 1


if __name__ == "__main__":
    sys.exit(main())
