"""`python -m harness tune`: choose the verification algorithm and k for a (target, draft) pair, per batch size.

    python -m harness tune --target tiny --draft tiny-draft \\
        --hardware local --batch 1,8,32 --context 64,256
    python -m harness tune --target T --draft D --hardware h100 --batch 1,8,32 --context 512,4096 --prompts p.txt

1. Acceptance, measured on prompts (a text file, one prompt a line, tokenized with the target's
   tokenizer; or built-in byte prompts of the tiny pair's validation text): per algorithm and k, E =
   tokens per round per sequence (1 + mean accepted), with a 95 % interval (normal approximation over
   rounds: rounds of one sequence are treated as independent), and the chain's alpha per draft position
   with exact 95 % Clopper-Pearson intervals.  Block's and tree's E are measured, not bounded.
2. Costs: ``--hardware local`` profiles this machine's forwards (:func:`harness.speedup.profiler.profile_model`,
   half-way through a call of each context: L + max_new_tokens // 2; prefill of L-token prompts) and the
   sampler's own per-round and per-token overheads, in process CPU time (run with ``--threads 1``; robust to
   other work taking turns on a shared CPU, not to its competing for memory bandwidth), then calibrates them by target-only runs of each model alone
   (``--calibration solo``, :mod:`harness.speedup.costmodel_calibrate`: each forward priced by the larger of
   the isolated shape at the runs' level and the runs' own cost per added token row; no speculative call is
   timed) — or, with ``--target-only SWEEP``, the target by the target-only runs of a measured sweep, to
   price calls in the machine state that sweep ran in; any
   other hardware uses the roofline (:mod:`harness.speedup.roofline.model`) of the two configs on that file.
3. S of one call — prompt of L = ``--context`` tokens, ``--max-new-tokens`` new ones — for every (algorithm,
   k, B, L) (:mod:`harness.speedup.costmodel_run`: prefill, the last round cut, ragged batches, per-batch
   verification, per-round overheads), its 95 % bootstrap interval (profiling noise, acceptance), the
   steady-state S beside it, the best (algorithm, k) per (B, L) or off where no S exceeds 1, and the batch
   beyond which speculation should be off (the S = 1 crossover of the best configuration; on ``local``
   only within the profiled batches).

4. With ``--confirm N`` (local only, :mod:`harness.speedup.confirm`): at each (B, L), target-only and the N
   configurations ranked highest in 3. timed side by side on this machine (the same prompts, a random order
   per pass and batch, wall time), and the measured best recommended (off where none exceeds 1); the model's pick is kept beside it.

Writes, all together (:func:`harness.core.atomic.staged_report`), to ``--out`` (default runs/tune/<target-hardware>-<hash
of the options>; the committed results/tune/ only by an explicit --out): recommendation.csv / .md, acceptance.csv, alpha.csv, roofline.csv (figures: ``python
-m harness report --results <out>``), costs.csv (local), confirm.csv and confirm_timings.csv (``--confirm``), meta.json.  Bad input (unknown hardware, a config
without a needed field, a vocabulary mismatch, a context past the model's positions) exits 2 naming it.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from harness.core.limits import check_count
from harness.core.options import check_option
from harness.laws.algorithms import Algorithm
from harness.core.errors import UsageError
from harness.core.models import resolve_model
from harness.core.options import check_option, check_out, check_seed, check_threads
from harness.core.outdir import claim_out
from harness.speedup.roofline.model import ConfigError, hardware_names, load_hardware
from harness.speedup.roofline.model import ConfigError, ModelShape
from specimpl.hf import load_pair
from harness.stats import clopper_pearson
from harness.speedup.costmodel_tree import draft_tokens_per_call
from harness.speedup.costmodel import CostTable
from harness.speedup.profiler import profile_model, profile_sampler_overhead
from harness.speedup.roofline.speedup import PairCosts
from harness.speedup.roofline.model import Roofline
from harness.speedup.roofline.speedup import crossover_batch
from harness.speedup.costmodel_run import RunCosts, run_grid, run_interval
from harness.speedup.costmodel_calibrate import TargetOnlyError, calibrate, profile_solo_runs, sweep_target_only
from harness.speedup.roofline.fidelity import bound_of, fits_of
from harness.speedup.confirm import OFF, arm_name, confirm, shortlist, tie_note
from harness.core.atomic import staged_report
from harness.core.provenance import atomic_write_csv, atomic_write_json, atomic_write_text, metadata
from harness.core.figures import results_line
from harness.core.threads import with_threads
from harness.speedup.membound.widen import apply_prepack
from specimpl.hf import tiny_pair_prompts
from harness.speedup import tune_engine

__all__ = ["add_arguments", "run", "measure_acceptance", "roofline_costs", "recommend"]

Z95 = 1.959963984540054
ROOFLINE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--target", default=None, help="target model: a local HF folder (config.json + safetensors) or a "
                                                   "shipped name (tiny, exact, ...: `python -m harness models`); "
                                                   "left out with --acceptance")
    ap.add_argument("--draft", default=None, help="draft model: a local HF folder or a shipped name (tiny-draft, ...); "
                                                  "with --acceptance the draft's kind: eagle, mtp, model or ngram")
    ap.add_argument("--acceptance", type=Path, default=None,
                    help="an engine's per-position acceptance counters (vLLM /metrics text, per-request JSONL, CSV or "
                         "JSON: harness.speedup.engine_acceptance): tune from the engine's own numbers, no model of "
                         "ours loaded (harness.speedup.tune_engine); needs --target-only-rates")
    ap.add_argument("--target-only-rates", default=None, metavar="B:TOK_S,...",
                    help="with --acceptance: the target's tokens/s with speculation off at two or more batch sizes")
    ap.add_argument("--draft-rates", default=None, metavar="B:TOK_S,...",
                    help="with --acceptance --draft model: the draft model's tokens/s served alone")
    ap.add_argument("--draft-cost", type=float, default=None,
                    help="with --acceptance: a drafted token's cost as a fraction of the target's step (default: "
                         "eagle/mtp 1/--target-layers, ngram 0)")
    ap.add_argument("--verify-row-cost", type=float, default=0.0,
                    help="with --acceptance: the share of a request's per-row step cost each extra verified position "
                         "pays (0: verifying k + 1 tokens costs one step, the memory-bound rule; 1: compute-bound)")
    ap.add_argument("--target-layers", type=int, default=None, help="with --acceptance --draft eagle|mtp: the "
                                                                    "target's decoder layers")
    ap.add_argument("--target-config", type=Path, default=None,
                    help="with --acceptance --draft eagle|mtp: the target's HF config.json (or its folder): the head "
                         "is priced as one of its layers, an fc and its LM head against the target's weight read")
    ap.add_argument("--draft-vocab", type=int, default=None,
                    help="with --target-config: the head's own (smaller) vocabulary (EAGLE-3, FR-Spec); default the "
                         "target's")
    ap.add_argument("--hardware", default="local", help="local (profile this machine) or a file of harness/configs/hardware")
    ap.add_argument("--batch", default="1,8,32", help="comma-separated batch sizes")
    ap.add_argument("--context", default="512,4096", help="comma-separated context lengths (tokens)")
    ap.add_argument("--prompts", type=Path, default=None, help="a text file, one prompt a line (default: built-in)")
    ap.add_argument("--algorithms", default="chain,block,tree2", help="comma-separated (harness.laws.algorithms names)")
    ap.add_argument("--k", default=None, help="comma-separated draft lengths (default 1,2,3,4,6,8; with "
                                               "--acceptance 1..the file's k)")
    ap.add_argument("--n-sequences", type=int, default=64, help="prompts used for acceptance")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=5, help="profiler passes (local)")
    ap.add_argument("--replicates", type=int, default=100, help="bootstrap replicates behind S's interval")
    ap.add_argument("--calibration", choices=("solo", "none"), default="solo",
                    help="local: calibrate the isolated profile by target-only runs of each model "
                         "(harness.speedup.costmodel_calibrate), or not")
    ap.add_argument("--solo-repeats", type=int, default=3, help="target-only runs per model and batch (local)")
    ap.add_argument("--target-only", type=Path, default=None,
                    help="local, solo calibration: calibrate the target by the target-only runs of a measured sweep "
                         "(its results folder: measured.csv, profiles.csv in situ) instead of this machine's now, to "
                         "price calls in that sweep's machine state (harness.speedup.costmodel_calibrate."
                         "sweep_target_only); every --batch and --context must be among its cells'")
    ap.add_argument("--confirm", type=int, default=0, metavar="N",
                    help="local only: time target-only and the model's N best configurations side by side at each "
                         "batch and context, and recommend the measured best (harness.speedup.confirm); 0: off")
    ap.add_argument("--confirm-repeats", type=int, default=3, help="--confirm's timed passes")
    ap.add_argument("--confirm-prompts", type=int, default=8,
                    help="--confirm's prompts per batch size (at least the batch; the same for every arm)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prepack", choices=("none", "mkldnn", "skinny"), default="none",
                    help="how the target's linear layers run (CPU, float32; harness.speedup.membound.widen.apply_prepack): mkldnn, "
                         "oneDNN's pre-packed layout; skinny, the weight-streaming kernel the sweep's membound suite "
                         "runs the memory-bound pair with")
    ap.add_argument("--out", type=Path, default=None)


def _ints(option: str, text: str) -> list[int]:
    try:
        vals = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        vals = []
    check_option(bool(vals) and all(v >= 1 for v in vals), option, text, "a comma-separated list of integers >= 1")
    return sorted(set(vals))


def _CAPS(args) -> list:
    """(option, value, most, why) of the counts that only cost time or memory: a pass re-times every configuration
    (1,000 passes take hours on the tiny pair); a bootstrap replicate holds a row of the per-batch speedups."""
    timed = "timed passes: each re-times every configuration; 1,000 already take hours"
    return [("--repeats", args.repeats, 1000, timed), ("--solo-repeats", args.solo_repeats, 1000, timed),
            ("--confirm-repeats", args.confirm_repeats, 1000, timed),
            ("--confirm", args.confirm, 1000, "configurations confirmed by measurement"),
            ("--confirm-prompts", args.confirm_prompts, 100_000, "prompt windows held in memory"),
            ("--replicates", args.replicates, 1_000_000, "bootstrap replicates held in memory")]


def _check(args):
    """Every option, before any work: (hardware or None for local, algorithms, ks, batches, contexts)."""
    for opt in ("--target", "--draft"):
        check_option(getattr(args, opt[2:]) is not None, opt, None, "a model (a local HF folder or a shipped name), "
                     "unless --acceptance is given")
    for opt in ("--target-only-rates", "--draft-rates", "--draft-cost", "--target-layers", "--target-config",
                "--draft-vocab"):
        val = getattr(args, opt[2:].replace("-", "_"))
        check_option(val is None, opt, val, "given only with --acceptance")
    check_option(args.verify_row_cost == 0.0, "--verify-row-cost", args.verify_row_cost, "given only with --acceptance")
    args.k = "1,2,3,4,6,8" if args.k is None else args.k
    args.target, args.draft = resolve_model(args.target, "--target"), resolve_model(args.draft, "--draft")
    check_seed(args.seed)
    check_threads(args.threads)
    for name, v in (("--n-sequences", args.n_sequences), ("--max-new-tokens", args.max_new_tokens),
                    ("--repeats", args.repeats)):
        check_option(v >= 1, name, v, "an integer >= 1")
    check_count("--n-sequences", args.n_sequences, 64 * (32 + args.max_new_tokens) + 1000,
                "acceptance prompts, each with its generated tokens and per-round statistics held")
    check_option(args.replicates >= 10, "--replicates", args.replicates, "an integer >= 10")
    check_option(args.solo_repeats >= 1, "--solo-repeats", args.solo_repeats, "an integer >= 1")
    check_option(args.confirm >= 0, "--confirm", args.confirm, "an integer >= 0 (0: no measured confirmation)")
    for name, v in (("--confirm-repeats", args.confirm_repeats), ("--confirm-prompts", args.confirm_prompts)):
        check_option(v >= 1, name, v, "an integer >= 1")
    for name, v, most, why in _CAPS(args):  # probe 47: --repeats 10^12, --replicates 10^11 ran until killed
        check_option(v <= most, name, v, f"at most {most:,} ({why})")
    names = [a for a in args.algorithms.split(",") if a.strip()]
    try:
        algos = [Algorithm.parse(a.strip(), "--algorithms").name for a in names]
    except ValueError as e:
        raise UsageError(str(e)) from None
    check_option(bool(algos), "--algorithms", args.algorithms, "a comma-separated list of algorithm names")
    hw = None
    if args.hardware != "local":
        try:
            hw = load_hardware(args.hardware)
        except ConfigError as e:
            if str(args.hardware).endswith(".toml"):  # the file's own fault first
                why = f"is not a valid hardware description: {e}" if Path(args.hardware).is_file() else "does not exist"
                raise UsageError(f"`--hardware` file {args.hardware!r} {why} (or give 'local' or one of "
                                 f"{hardware_names()})") from None
            raise UsageError(f"`--hardware` must be 'local' or one of {hardware_names()} (or a .toml file); "
                             f"got {args.hardware!r} ({e})") from None
    check_option(args.confirm == 0 or hw is None, "--confirm", args.confirm,
                 "0 unless --hardware is local (it times the pair on this machine)")
    if args.prompts is not None:
        check_option(args.prompts.is_file(), "--prompts", str(args.prompts), "a text file (one prompt a line)")
    if args.target_only is not None:
        check_option(args.hardware == "local" and args.calibration == "solo", "--target-only", str(args.target_only),
                     "given only with --hardware local and --calibration solo")
        check_option(args.target_only.is_dir(), "--target-only", str(args.target_only), "a sweep results folder")
    check_out(args.out)
    return hw, algos, _ints("--k", args.k), _ints("--batch", args.batch), _ints("--context", args.context)


def _shapes(args):
    """(target, draft) ModelShape from the configs: a missing field or a vocabulary mismatch is exit 2."""
    shapes = []
    for opt, path in (("--target", args.target), ("--draft", args.draft)):
        try:
            shapes.append(ModelShape.from_config(path, name=Path(path).name))
        except ConfigError as e:
            raise UsageError(f"`{opt}`: {e}") from None
    t, d = shapes
    if t.vocab != d.vocab:
        raise UsageError(f"`--draft` {args.draft!r} has vocabulary size {d.vocab} but `--target` {args.target!r} "
                         f"has {t.vocab}; target and draft must share one vocabulary")
    return t, d


def _models(args):
    try:
        target, draft = load_pair(args.target, args.draft, local_files_only=True)
    except (OSError, ValueError) as e:
        raise UsageError(f"`--target` / `--draft`: cannot load the pair: {' '.join(str(e).split())[:300]}") from None
    if args.prepack != "none":
        try:
            apply_prepack(target, args.prepack)
        except (ValueError, RuntimeError) as e:
            raise UsageError(f"`--prepack {args.prepack}`: {e}") from None
    return target, draft


def _prompts(args, target) -> list[list[int]]:
    if args.prompts is None:
        if target.vocab_size < 257:
            raise UsageError("`--prompts` is needed: the built-in prompts are bytes (vocabulary >= 257)")
        return tiny_pair_prompts(args.n_sequences, length=32, min_length=8, seed=args.seed)
    lines = [ln for ln in args.prompts.read_text(errors="replace").splitlines() if ln.strip()]
    tok = getattr(target, "tokenizer", None)
    if not lines or tok is None:
        raise UsageError(f"`--prompts` {str(args.prompts)!r} must hold non-empty lines and the target a tokenizer; "
                         f"got {len(lines)} lines, tokenizer {'present' if tok is not None else 'missing'}")
    ids = [tok(ln)["input_ids"] for ln in lines[:args.n_sequences]]
    return [p for p in ids if len(p) >= 2] or [[int(getattr(tok, "bos_token_id", 0) or 0)] + p for p in ids]


@torch.no_grad()
def measure_acceptance(target, draft, prompts, algorithms, ks, max_new_tokens: int, seed: int = 0):
    """(acceptance rows per (algorithm, k): E and its 95 % interval, the histogram of accepted drafts; the chain's
    alpha per draft position at max k; {(algorithm, k): histogram})."""
    rows, alpha, hists = [], pd.DataFrame(), {}
    for name in algorithms:
        algo = Algorithm.parse(name, "algorithm")
        for k in ks:
            r = algo.generate(target, draft, prompts, k=k, max_new_tokens=max_new_tokens,
                              generator=torch.Generator().manual_seed(seed))
            h = np.asarray(r.stats.accepted_hist, dtype=np.float64)  # (k+1,) rounds with n accepted
            hists[(name, k)] = h.astype(np.int64)
            n = np.arange(h.size)
            N = h.sum()
            mean = float((h * n).sum() / N)
            sd = float(math.sqrt(max((h * (n - mean) ** 2).sum() / max(N - 1, 1), 0.0)))
            half = Z95 * sd / math.sqrt(N)
            rows.append({"algorithm": name, "k": k, "rounds": int(N), "tokens_per_round": 1 + mean,
                         "tokens_per_round_lo": 1 + max(mean - half, 0.0), "tokens_per_round_hi": 1 + min(mean + half, k),
                         "accepted_hist": " ".join(str(int(x)) for x in h)})
            if algo.kind == "chain" and k == max(ks):
                reached, acc = r.stats.reached, r.stats.accepted_at
                ci = [clopper_pearson(int(a), int(m), 0.05) for a, m in zip(acc, reached)]
                alpha = pd.DataFrame({"position": np.arange(1, k + 1), "judged": reached, "accepted": acc,
                                      "alpha": acc / np.maximum(reached, 1), "alpha_lo95": [c[0] for c in ci],
                                      "alpha_hi95": [c[1] for c in ci]})
    return pd.DataFrame(rows), alpha, hists


def _tokens_scored(algorithms, ks) -> tuple[list[int], list[int]]:
    """(target n, draft n) every round of these algorithms scores (harness.speedup.roofline.speedup.round_seconds)."""
    tn, dn = {1}, {1, 2}
    for name in algorithms:
        algo = Algorithm.parse(name, "algorithm")
        for k in ks:
            tn.add(algo.n * k + 1)
            if algo.kind == "tree":
                dn.update(int(x) for x in draft_tokens_per_call(algo.n, k, "rescored"))
    return sorted(tn), sorted(dn)


def _profile(target, draft, algorithms, ks, batches, contexts, max_new_tokens: int, repeats: int, seed: int):
    """The profile frame: forwards at L + max_new_tokens // 2 (half-way through a call), prefill of L-token
    prompts, each model on its own (``context`` = L); the sampler's overheads on null models (``context`` 0)."""
    tn, dn = _tokens_scored(algorithms, ks)
    frames = []
    for L in contexts:
        for role, m, ns in (("target", target, tn), ("draft", draft, dn)):
            f = profile_model(m, role, ns, batches, context_len=L + max_new_tokens // 2, prompt_len=L,
                              repeats=repeats, warmup=1, seed=seed)
            frames.append(f.assign(context=L))
    over = profile_sampler_overhead(target.vocab_size, ks, batches, repeats=max(3, repeats // 2), seed=seed)
    return pd.concat(frames + [over.assign(context=0)], ignore_index=True)


def _local_run_costs(prof: pd.DataFrame, contexts, max_new_tokens: int, value: str = "cpu_median_s") -> RunCosts:
    """RunCosts from a profile frame (process CPU time, single-threaded: what a call costs this process, not that
    minute's contention on a shared machine; wall time is kept in costs.csv as median_s)."""
    half = max_new_tokens // 2
    tables = {L + half: CostTable(prof[prof.context == L], value=value) for L in contexts}
    ov = CostTable(prof[prof.context == 0], value=value)
    first = tables[min(contexts) + half]

    def t(role):
        return lambda n, B, Lm: tables[int(Lm)](f"{role}.forward", int(n), int(B))

    def round_overhead(k, B):  # the sampler's own work and both models' roll-backs, per round
        return (ov("spec.overhead", int(k), int(B)) + first.get("target.rollback", int(k), int(B))
                + first.get("draft.rollback", max(int(k) - 1, 1), int(B)))

    pair = PairCosts(t("target"), t("draft"), round_overhead, lambda B: ov("ar.overhead", 1, int(B)))
    return RunCosts(pair, lambda role, B, L: tables[int(L) + half](f"{role}.prefill", int(L) - 1, int(B)))


def _resampler(prof: pd.DataFrame, contexts, max_new_tokens: int):
    """rng -> RunCosts whose every (op, n, B) is the median of a bootstrap resample of its profiled passes."""
    samples = [np.asarray(x, dtype=np.float64) for x in prof["cpu_samples_s"]]

    def draw(rng):
        med = [float(np.median(rng.choice(x, x.size))) for x in samples]
        return _local_run_costs(prof.assign(cpu_median_s=med), contexts, max_new_tokens)
    return draw


def roofline_costs(tshape, dshape, hw) -> RunCosts:
    """Roofline forwards of the two configs on ``hw``; prefill of L tokens = one call scoring L - 1 tokens from
    an empty cache (as :func:`harness.speedup.roofline.speedup.cost_frame`)."""
    t, d = Roofline(tshape, hw), Roofline(dshape, hw)
    return RunCosts(PairCosts(t, d), lambda role, B, L: float((t if role == "target" else d)(int(L) - 1, int(B), 0)))


def _grid(costs: RunCosts, hists, batches, contexts, args, name: str, source: str, resample=None, fits=None,
          bound=None) -> pd.DataFrame:
    """The speedup grid (:data:`harness.speedup.costmodel_run.RUN_COLUMNS`) of the finite call at the measured
    acceptance, with S's bootstrap interval (profiling noise where ``resample`` is given, acceptance always)."""
    grid = run_grid(name, costs, hists, batches, contexts, args.max_new_tokens, seed=args.seed, bound=bound,
                    fits=fits)
    grid = run_interval(grid, resample or (lambda rng: costs), hists, args.max_new_tokens,
                        replicates=args.replicates, seed=args.seed)
    return grid.assign(source=source)


def recommend(grid: pd.DataFrame, batches) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per (B, L) in ``batches``: the best algorithm and k or 'off'; per L: the batch beyond which
    speculation should be off, the S = 1 crossover of the best configuration over the grid's batches)."""
    best = shortlist(grid, sorted(set(grid.batch)), 1)
    rec = best[best.batch.isin(batches)].copy()
    rec["speculate"] = rec.speedup > 1.0
    rec["recommendation"] = [arm_name(a, k) if on else OFF for a, k, on in zip(rec.algorithm, rec.k, rec.speculate)]
    off = []
    for L, b in best.groupby("context"):
        b = b.sort_values("batch")
        x = crossover_batch(b.batch, b.speedup)
        up = crossover_batch(b.batch, 2.0 - b.speedup)  # S rising through 1 (KV-bound long contexts)
        where = ("S >= 1 at every batch" if (b.speedup >= 1).all() else "S < 1 at every batch"
                 if (b.speedup < 1).all() else "S falls below 1 here" if np.isfinite(x) else
                 f"S < 1 below batch {up:.1f}, >= 1 beyond")
        off.append({"context": L, "off_beyond_batch": x, "batches_scanned": f"{b.batch.min()}..{b.batch.max()}",
                    "regime": where})
    cols = ["context", "batch", "recommendation", "algorithm", "k", "speedup", "speedup_lo", "speedup_hi",
            "speedup_steady", "goodput_spec", "goodput_ar", "tokens_per_round", "c", "max_new_tokens", "speculate"]
    return rec[cols].reset_index(drop=True), pd.DataFrame(off)


def confirmed(rec: pd.DataFrame, conf: pd.DataFrame, grid: pd.DataFrame) -> pd.DataFrame:
    """The recommendation replaced by the measured pick at each (context, batch) :func:`confirm` timed: the model's
    own kept as ``model_recommendation`` (and ``model_algorithm``, ``model_k``); ``speedup`` (and its interval) is
    the predicted S of the pick (of the model's best where the pick is off), ``measured_speedup`` its measured S
    (1 for off); ``tie``: '' or the rivals the pick ties within the run's noise (:func:`harness.speedup.confirm.tie_note`)."""
    rec = rec.assign(model_recommendation=rec.recommendation, model_algorithm=rec.algorithm, model_k=rec.k,
                     measured_speedup=np.nan, measured_lo=np.nan, measured_hi=np.nan, tie="")
    for i, r in rec.iterrows():
        c = conf[(conf.context == r.context) & (conf.batch == r.batch)]
        if c.empty:
            continue
        rec.loc[i, "tie"] = tie_note(c)
        ch = c[c.chosen]
        if ch.empty:
            rec.loc[i, ["recommendation", "speculate", "measured_speedup", "measured_lo", "measured_hi"]] = \
                [OFF, False, 1.0, 1.0, 1.0]
            continue
        ch = ch.iloc[0]
        g = grid[(grid.context == r.context) & (grid.batch == r.batch) & (grid.algorithm == ch.algorithm)
                 & (grid.k == ch.k)].iloc[0]
        rec.loc[i, ["recommendation", "algorithm", "k", "speculate", "speedup", "speedup_lo", "speedup_hi",
                    "speedup_steady", "goodput_spec", "tokens_per_round", "c", "measured_speedup", "measured_lo",
                    "measured_hi"]] = [arm_name(ch.algorithm, ch.k), ch.algorithm, int(ch.k), True, g.speedup,
                                       g.speedup_lo, g.speedup_hi, g.speedup_steady, g.goodput_spec,
                                       g.tokens_per_round, g.c, ch.measured_speedup, ch.measured_lo, ch.measured_hi]
    return rec


def _confirm_md(conf: pd.DataFrame) -> str:
    lines = ["", "Measured (`--confirm`: target-only and the model's best-ranked configurations timed side by side on "
             "this machine, wall time; S = tokens/s over target-only's, summed over passes and prompt batches; 95 % "
             "Student t interval over the per-(pass, batch) ratios; the recommendation above is the measured best, off where none exceeds 1; "
             "*within noise*: the interval overlaps the pick's, or on the pick's row holds 1, i.e. the run cannot tell them apart):",
             "", "| context | batch | configuration | predicted S (95 %) | measured S (95 %) | chosen | within noise of the pick |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r.context} | {r.batch} | {arm_name(r.algorithm, r.k)} | {r.predicted_speedup:.3f} "
              f"({r.predicted_lo:.3f}–{r.predicted_hi:.3f}) | {r.measured_speedup:.3f} ({r.measured_lo:.3f}–"
              f"{r.measured_hi:.3f}) | {'yes' if r.chosen else ''} | "
              f"{('ties off' if r.chosen else 'yes') if r.ties_pick else ''} |" for r in conf.itertuples()]
    ties = [f"{int(L)}/{int(B)}: {tie_note(g).removeprefix('tie within noise with ')}"
            for (L, B), g in conf.groupby(["context", "batch"]) if tie_note(g)]
    lines += [f"\nTie within noise at (context/batch) {'; '.join(ties)}: the pick is the point estimate; more "
              "`--confirm-repeats` or `--confirm-prompts` may separate them."] if ties else []
    offs = ~conf.groupby(["context", "batch"]).chosen.any()
    lines += [f"\nOff (target-only) chosen at (context, batch) {[tuple(int(v) for v in i) for i in offs[offs].index]}: "
              "no measured configuration exceeds 1."] if offs.any() else []
    return "\n".join(lines) + "\n"


def _md(rec: pd.DataFrame, off: pd.DataFrame, alpha: pd.DataFrame, header: str) -> str:
    lines = [header, "", "S is the speedup of one call (prompt of `context` tokens, `max_new_tokens` new ones; prefill, the "
             "last round cut, ragged batches included; harness.speedup.costmodel_run); its 95 % interval covers the "
             "profiling noise and the acceptance estimate (bootstrap).  Steady-state S: one round against E "
             "target-only steps, no prefill, no cut.", "",
             "| context | batch | recommendation | S (95 %) | steady-state S | goodput tok/s (spec / target-only) | E | c |",
             "|---|---|---|---|---|---|---|---|"]
    pick = (lambda r: (r.recommendation if "model_recommendation" not in rec or r.model_recommendation ==
            r.recommendation else f"{r.recommendation} (measured; the model's: {r.model_recommendation})")
            + (f"; {r.tie}" if getattr(r, "tie", "") else ""))
    lines += [f"| {r.context} | {r.batch} | {pick(r)} | {r.speedup:.3f} ({r.speedup_lo:.3f}–{r.speedup_hi:.3f}) "
              f"| {r.speedup_steady:.3f} | {r.goodput_spec:.4g} / {r.goodput_ar:.4g} | {r.tokens_per_round:.3f} | {r.c:.3f} |"
              for r in rec.itertuples()]
    lines += ["", "| context | speculation off beyond batch | batches scanned | over the scan |", "|---|---|---|---|"]
    lines += [f"| {r.context} | {'–' if not np.isfinite(r.off_beyond_batch) else f'{r.off_beyond_batch:.1f}'} | "
              f"{r.batches_scanned} | {r.regime} |" for r in off.itertuples()]
    if len(alpha):
        lines += ["", "Chain alpha per draft position (exact 95 % interval): " + ", ".join(
            f"{r.position}: {r.alpha:.3f} ({r.alpha_lo95:.3f}–{r.alpha_hi95:.3f})" for r in alpha.itertuples())]
    return "\n".join(lines) + "\n"


def _costs(args, hw, tshape, dshape, target, draft, algos, ks, batches, contexts):
    """(RunCosts, profile frame or None, batches of the grid, resampler, fits, bound, source)."""
    if hw is None:
        prof = _profile(target, draft, algos, ks, batches, contexts, args.max_new_tokens, args.repeats, args.seed)
        if args.calibration == "solo":
            V = target.vocab_size
            g = torch.Generator().manual_seed(args.seed)
            sweep = _sweep_target_only(args, target, batches, contexts)  # checked before any work, in run
            models = {"target": target, "draft": draft} if sweep is None else {"draft": draft}
            solo = profile_solo_runs(models, lambda B, L: torch.randint(0, V, (B, L), generator=g).tolist(), batches,
                                     contexts, args.max_new_tokens, repeats=args.solo_repeats, seed=args.seed)
            prof = calibrate(prof, solo if sweep is None else pd.concat([solo, sweep], ignore_index=True))
        return (_local_run_costs(prof, contexts, args.max_new_tokens), prof, batches,
                _resampler(prof, contexts, args.max_new_tokens), None, None, "measured")
    costs = roofline_costs(tshape, dshape, hw)
    scan = sorted(set(batches) | set(ROOFLINE_BATCHES))
    return costs, None, scan, None, fits_of(costs.pair), bound_of(costs.pair.target), "roofline"


def _sweep_target_only(args, target, batches, contexts):
    """``--target-only``'s target rows (or None): exit 2 when the folder lacks them for every --batch and --context."""
    if args.target_only is None:
        return None
    try:
        rows = sweep_target_only(args.target_only, getattr(target, "name", str(args.target)), args.max_new_tokens)
    except TargetOnlyError as e:
        raise UsageError(str(e)) from None
    have = set(zip(rows[rows.op == "target.forward"].batch, rows[rows.op == "target.forward"].context))
    missing = sorted((B, L) for B in batches for L in contexts if (B, L) not in have)
    if missing:
        raise UsageError(f"`--target-only` {str(args.target_only)!r} has no target-only runs at (batch, context) "
                         f"{missing}; it has {sorted(have)}: give --batch and --context among them")
    return rows


def _costs_csv(prof: pd.DataFrame) -> pd.DataFrame:
    """The profile as costs.csv holds it: summaries, the raw samples left out."""
    return prof.drop(columns=[c for c in ("samples_s", "cpu_samples_s") if c in prof])


def _check_context(args, target, draft, algos, ks, contexts) -> None:
    """Profiling here needs every context plus the longest scored block within the models' positions."""
    mpe = min(getattr(m.model.config, "max_position_embeddings", 10 ** 9) for m in (target, draft))
    need = max(contexts) + args.max_new_tokens // 2 + max(_tokens_scored(algos, ks)[0]) + 8
    if need > mpe:
        raise UsageError(f"`--context` {args.context!r} is too long for this pair on `--hardware local`: profiling "
                         f"needs {need} positions, the models have {mpe} (max_position_embeddings)")


def _check_batch(args, target, draft, algos, ks, batches, contexts) -> None:
    """Profiling here holds, per sequence of the largest --batch, both models' KV caches and a row of logits
    at every position: that must fit in memory (exit 2 naming --batch otherwise)."""
    need = max(contexts) + args.max_new_tokens + max(_tokens_scored(algos, ks)[0]) + 8
    per_row = 0
    for m in (target, draft):
        cfg = m.model.config
        layers = getattr(cfg, "num_hidden_layers", None) or getattr(cfg, "n_layer", 1)
        width = getattr(cfg, "hidden_size", None) or getattr(cfg, "n_embd", 1)
        per_row += 4 * need * (2 * layers * width + 2 * m.vocab_size)  # float32 K and V, and logits
    check_count("--batch", max(batches), per_row, f"profiled sequences of {need:,} positions (longest --context + "
                "--max-new-tokens + a scored block), each holding both models' KV caches and logits")


def run(args) -> int:
    if args.acceptance is not None:
        return tune_engine.run(args)
    hw, algos, ks, batches, contexts = _check(args)
    tshape, dshape = _shapes(args)
    target, draft = _models(args)
    if hw is None:
        _check_context(args, target, draft, algos, ks, contexts)
        _check_batch(args, target, draft, algos, ks, batches, contexts)
        _sweep_target_only(args, target, batches, contexts)
    out = claim_out(args, "tune", ("target", "hardware"))  # --out, or runs/tune/<target-hardware>-<hash>; locked
    prompts = _prompts(args, target)
    say = (lambda m: print(f"tune: {m}", file=sys.stderr))
    say(f"acceptance of {algos} at k = {ks} on {len(prompts)} prompts")
    acc, alpha, hists = with_threads(args.threads, lambda: measure_acceptance(target, draft, prompts, algos, ks,
                                                                               args.max_new_tokens, args.seed))
    say("costs: " + ("profiling this machine" if hw is None else f"roofline on {hw.name}"))
    costs, prof, scan, resample, fits, bound, source = with_threads(args.threads, lambda: _costs(
        args, hw, tshape, dshape, target, draft, algos, ks, batches, contexts))
    say(f"S of a {args.max_new_tokens}-token call and its interval ({args.replicates} bootstrap replicates)")
    grid = _grid(costs, hists, scan, contexts, args, f"{tshape.name}+{dshape.name}@{args.hardware}", source,
                 resample, fits, bound)
    rec, off = recommend(grid, batches)
    conf = timings = None
    if args.confirm:
        short = shortlist(grid, batches, args.confirm)
        say(f"confirm: timing target-only and the {args.confirm} best-ranked configurations at each batch")
        conf, timings = with_threads(args.threads, lambda: confirm(
            target, draft, short, prompts, max_new_tokens=args.max_new_tokens, repeats=args.confirm_repeats,
            n_prompts=args.confirm_prompts, seed=args.seed))
        rec = confirmed(rec, conf, grid)
    meta = metadata({**vars(args), "name": f"tune-{tshape.name}-{args.hardware}"}, args.seed)
    text = _md(rec, off, alpha, f"`tune` {args.target} + {args.draft} on {args.hardware} ({source} costs); "
                                f"{results_line(meta)}.") + ("" if conf is None else _confirm_md(conf))
    extra = () if conf is None else (("confirm.csv", conf), ("confirm_timings.csv", timings))
    with staged_report(out, "tune") as st:
        for name, df in (("recommendation.csv", rec), ("off_beyond.csv", off), ("acceptance.csv", acc),
                         ("alpha.csv", alpha), ("roofline.csv", grid)) + ((("costs.csv", _costs_csv(prof)),)
                                                                           if prof is not None else ()) + extra:
            atomic_write_csv(st.dir / name, df, meta)
        atomic_write_text(st.dir / "recommendation.md", text)
        atomic_write_json(st.dir / "meta.json", meta)
    print(text)
    print(f"wrote {out}/ (figures: python -m harness report --results {out} --out {out}/figures)")
    return 0
