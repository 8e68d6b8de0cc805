"""Scored mode's token-TV certificate on the tiny pair: ε per position at each size, planned and achieved, beside
the PIT law's Kolmogorov bound (the scored certificate before issue 24).

    python -m harness sample --engine ours --method speculative --k 4 --n-prompts 256 --n-per-prompt 32 \\
        --max-new-tokens 32 --seed 0 --prompt-seed 0 --out spec8k.jsonl
    python experiments/token_tv_tiny_pair.py --samples spec8k.jsonl --out results/engines/token_tv

The file's completions are scored once by the tiny target in float64 (as ``verify-samples --target
specimpl/assets/tiny_pair/target --dtype float64`` scores them), in nested subsets that keep every prompt: the
first n / P completions of each of the P prompts (n = 1,024 ... the whole file).  At each n, per position: the
token-TV bound (:func:`harness.samples.certificate.token_tv_bounds`, the certificate) and the DKW bound on the
PIT law's Kolmogorov distance (:func:`harness.samples.certificate.scored_bounds`), both at the certificate's
simultaneous confidence (0.999 over the positions); the planners' ε for that n (the RB laws of the whole
file; :func:`harness.stats.rb_tv_upper_bound_planned`, power 0.99) beside the ε achieved; and the completions
each planner asks for to certify 0.05 and 0.01.  Writes README.md, positions.csv, sizes.csv, meta.json.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness import stats  # noqa: E402
from harness.core.provenance import atomic_write_csv, atomic_write_json, atomic_write_text, metadata  # noqa: E402
from harness.laws.scenarios import load_settings  # noqa: E402
from harness.samples.certificate import scored_bounds, scored_n_for_distance, token_tv_bounds  # noqa: E402
from harness.samples.format import read_samples  # noqa: E402
from harness.samples.producers import config_of  # noqa: E402
from harness.samples.scoring import padded_outputs, score_records  # noqa: E402

TARGET = "specimpl/assets/tiny_pair/target"
EPSILONS = (0.05, 0.01)


def _groups(records, sizes):
    """Nested subsets keeping every prompt: index lists of the completions added at each size."""
    per = {}
    for i, r in enumerate(records):
        per.setdefault(r.prompt_id, []).append(i)
    P = len(per)
    cuts = [s // P for s in sizes]
    return [[i for rows in per.values() for i in rows[a:b]] for a, b in zip([0] + cuts[:-1], cuts)], P


def _score(records, groups, seed: int):
    """Scores of each group (the PIT uniforms seeded per group), float64 target."""
    import torch
    from specimpl.hf import HFModel
    target = HFModel.from_pretrained(TARGET, dtype=torch.float64, load_tokenizer=False)
    config = config_of(records[0].controls)
    return [score_records(target, [records[i] for i in g], config, seed=seed + j, progress=False)
            for j, g in enumerate(groups)]


def _planned(law_sum, n_rows, n, delta, power):
    """The planner's ε at n completions, from the whole file's RB laws (largest over positions)."""
    return max(stats.rb_tv_upper_bound_planned(law_sum[t] / n_rows[t], int(n * n_rows[t] / n_rows[0]), delta, power)
               for t in range(law_sum.shape[0]))


def run(samples: Path, sizes, seed: int):
    s = load_settings()
    records = read_samples(samples)
    groups, P = _groups(records, sizes)
    tic = time.perf_counter()
    parts = _score(records, groups, seed)
    wall = time.perf_counter() - tic
    T = max(p.law_sum.shape[0] for p in parts)
    rows, per_pos, law, toks, pres, u = [], None, 0.0, [], [], []
    for n, g, sc in zip(sizes, groups, parts):
        pad = T - sc.law_sum.shape[0]
        law = law + np.pad(sc.law_sum, ((0, pad), (0, 0)))
        toks.append(np.pad(padded_outputs([records[i] for i in g]).numpy(), ((0, 0), (0, pad)), constant_values=-1))
        pres.append(np.pad(sc.present, ((0, 0), (0, pad))))
        u.append(np.pad(sc.u, ((0, 0), (0, pad)), constant_values=0.5))
        x, pr, uu = np.concatenate(toks), np.concatenate(pres), np.concatenate(u)
        tv = token_tv_bounds(x, pr, law, 0.05, s.tv_confidence, s.power)
        pit = scored_bounds(uu, pr, 0.05, s.tv_confidence, s.power)
        rows.append(dict(completions=len(x), token_tv_max=tv.max_upper, token_tv_hat_max=float(np.nanmax(tv.hat)),
                         pit_kolmogorov_max=pit.max_upper, delta_each=tv.delta_each))
        per_pos = pd.DataFrame(dict(position=range(T), n=tv.n, token_tv_hat=tv.hat, token_tv_upper=tv.upper,
                                    pit_ks_hat=pit.hat, pit_kolmogorov_upper=pit.upper,
                                    sqrt_mass=[float(np.sqrt(law[t] / max(tv.n[t], 1)).sum()) for t in range(T)]))
    n_rows = np.asarray(per_pos["n"], dtype=float)
    delta = rows[-1]["delta_each"]
    for r in rows:
        r["token_tv_planned"] = _planned(law, n_rows, r["completions"], delta, s.power)
        r["pit_planned"] = stats.dkw_min_detectable_distance(r["completions"] * n_rows.min() / n_rows[0], alpha=delta,
                                                             power=s.power)  # inverse of scored_n_for_distance
    reach = n_rows.min() / len(records)
    needed = {eps: dict(token_tv=max(int(np.ceil(stats.rb_tv_n_for(law[t] / n_rows[t], eps, delta, s.power) /
                                                   (n_rows[t] / len(records)))) for t in range(T)),
                        pit=scored_n_for_distance(eps, delta, s.power, reach)) for eps in EPSILONS}
    return pd.DataFrame(rows), per_pos, needed, dict(prompts=P, score_wall_s=wall, power=s.power,
                                                      confidence=s.tv_confidence, delta_each=delta)


def readme(sizes_df, per_pos, needed, info, meta, samples_sha) -> str:
    lines = ["# Token TV per position on the tiny pair (scored mode), beside the PIT law's Kolmogorov bound", "",
             f"Our speculative sampler (k = 4) on the tiny pair, {info['prompts']} prompts, 32 new tokens; scored by the "
             "tiny target in float64. Every bound at simultaneous confidence "
             f"{info['confidence']:g} over the 32 positions (each at miss probability {info['delta_each']:.2g}); "
             f"planners at power {info['power']:g}.", "",
             "**token TV** (the certificate of `verify-samples` scored mode since issue 24): TV between the engine's "
             "step at position t and one target step from the engine's own prefixes, both laws of the token "
             "averaged over the prefixes drawn (harness/stats/rbtv.py). **PIT Kolmogorov**: Kolmogorov distance of "
             "the position's randomized-PIT law from U(0, 1) (DKW), the scored certificate before; not a token TV.",
             "", "| completions | token TV: largest bound | planned | PIT Kolmogorov: largest bound | planned |",
             "|---:|---:|---:|---:|---:|"]
    lines += [f"| {r.completions:,} | {r.token_tv_max:.4f} | {r.token_tv_planned:.4f} | {r.pit_kolmogorov_max:.4f} | "
              f"{r.pit_planned:.4f} |" for r in sizes_df.itertuples()]
    lines += ["", "Completions to certify epsilon per position (planners, at this file's RB laws and reach):", "",
              "| epsilon | token TV | PIT Kolmogorov |", "|---:|---:|---:|"]
    lines += [f"| {e:g} | {v['token_tv']:,} | {v['pit']:,} |" for e, v in needed.items()]
    lines += ["", "Per position at the whole file: positions.csv (`sqrt_mass` = Σ_v √m_t(v), the RB law's √-mass the "
              "token-TV width grows with).", "",
              f"Samples: `{meta['config']['samples']}` (sha256 {samples_sha[:16]}), scoring {info['score_wall_s']:.0f} s; "
              f"commit {meta['commit'][:12]}{' (dirty)' if meta['dirty'] else ''}; command `{meta['command']}`"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=Path, required=True)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=REPO / "results" / "engines" / "token_tv")
    a = ap.parse_args(argv)
    sizes_df, per_pos, needed, info = run(a.samples, sorted(a.sizes), a.seed)
    sha = hashlib.sha256(a.samples.read_bytes()).hexdigest()
    meta = metadata({"samples": str(a.samples), "samples_sha256": sha, "sizes": sorted(a.sizes), "target": TARGET},
                    a.seed)
    meta.update({"needed": {str(k): v for k, v in needed.items()}, "info": info})
    a.out.mkdir(parents=True, exist_ok=True)
    atomic_write_csv(a.out / "sizes.csv", sizes_df, meta)
    atomic_write_csv(a.out / "positions.csv", per_pos, meta)
    atomic_write_json(a.out / "meta.json", meta)
    atomic_write_text(a.out / "README.md", readme(sizes_df, per_pos, needed, info, meta, sha))
    print((a.out / "README.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
