"""Old code against new, side by side in one run: the real-model draws of two checkouts, interleaved.

    python benchmarks/ab_checkouts.py OLD_CHECKOUT NEW_CHECKOUT [--rounds 3] [--only tiny --only exact]

Each checkout runs in a worker process of its own (``PYTHONPATH`` = the checkout, one torch thread, models loaded
and one warm-up call per workload first); the driver then asks the two workers in turn (the order alternating
every round) for the same workload and prints, per workload, the median wall and CPU seconds of each side, their
ratio (and the ratio of the two sides' smallest CPU seconds: on a busy machine the least disturbed call), sequences per second and whether the two sides' outputs are the same bytes (a SHA-256 of the tokens, or of
the PIT values, log-likelihood terms and acceptance).  Workloads: ``tiny`` the reference sampler on the tiny pair,
256 sequences with the PIT scoring (:func:`harness.verify.realmodel.real_model_draw`, default.toml's
``[real_model]``); ``kv``, ``leaky``, ``dkv`` the controls kv_not_rolled_back, ragged_leaky_mask,
draft_kv_not_rolled_back the same way; ``exact`` the reference sampler on the exact pair, 16,384 rows
(:func:`harness.verify.exactmodel.exact_model_draw`).  Not run by `make bench` (it needs two checkouts).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

WORKER = r'''
import hashlib, json, sys, time, tomllib
import numpy as np, torch
torch.set_num_threads(1)
from harness.laws.scenarios import SCENARIO_DIR
from harness.verify.realmodel import load_real_model_spec, real_model_draw
from harness.verify.exactmodel import exact_model_draw, load_exact_model_spec
from harness.controls import hf as bugs
from specimpl.speculative import speculative_generate
T = tomllib.loads((SCENARIO_DIR / "default.toml").read_text())["real_model"]
RS, XS = load_real_model_spec(T), load_exact_model_spec(T["exact"])
TINY = {"tiny": speculative_generate, "kv": bugs.no_rollback_generate, "leaky": bugs.leaky_mask_generate,
        "dkv": bugs.draft_no_rollback_generate}

def run(w):
    if w == "exact":
        d = exact_model_draw(speculative_generate, XS, n_sequences=16384, seed=1)
        return 16384, [d.tokens, np.array([d.accepted, d.drafted])]
    d = real_model_draw(TINY[w], n_sequences=256, max_new_tokens=RS.max_new_tokens, k=RS.k, config=RS.config,
                        prompt_lengths=RS.prompt_lengths, batch_size=RS.batch_size, seed=1, progress=False)
    return 256, [d.u, d.loglik_m, d.loglik_v, d.loglik_q, np.array([d.acceptance_rate])]

for line in sys.stdin:
    w = line.strip()
    tic, c0 = time.perf_counter(), time.process_time()
    n, parts = run(w)
    wall, cpu = time.perf_counter() - tic, time.process_time() - c0
    h = hashlib.sha256(b"".join(np.ascontiguousarray(p).tobytes() for p in parts)).hexdigest()[:16]
    print(json.dumps({"wall": wall, "cpu": cpu, "n": n, "digest": h}), flush=True)
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", action="append", choices=["tiny", "kv", "leaky", "dkv", "exact"])
    a = ap.parse_args()
    work = a.only or ["tiny", "exact"]
    procs = {}
    for side, path in (("old", a.old), ("new", a.new)):
        env = dict(os.environ, PYTHONPATH=os.path.abspath(path), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        procs[side] = subprocess.Popen([sys.executable, "-c", WORKER], cwd=path, env=env, text=True,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def ask(side, w):
        procs[side].stdin.write(w + "\n")
        procs[side].stdin.flush()
        return json.loads(procs[side].stdout.readline())

    for w in work:
        res = {"old": [], "new": []}
        for side in res:
            ask(side, w)  # warm-up
        for r in range(a.rounds):
            for side in (("old", "new") if r % 2 == 0 else ("new", "old")):
                res[side].append(ask(side, w))
        med = {s: {k: statistics.median(x[k] for x in v) for k in ("wall", "cpu")} for s, v in res.items()}
        low = {s: min(x["cpu"] for x in v) for s, v in res.items()}  # the least disturbed call (a busy machine)
        n = res["old"][0]["n"]
        same = {x["digest"] for v in res.values() for x in v}
        print(f"{w:6s} n={n:>6,}  old {med['old']['wall']:7.2f} s wall {med['old']['cpu']:7.2f} CPU-s "
              f"({n / med['old']['cpu']:8.1f} seq/CPU-s)   new {med['new']['wall']:7.2f} s wall "
              f"{med['new']['cpu']:7.2f} CPU-s ({n / med['new']['cpu']:8.1f} seq/CPU-s)   new/old CPU "
              f"{med['new']['cpu'] / med['old']['cpu']:.3f} (min {low['new'] / low['old']:.3f}) wall "
              f"{med['new']['wall'] / med['old']['wall']:.3f}   "
              f"outputs {'same bytes' if len(same) == 1 else 'DIFFER: ' + ', '.join(sorted(same))}", flush=True)
    for p in procs.values():
        p.stdin.close()
        p.wait()


if __name__ == "__main__":
    main()
