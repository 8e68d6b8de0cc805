"""`python -m harness verify`: prove a sampler lossless on a set of scenarios, with stated power.

    python -m harness verify                                   # reference sampler + all controls (make verify)
    python -m harness verify --sampler mypkg.mymod:my_generate # any sampler with the documented signature
    python -m harness verify --scenario base --draws 20000     # a quick look
    python -m harness verify --scenario real_model             # only the real-model scenario (+ its controls)

A *sampler* is any callable with the signature of :func:`specimpl.speculative_generate`::

    fn(target, draft, prompts, *, k, max_new_tokens, config, eos_token_id, generator) -> GenerationResult

Each scenario (``harness/experiments/verify/*.toml``) draws ``draws × weight`` sequences from the sampler and
as many from target-only sampling, folds them into sufficient statistics, and runs the battery of
:mod:`harness.battery`.  All tests of the whole run — every scenario, every control, the von Neumann
sampler — form ONE family: the family-wise false-alarm budget (``family_alpha``, 1e-4) is split over
them by Holm, and every test states the smallest deviation it detects with probability ``power`` at
its Bonferroni level.

The *real-model scenario* (``[real_model]`` in default.toml, on by default; ``--no-real-model``) runs
the sampler on the shipped tiny transformers pair and applies the sequential randomized-PIT tests
(pooled, per position, consecutive pairs; :func:`harness.battery.plan_pit_value_tests`) to its output
scored by the target: no exact law is needed.  Its tests join the same family and the same Holm
adjustment; for the reference sampler its controls run too (a target KV cache that is not rolled back
after a rejection must be caught; a draft cache that is never rolled back, lossless, must pass).  The report (``results/verify/``) holds the table of tests, a markdown summary,
the per-position observed/expected tables and PIT histograms, and figures drawn from those tables.

Exit status: 0 when every scenario is judged lossless and (without ``--sampler``) every buggy control
is caught and every lossless control passes; 1 otherwise; 2 for bad arguments.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import json
import math
import pickle
import sys
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pandas as pd
import torch

from harness import stats
from harness.config import RESULTS
from harness.battery import Accumulator, TestSpec, plan_chunks, plan_pit_value_tests, plan_tests
from harness.exact import ExactLaw, warp_mismatch
from harness.provenance import atomic_write_bytes, git_commit
from harness.realmodel import REAL_MODEL_SCENARIO, RealModelSpec, load_real_model_spec
from harness.scenarios import SCENARIO_DIR, Scenario, _read as _read_toml, load_scenario, load_settings
from specimpl.autoregressive import autoregressive_generate
from specimpl.speculative import speculative_generate

__all__ = ["add_arguments", "run", "load_sampler", "verify", "RunSpec", "VerifyResult"]



class SamplerSpecError(ValueError):
    """Bad ``--sampler`` value."""


# ----------------------------------------------------------------------------------- CLI
def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--sampler", metavar="MODULE:FUNCTION",
                    help="sampler to verify, 'package.module:function' or 'path/to/file.py:function', with the "
                         "signature of specimpl.speculative_generate (default: the reference sampler, plus the "
                         "negative and lossless controls)")
    ap.add_argument("--scenario", action="append", metavar="NAME",
                    help="scenario file harness/experiments/verify/NAME.toml (repeatable; default: the list in default.toml)")
    ap.add_argument("--draws", type=int, metavar="N", help="sequences per scenario (times its weight)")
    ap.add_argument("--control-draws", type=int, metavar="N", help="sequences per control")
    ap.add_argument("--seed", type=int, help="base seed (default: default.toml's)")
    ap.add_argument("--full", action="store_true", help="the large run (>= 100 M tokens)")
    ap.add_argument("--no-controls", action="store_true", help="skip the negative / lossless controls")
    ap.add_argument("--no-real-model", action="store_true",
                    help="skip the real-model scenario (shipped tiny transformers pair, sequential PIT)")
    ap.add_argument("--real-model-sequences", type=int, metavar="N",
                    help="sequences of the sampler under test in the real-model scenario (default: default.toml "
                         "[real_model] n_sequences)")
    ap.add_argument("--out", type=Path, help="report folder (default results/verify, or "
                                             "results/verify/custom/<sampler> with --sampler)")
    ap.add_argument("--scenario-dir", type=Path, default=SCENARIO_DIR, help="folder of scenario files")
    ap.add_argument("--fresh", action="store_true", help="ignore draws saved by an interrupted run")
    ap.add_argument("--no-figures", action="store_true", help="write tables and summary only")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (default 1: the work is many small batched ops, and a second thread "
                         "on a busy 2-core machine slows them down several times)")


def _fail_args(msg: str) -> int:
    print(f"python -m harness verify: error: {msg}", file=sys.stderr)
    return 2


def run(args) -> int:
    try:
        settings = load_settings(args.scenario_dir)
        sampler = load_sampler(args.sampler) if args.sampler else None
        for name, v in (("--draws", args.draws), ("--control-draws", args.control_draws),
                        ("--real-model-sequences", args.real_model_sequences)):
            if v is not None and v < 2:
                raise ValueError(f"`{name}` must be an integer >= 2; got {v!r}")
        names = args.scenario or list(settings.scenarios)
        rm_spec = load_real_model_spec(_read_toml(Path(args.scenario_dir) / "default.toml").get("real_model"))
        explicit_rm = REAL_MODEL_SCENARIO in names
        names = [n for n in names if n != REAL_MODEL_SCENARIO]
        use_rm = explicit_rm if args.scenario else rm_spec.enabled
        if args.no_real_model:
            if explicit_rm:
                raise ValueError(f"`--scenario` {REAL_MODEL_SCENARIO!r} contradicts `--no-real-model`")
            use_rm = False
        scenarios = [load_scenario(n, args.scenario_dir) for n in names]
        inexact = [s.name for s in scenarios if not s.exact]
        if inexact:
            raise ValueError(f"`--scenario` {inexact} use a model builder without an exact law; this battery needs "
                             "builder 'ngram' (real-model pairs: python -m harness.realmodel)")
    except ValueError as e:  # bad arguments or scenario files: clear message, status 2
        return _fail_args(str(e))
    old_threads = torch.get_num_threads()
    torch.set_num_threads(max(1, args.threads))
    try:
        res = _run(args, sampler, scenarios, settings, rm_spec if use_rm else None)
    finally:
        torch.set_num_threads(old_threads)
    print(res.console, file=sys.stderr)
    return 0 if res.passed else 1


def _run(args, sampler, scenarios, settings, rm_spec):
    if args.out is not None:
        out = args.out
    elif args.sampler:
        out = RESULTS / "verify" / "custom" / _slug(args.sampler)
    else:
        out = RESULTS / "verify"
    return verify(sampler=sampler, sampler_label=args.sampler or "reference", scenarios=scenarios,
                 settings=settings, draws=args.draws, control_draws=args.control_draws, seed=args.seed,
                 full=args.full, controls=not args.sampler and not args.no_controls, out=out,
                 fresh=args.fresh, figures=not args.no_figures, progress=not args.no_progress,
                 scenario_dir=args.scenario_dir, real_model=rm_spec, real_model_sequences=args.real_model_sequences)


def _slug(s: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in s)[:80]


def load_sampler(spec: str) -> Callable:
    """Import 'package.module:function' (or 'path/to/file.py:function'); errors name ``--sampler``."""
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise SamplerSpecError(f"`--sampler` must be 'package.module:function' or 'path/to/file.py:function'; "
                               f"got {spec!r}")
    mod_name, fn_name = spec.split(":")
    if mod_name.endswith(".py"):
        path = Path(mod_name)
        if not path.is_file():
            raise SamplerSpecError(f"`--sampler` names the file {mod_name!r}, which does not exist; got {spec!r}")
        ms = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(ms)
        try:
            ms.loader.exec_module(mod)
        except Exception as e:  # noqa: BLE001 - report any import-time failure of the user's file
            raise SamplerSpecError(f"`--sampler`: importing {mod_name!r} failed: {type(e).__name__}: {e}") from None
    else:
        try:
            mod = importlib.import_module(mod_name)
        except ModuleNotFoundError as e:
            raise SamplerSpecError(f"`--sampler` must name an importable module; got {spec!r} "
                                   f"(No module named {e.name!r})") from None
        except Exception as e:  # noqa: BLE001
            raise SamplerSpecError(f"`--sampler`: importing {mod_name!r} failed: {type(e).__name__}: {e}") from None
    fn = getattr(mod, fn_name, None)
    if fn is None:
        raise SamplerSpecError(f"`--sampler` must name a function of module {mod_name!r}; got {spec!r} "
                               f"(no attribute {fn_name!r})")
    if not callable(fn):
        raise SamplerSpecError(f"`--sampler` must name a callable; got {spec!r} ({type(fn).__name__})")
    return fn


# ------------------------------------------------------------------------------------- runs
@dataclass
class RunSpec:
    """One sampler on one scenario.  role: 'reference' | 'sampler' | 'lossy' | 'lossy-by-design' | 'lossless'."""

    label: str
    role: str
    sampler: Callable
    scenario: Scenario
    draws: int
    note: str = ""
    # filled by the runner
    acc: Optional[Accumulator] = None
    error: Optional[str] = None
    wall_s: float = 0.0
    tokens: int = 0
    positions: int = 0
    rows: list = field(default_factory=list)

    @property
    def must_be_caught(self) -> bool:
        return self.role in ("lossy", "lossy-by-design")


@dataclass
class RealRun:
    """One sampler on the real-model scenario.  role: 'reference' | 'sampler' | 'lossy' | 'lossless'."""

    label: str
    role: str
    sampler: Callable
    n_sequences: int
    seed: int
    draw: object = None  # harness.realmodel.RealModelDraw
    wall_s: float = 0.0

    @property
    def error(self) -> Optional[str]:
        return None if self.draw is None else self.draw.error

    @property
    def tokens(self) -> int:
        return 0 if self.draw is None or self.draw.error else self.draw.n_tokens


def _draw_real(rr: RealRun, spec: RealModelSpec, progress: bool, state_dir: Optional[Path]) -> None:
    """Draw rr.n_sequences on the tiny pair and score them (resuming from state_dir)."""
    from harness.realmodel import RealModelDraw, real_model_draw
    blob = json.dumps([rr.label, rr.role, rr.n_sequences, rr.seed, spec.raw, spec.config.describe(),
                       git_commit().get("commit")], sort_keys=True, default=str)
    path = state_dir / f"real_{hashlib.sha1(blob.encode()).hexdigest()[:16]}.pkl" if state_dir is not None else None
    if path is not None and path.is_file():
        with open(path, "rb") as f:
            saved = pickle.load(f)
        rr.draw, rr.wall_s = RealModelDraw(**saved["draw"]), saved["wall_s"]
        return
    tic = time.perf_counter()
    rr.draw = real_model_draw(rr.sampler, n_sequences=rr.n_sequences, max_new_tokens=spec.max_new_tokens, k=spec.k,
                              config=spec.config, prompt_lengths=spec.prompt_lengths, batch_size=spec.batch_size,
                              seed=rr.seed, name=rr.label, progress=progress, catch=True)
    rr.wall_s = time.perf_counter() - tic
    if path is not None and rr.error is None:
        atomic_write_bytes(path, pickle.dumps({"draw": dict(rr.draw.__dict__), "wall_s": rr.wall_s}))


def _real_verdict(rr: RealRun, table: pd.DataFrame) -> dict:
    nan = float("nan")
    d = rr.draw
    row = {"run": rr.label, "role": rr.role, "scenario": REAL_MODEL_SCENARIO, "sequences": rr.n_sequences,
           "tokens": rr.tokens, "wall_s": rr.wall_s, "error": rr.error, "n_rejected": 0, "min_p_adjusted": nan,
           "min_pvalue": nan, "min_p_adjusted_loss": nan, "caught_by": "", "efficiency": "",
           "acceptance": d.acceptance_rate if d is not None else nan}
    if rr.error is not None:
        row.update(verdict=f"error: {rr.error}", passed=False)
        return row
    sub = table[(table.run == rr.label) & (table.scenario == REAL_MODEL_SCENARIO)]
    lossy = bool(sub.reject.any())
    passed = lossy if rr.role == "lossy" else not lossy
    rej = sub[sub.reject].sort_values("p_adjusted")
    caught = [f"{f}.{t}" + (f"[{p}]" if p >= 0 else "") for f, t, p in zip(rej.family, rej.test, rej.position)]
    pooled = sub[sub.test == "pooled"].iloc[0]
    pos = sub[sub.test == "position"]
    pairs = sub[sub.test.str.startswith("pairs")]
    worst = pos.loc[pos.pvalue.idxmin()]
    row.update(verdict="lossy" if lossy else "lossless", passed=passed,
               caught_by=", ".join(caught[:4]) + (f" (+{len(caught) - 4})" if len(caught) > 4 else ""),
               n_rejected=len(caught), min_p_adjusted=float(sub.p_adjusted.min()), min_pvalue=float(sub.pvalue.min()),
               min_p_adjusted_loss=float(sub.p_adjusted.min()), efficiency="acceptance law unknown (no exact law)",
               pit_ks=float(pooled.statistic), pit_ks_p=float(pooled.pvalue), pit_ks_p_adjusted=float(pooled.p_adjusted),
               pit_ks_detectable=float(pooled.min_detectable), pit_kolmogorov_upper=float(pooled.kolmogorov_upper),
               pit_position_worst=int(worst.position), pit_position_min_p=float(worst.pvalue),
               pit_position_min_p_adjusted=float(pos.p_adjusted.min()),
               pit_position_detectable=float(pos.min_detectable.max()),
               pit_pairs_tv_hat=float(pairs.tv_hat.max()), pit_pairs_min_p=float(pairs.pvalue.min()),
               pit_pairs_min_p_adjusted=float(pairs.p_adjusted.min()),
               pit_pairs_detectable=float(pairs.min_detectable.max()), pit_pairs_cells=int(pairs.cells.max()))
    return row


@dataclass
class VerifyResult:
    passed: bool
    table: pd.DataFrame
    runs: list
    summary: str
    console: str
    out: Optional[Path]
    meta: dict
    real_runs: list = field(default_factory=list)


def _seed(*parts) -> int:
    words = [p if isinstance(p, int) else zlib.crc32(str(p).encode()) for p in parts]
    return int(np.random.SeedSequence(words).generate_state(1, np.uint64)[0] >> np.uint64(1))


class SamplerOutputError(RuntimeError):
    pass


def _check_output(res, B: int, N: int, V: int):
    tok = getattr(res, "tokens", None)
    if not torch.is_tensor(tok):
        raise SamplerOutputError(f"the sampler must return a GenerationResult whose `tokens` is a tensor; "
                                 f"got {type(res).__name__} with tokens of type {type(tok).__name__}")
    if tuple(tok.shape) != (B, N) or tok.is_floating_point() or tok.dtype == torch.bool:
        raise SamplerOutputError(f"the sampler's `tokens` must be an integer tensor of shape (B, max_new_tokens) = "
                                 f"{(B, N)}; got shape {tuple(tok.shape)}, dtype {tok.dtype}")
    bad = (tok < -1) | (tok >= V)
    if bool(bad.any()):
        raise SamplerOutputError(f"the sampler's `tokens` must hold ids in [0, {V}) or PAD = -1; got "
                                 f"{tok[bad][:5].tolist()}")
    return tok


def _state_key(run: RunSpec, seed: int, settings) -> str:
    blob = json.dumps([run.label, run.role, run.scenario.name, run.scenario.raw, run.draws, seed,
                       settings.min_chunks, settings.max_chunk, settings.pit_bins, settings.logprob_max,
                       git_commit().get("commit")], sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


_ACC_FIELDS = ("n", "counts", "pairs", "joint", "pit_hist", "pit_pairs", "logprob", "n_logprob", "chunks",
               "calls_without_stats")


def _draw(run: RunSpec, law: ExactLaw, models, seed: int, settings, pair_bins: int, pbar, state_dir: Optional[Path],
          is_baseline: bool = False) -> None:
    """Draw run.draws sequences in calls and fold them into run.acc (resuming from state_dir)."""
    sc = run.scenario
    target, draft = models
    rng = np.random.default_rng(_seed(seed, run.label, sc.name, "pit"))
    run.acc = Accumulator(law, sc.joint_tokens, settings.pit_bins, pair_bins, settings.logprob_max, rng,
                          with_pit=not is_baseline)
    path = state_dir / f"{_state_key(run, seed, settings)}.pkl" if state_dir is not None else None
    if path is not None and path.is_file():
        with open(path, "rb") as f:
            saved = pickle.load(f)
        for k in _ACC_FIELDS:
            setattr(run.acc, k, saved["acc"][k])
        run.error, run.wall_s, run.tokens, run.positions = saved["error"], saved["wall_s"], saved["tokens"], \
            saved["positions"]
        if pbar is not None:
            pbar.update(run.draws * sc.max_new_tokens)
        return
    chunks = plan_chunks(run.draws, 1 if is_baseline else settings.min_chunks, settings.max_chunk)
    prompt = torch.tensor(list(sc.prompt), dtype=torch.long)
    V = target.vocab_size
    tic = time.perf_counter()
    for c, B in enumerate(chunks):
        g = torch.Generator().manual_seed(_seed(seed, run.label, sc.name, c))
        prompts = prompt.unsqueeze(0).expand(B, -1).contiguous()  # (B, P)
        try:
            if is_baseline:
                res = autoregressive_generate(target, prompts, max_new_tokens=sc.max_new_tokens, config=sc.config,
                                              eos_token_id=sc.eos_token_id, generator=g)
            else:
                res = run.sampler(target, draft, prompts, k=sc.k, max_new_tokens=sc.max_new_tokens, config=sc.config,
                                  eos_token_id=sc.eos_token_id, generator=g)
            tok = _check_output(res, B, sc.max_new_tokens, V)
        except Exception as e:  # noqa: BLE001 - a sampler that crashes fails verification, with the reason
            run.error = f"{type(e).__name__}: {e}"
            break
        run.acc.add(tok, getattr(res, "stats", None))
        run.tokens += int((tok >= 0).sum())
        run.positions += B * sc.max_new_tokens
        if pbar is not None:
            pbar.update(B * sc.max_new_tokens)
    run.wall_s = time.perf_counter() - tic
    if path is not None and run.error is None:
        blob = pickle.dumps({"acc": {k: getattr(run.acc, k) for k in _ACC_FIELDS}, "error": run.error,
                             "wall_s": run.wall_s, "tokens": run.tokens, "positions": run.positions})
        atomic_write_bytes(path, blob)


def _von_neumann_runs(proposals: int, seed: int, controls: bool = True):
    """Reference von Neumann sampler at M = 2.8 and 5.6 and one broken envelope; rows of tests."""
    from harness.bugs import VN_CONTROLS
    from specimpl.von_neumann import SNUG_M, TwoPeakDensity, two_peak_sampler
    d = TwoPeakDensity.with_peak(SNUG_M)
    cdf = lambda x: np.asarray(d.cdf(np.asarray(x)), dtype=np.float64)  # noqa: E731
    out = []
    entries = [("von_neumann", "reference", M, two_peak_sampler(M, d)) for M in (SNUG_M, 2 * SNUG_M)]
    if controls:
        entries += [(name, "lossy", M, make(d)) for name, M, make in VN_CONTROLS]
    for label, role, M, sampler in entries:
        g = torch.Generator().manual_seed(_seed(seed, label, M))
        tic = time.perf_counter()
        draw = sampler.propose(proposals, g)
        wall = time.perf_counter() - tic
        out.append((label, role, M, draw, cdf, wall))
    return out


def _vn_specs(label, M, draw, cdf) -> list[TestSpec]:
    x = draw.samples.numpy()

    def ks(alpha, power, delta):
        r = stats.ks_1samp(x, cdf, alpha=alpha, power=power)
        return {"statistic": r.statistic, "pvalue": r.pvalue, "min_detectable": r.min_detectable_distance,
                "min_detectable_unit": "Kolmogorov distance", "method": r.method, "n": r.n}

    def ad(alpha, power, delta):
        r = stats.ad_1samp(x, cdf, alpha=alpha, power=power)
        return {"statistic": r.statistic, "pvalue": r.pvalue, "min_detectable": r.min_detectable_distance,
                "min_detectable_unit": "Kolmogorov distance (AD bound)", "method": r.method, "n": r.n}

    def acc(alpha, power, delta):
        r = stats.binomial_test(draw.accepted, draw.proposed, 1.0 / M, alpha=alpha, power=power)
        return {"statistic": r.statistic, "pvalue": r.pvalue, "min_detectable": r.min_detectable_deviation,
                "min_detectable_unit": "acceptance rate", "method": r.method, "n": r.n,
                "expected": 1.0 / M, "observed": r.statistic}

    return [TestSpec("von_neumann", "ks", None, True, ks), TestSpec("von_neumann", "ad", None, True, ad),
            TestSpec("von_neumann", "acceptance", None, True, acc)]


def verify(*, sampler: Optional[Callable], sampler_label: str, scenarios: list, settings, draws: Optional[int] = None,
           control_draws: Optional[int] = None, seed: Optional[int] = None, full: bool = False, controls: bool = True,
           out: Optional[Path] = None, fresh: bool = False, figures: bool = True, progress: bool = True,
           scenario_dir: Path = SCENARIO_DIR, von_neumann: Optional[bool] = None,
           real_model: Optional[RealModelSpec] = None, real_model_sequences: Optional[int] = None,
           real_model_controls: Optional[bool] = None) -> VerifyResult:
    """Run the battery; write the report to ``out`` (None: write nothing).  See the module docstring.

    ``real_model``: the real-model scenario's settings (None: no real-model scenario); the sampler under
    test draws ``real_model_sequences`` (default: the spec's, or its ``full_n_sequences`` with ``full``)
    and, with ``real_model_controls`` (default: ``controls``), the spec's controls run too."""
    from harness import verify_report
    from harness.bugs import CATALOGUE

    t_start = time.perf_counter()
    seed = settings.seed if seed is None else seed
    base_draws = draws if draws is not None else (settings.full_draws if full else settings.draws)
    if control_draws is None:
        control_draws = settings.full_control_draws if full else settings.control_draws
        if draws is not None:
            control_draws = min(control_draws, draws)
    vn_props = settings.full_von_neumann_proposals if full else settings.von_neumann_proposals
    if draws is not None:
        vn_props = min(vn_props, max(10_000, 5 * draws))
    reference_mode = sampler is None
    main_fn = speculative_generate if reference_mode else sampler
    role = "reference" if reference_mode else "sampler"
    runs: list[RunSpec] = [RunSpec(sampler_label, role, main_fn, sc,
                                   max(2, round(base_draws * (sc.full_weight if full else sc.weight))))
                           for sc in scenarios]
    if controls:
        cache = {sc.name: sc for sc in scenarios}
        for c in CATALOGUE:
            sc = cache.get(c.scenario) or load_scenario(c.scenario, scenario_dir)
            cache[sc.name] = sc
            runs.append(RunSpec(c.name, c.kind, c.sampler, sc, max(2, round(control_draws * min(1.0, sc.weight)))))
    do_vn = reference_mode if von_neumann is None else von_neumann
    real_runs: list[RealRun] = []
    if real_model is not None:
        n_rm = real_model_sequences or (real_model.full_n_sequences if full else real_model.n_sequences)
        real_runs.append(RealRun(sampler_label, role, main_fn, n_rm, _seed(seed, sampler_label, "real_model") % 2**31))
        if controls if real_model_controls is None else real_model_controls:
            for name, crole, fn, n in real_model.control_samplers():
                real_runs.append(RealRun(name, crole, fn, n, _seed(seed, name, "real_model") % 2**31))

    # --- draw ---------------------------------------------------------------------------------------
    by_scenario: dict[str, list[RunSpec]] = {}
    for r in runs:
        by_scenario.setdefault(r.scenario.name, []).append(r)
    baselines: dict[str, RunSpec] = {}
    for name, rs in by_scenario.items():
        n_base = max(r.draws for r in rs if r.role in ("reference", "sampler")) if any(
            r.role in ("reference", "sampler") for r in rs) else max(r.draws for r in rs)
        baselines[name] = RunSpec("target-only", "baseline", autoregressive_generate, rs[0].scenario, n_base)
    total = sum(r.draws * r.scenario.max_new_tokens for r in runs) + \
        sum(b.draws * b.scenario.max_new_tokens for b in baselines.values()) + \
        sum(rr.n_sequences * real_model.max_new_tokens for rr in real_runs)
    state_dir = None
    if out is not None:
        state_dir = Path(out) / "_tmp_state"
        if fresh and state_dir.exists():
            for p in state_dir.glob("*.pkl"):
                p.unlink()
        state_dir.mkdir(parents=True, exist_ok=True)
    from tqdm import tqdm
    pbar = tqdm(total=total, unit="tok", unit_scale=True, desc="verify: drawing", disable=not progress,
                file=sys.stderr, mininterval=1.0, smoothing=0.1)
    laws: dict[str, ExactLaw] = {}
    mismatch: dict[str, float] = {}
    pair_bins_of: dict[str, int] = {}
    for name, rs in by_scenario.items():
        sc = rs[0].scenario
        if not sc.exact:
            raise ValueError(f"scenario {name!r} uses builder {sc.builder!r}; this battery needs an exact law "
                             "(builder 'ngram'); real-model pairs are verified by harness.realmodel")
        models = sc.build()
        laws[name] = law = ExactLaw(models[0], models[1], list(sc.prompt), sc.max_new_tokens, sc.config,
                                    sc.eos_token_id)
        mismatch[name] = max(warp_mismatch(models[0], sc.config), warp_mismatch(models[1], sc.config))
        if mismatch[name] > 1e-4:
            raise ValueError(f"scenario {name!r}: the sampling controls sit on a float32 tie (warped table differs "
                             f"from float64 by TV {mismatch[name]:.3g}); change top_k / top_p / seed")
        n_max = max(r.draws for r in rs)
        pairs_per_table = n_max * (sc.max_new_tokens // 2)
        pair_bins_of[name] = int(max(2, min(16, math.floor(math.sqrt(pairs_per_table / 100)))))
        pbar.set_description(f"verify: {name} target-only")
        _draw(baselines[name], law, models, seed, settings, pair_bins_of[name], pbar, state_dir, is_baseline=True)
        for r in rs:
            pbar.set_description(f"verify: {name} {r.label}")
            _draw(r, law, models, seed, settings, pair_bins_of[name], pbar, state_dir)
    for rr in real_runs:
        pbar.set_description(f"verify: {REAL_MODEL_SCENARIO} {rr.label}")
        _draw_real(rr, real_model, progress, state_dir)
        pbar.update(rr.n_sequences * real_model.max_new_tokens)
    pbar.close()
    vn = _von_neumann_runs(vn_props, seed, controls) if do_vn else []
    t_drawn = time.perf_counter()

    # --- plan every test, split the budget, evaluate ----------------------------------------------------
    plan: list[tuple[RunSpec | None, str, str, TestSpec, dict]] = []
    for r in runs:
        if r.error is not None:
            continue
        base = baselines[r.scenario.name]
        for ts in plan_tests(r.acc, base.acc if base.error is None else None, r.scenario.k):
            plan.append((r, r.label, r.scenario.name, ts, {}))
    for rr in real_runs:
        if rr.error is None:
            for ts in plan_pit_value_tests(rr.draw.u):
                plan.append((None, rr.label, REAL_MODEL_SCENARIO, ts, {"role": rr.role}))
    for label, vrole, M, draw, cdf, wall in vn:
        for ts in _vn_specs(label, M, draw, cdf):
            plan.append((None, label, f"von_neumann_M{M:g}", ts, {"role": vrole, "M": M}))
    m = len(plan)
    alpha_each = settings.family_alpha / max(m, 1)
    n_bounds = sum(1 for p in plan if p[3].family == "gof" or (p[3].family == "pit" and p[3].wants_tv_bound))
    delta_each = (1 - settings.tv_confidence) / max(n_bounds, 1)
    rows = []
    for r, label, scen, ts, extra in plan:
        row = {"run": label, "role": extra.get("role", r.role if r else ""), "scenario": scen, "family": ts.family,
               "test": ts.test, "position": ts.position if ts.position is not None else -1, "loss_test": ts.loss}
        row.update(ts.evaluate(alpha_each, settings.power, delta_each))
        row["alpha_bonferroni"] = alpha_each
        rows.append(row)
    table = pd.DataFrame(rows, columns=None if rows else [
        "run", "role", "scenario", "family", "test", "position", "loss_test", "statistic", "pvalue",
        "min_detectable", "min_detectable_unit", "method", "tv_hat", "tv_lower", "tv_upper", "direction",
        "alpha_bonferroni"])
    if not len(table):
        table["p_adjusted"], table["reject"], table["verdict"] = [], [], []
    else:
        table["pvalue"] = table["pvalue"].clip(0.0, 1.0)
        table["p_adjusted"] = stats.holm(table["pvalue"].to_numpy())
        table["reject"] = table["p_adjusted"] <= settings.family_alpha
        table["verdict"] = np.where(table["reject"], np.where(table["loss_test"], "REJECT (lossy)",
                                                              "REJECT (acceptance law)"), "pass")
    t_tested = time.perf_counter()

    # --- verdicts --------------------------------------------------------------------------------------
    run_rows = []
    for r in runs:
        run_rows.append(_run_verdict(r, table, laws[r.scenario.name], baselines[r.scenario.name]))
    for rr in real_runs:
        run_rows.append(_real_verdict(rr, table))
    for label, vrole, M, draw, cdf, wall in vn:
        sub = table[(table.run == label) & (table.scenario == f"von_neumann_M{M:g}")]
        lossy = bool(sub.reject.any())
        passed = lossy if vrole == "lossy" else not lossy
        caught_by = ", ".join(sub[sub.reject].test) if lossy else ""
        run_rows.append({"run": label, "role": vrole, "scenario": f"von_neumann_M{M:g}", "verdict":
                         "lossy" if lossy else "lossless", "passed": passed, "error": None,
                         "sequences": draw.proposed, "tokens": draw.accepted, "wall_s": wall,
                         "caught_by": caught_by, "min_p_adjusted": float(sub.p_adjusted.min()),
                         "acceptance": draw.acceptance, "expected_acceptance": 1.0 / M})
    verdicts = pd.DataFrame(run_rows)
    passed = bool(verdicts.passed.all()) if len(verdicts) else False
    timing = {
        "wall_total_s": time.perf_counter() - t_start, "wall_draw_s": t_drawn - t_start,
        "wall_tests_s": t_tested - t_drawn,
        "tokens_sampler": int(sum(r.tokens for r in runs if r.role in ("reference", "sampler"))),
        "tokens_controls": int(sum(r.tokens for r in runs if r.role not in ("reference", "sampler"))),
        "tokens_target_only": int(sum(b.tokens for b in baselines.values())),
        "positions_total": int(sum(r.positions for r in runs) + sum(b.positions for b in baselines.values())),
        "von_neumann_proposals": int(sum(v[3].proposed for v in vn)),
        "tokens_real_model": int(sum(rr.tokens for rr in real_runs)),
        "wall_real_model_s": float(sum(rr.wall_s for rr in real_runs)),
    }
    timing["tokens_total"] = timing["tokens_sampler"] + timing["tokens_controls"] + timing["tokens_target_only"] + \
        timing["tokens_real_model"]
    config = {"sampler": sampler_label, "scenarios": [s.name for s in scenarios], "draws": base_draws,
              "control_draws": control_draws if controls else 0, "full": full, "family_alpha": settings.family_alpha,
              "power": settings.power, "tv_confidence": settings.tv_confidence, "n_tests": m,
              "alpha_bonferroni": alpha_each, "tv_delta_each": delta_each, "settings": settings.raw,
              "scenario_defs": {n: rs[0].scenario.raw for n, rs in by_scenario.items()},
              "von_neumann_proposals": vn_props,
              "real_model": None if real_model is None else {
                  "settings": real_model.raw, "config": real_model.config.describe(), "k": real_model.k,
                  "max_new_tokens": real_model.max_new_tokens,
                  "runs": {rr.label: {"role": rr.role, "sequences": rr.n_sequences, "seed": rr.seed} for rr in real_runs}}}
    result = verify_report.build(table=table, verdicts=verdicts, runs=runs, baselines=baselines, laws=laws,
                                 real_runs=real_runs,
                                 config=config, seed=seed, timing=timing, passed=passed, out=out, figures=figures)
    if state_dir is not None and passed is not None:
        for p in state_dir.glob("*.pkl"):
            p.unlink()
        try:
            state_dir.rmdir()
        except OSError:
            pass
    return VerifyResult(passed=passed, table=table, runs=runs, summary=result["summary"], console=result["console"],
                        out=out, meta=result["meta"], real_runs=real_runs)


def _run_verdict(r: RunSpec, table: pd.DataFrame, law: ExactLaw, base: RunSpec) -> dict:
    nan = float("nan")
    row = {"run": r.label, "role": r.role, "scenario": r.scenario.name, "sequences": r.acc.n if r.acc else 0,
           "tokens": r.tokens, "wall_s": r.wall_s, "error": r.error, "n_rejected": 0, "min_p_adjusted": nan,
           "min_pvalue": nan, "tv_position_max": nan, "tv_position_max_at": -1, "tv_position_lower": nan,
           "tv_position_upper": nan, "min_p_adjusted_loss": nan, "tv_position_upper_max": nan, "tv_joint": nan,
           "tv_joint_lower": nan, "tv_joint_upper": nan, "mde_position_tv": nan, "efficiency": "", "tv_best": nan,
           "tv_best_lower": nan, "tv_best_upper": nan, "tv_best_test": ""}
    if r.error is not None:
        row.update(verdict=f"error: {r.error}", passed=False, caught_by="")
        return row
    sub = table[(table.run == r.label) & (table.scenario == r.scenario.name)]
    loss = sub[sub.loss_test]
    lossy = bool(loss.reject.any())
    acc = sub[~sub.loss_test]
    acc_rej = acc[acc.reject]
    eff = ""
    if len(acc_rej):
        eff = "inefficient" if (acc_rej.direction < 0).any() else "over-accepting"
    elif len(acc) == 0:
        eff = "acceptance not instrumented"
    verdict = ("lossy" if lossy else "lossless") + (f", {eff}" if eff else "")
    if r.role == "reference":
        passed = not lossy and len(acc_rej) == 0
    elif r.role in ("lossy", "lossy-by-design"):
        passed = lossy
    else:  # user sampler or lossless control
        passed = not lossy
    rej = loss[loss.reject].sort_values("p_adjusted")
    caught = [f"{f}.{t}" + (f"[{p}]" if p >= 0 else "") for f, t, p in zip(rej.family, rej.test, rej.position)]
    gof = sub[sub.family == "gof"]
    if len(gof):  # the most clearly non-zero TV: largest certified lower bound (ties: largest estimate)
        best = gof.sort_values(["tv_lower", "tv_hat"], ascending=False).iloc[0]
        row.update(tv_best=float(best.tv_hat), tv_best_lower=float(best.tv_lower), tv_best_upper=float(best.tv_upper),
                   tv_best_test=f"{best.test}" + (f"[{int(best.position)}]" if best.position >= 0 else ""))
    pos = sub[(sub.family == "gof") & (sub.test == "position")]
    joint = sub[(sub.family == "gof") & sub.test.str.startswith("joint")]
    worst = pos.loc[pos.tv_hat.idxmax()] if len(pos) else None
    row.update(verdict=verdict, passed=passed, caught_by=", ".join(caught[:4]) + (f" (+{len(caught) - 4})"
                                                                                    if len(caught) > 4 else ""),
               n_rejected=len(caught), min_p_adjusted=float(sub.p_adjusted.min()) if len(sub) else float("nan"),
               min_pvalue=float(sub.pvalue.min()) if len(sub) else float("nan"),
               tv_position_max=float(worst.tv_hat) if worst is not None else float("nan"),
               tv_position_max_at=int(worst.position) if worst is not None else -1,
               tv_position_lower=float(worst.tv_lower) if worst is not None else float("nan"),
               tv_position_upper=float(worst.tv_upper) if worst is not None else float("nan"),
               min_p_adjusted_loss=float(loss.p_adjusted.min()) if len(loss) else float("nan"),
               tv_position_upper_max=float(pos.tv_upper.max()) if len(pos) else float("nan"),
               tv_joint=float(joint.tv_hat.iloc[0]) if len(joint) else float("nan"),
               tv_joint_lower=float(joint.tv_lower.iloc[0]) if len(joint) else float("nan"),
               tv_joint_upper=float(joint.tv_upper.iloc[0]) if len(joint) else float("nan"),
               mde_position_tv=float(pos.min_detectable.max()) if len(pos) else float("nan"),
               efficiency=eff or "as exact")
    return row
