"""`python -m harness verify-samples`: is an engine's output the target's law?  From its samples alone.

    python -m harness verify-samples --samples spec.jsonl --target tiny
    python -m harness verify-samples --samples spec.jsonl --baseline plain.jsonl --epsilon 0.05

Scored mode (``--target``): the target scores every output token under the recorded controls
(:mod:`harness.samples.scoring`) and the battery runs on the scores.  Two-sample mode (``--baseline``, a
file from the same prompts and controls with speculation off): no model.  The tests of both modes and
the independence checks (:mod:`harness.samples.plan`) form ONE family, Holm-adjusted at ``--alpha``
with each row's detectable deviation stated at the run's power.  The verdict
(:mod:`harness.samples.certificate`) is *lossy* (a loss test rejects), *certified* (nothing rejects and
every per-position upper bound is below ``--epsilon``: in scored mode a token TV of each step from the
engine's own prefixes, the PIT law's Kolmogorov distance reported beside it) or *inconclusive* (with the completions that
would certify).  Controls the scorer cannot apply (min_p, stop strings), files whose completions were
drawn under different controls, a baseline with other controls or prompts, and a baseline that is the
sample set or shares its completions (:func:`check_independent_baseline`) are refused (exit 2): a
verdict is never given for a configuration other than the one the engine applied.  Completions the engine
ended early against the requested controls (``early_stop``: an EOS applied although asked to ignore EOS) are a
finding about the engine, judged in every mode: the row ``ending/early_stops`` rejects, the verdict is lossy
with respect to the requested law, and the console, summary.md and meta.json (``info.early_stops``) say how many.

The **dependence stage** (:mod:`harness.samples.dependence`) runs after the family on every file, in every mode, at
``--dependence-alpha`` (default 1e-3, on top of ``--alpha``): completions copied under new ids (against the law, or
the baseline in two-sample mode) and designated pairs (one seed, one request, file neighbours) agreeing beyond
within-prompt permutations.  A finding makes the verdict lossy, named first among its reasons and on its own console
line; either way the line states what the stage would detect at the file's size (meta.json ``info.dependence``).

The report goes to ``--out``: tests.csv (one row per test, the columns of ``verify``), summary.md (the
certificate first), meta.json (provenance, the certificate, per-position bounds, timings).
The console's last line and summary.md's "Result" give the headline word, PASS / LOSSY / INCONCLUSIVE
(:mod:`harness.core.verdict`): a lossy verdict names the tests and the position whose estimated TV is largest, an
inconclusive one the completions that would certify and the commands that draw and verify them (:func:`advice`).
Exit status: 0 certified, 1 lossy, 4 inconclusive, 2 bad input, 3 the target failed to load or score.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from harness.core.errors import SamplerError, UsageError
from harness.core.limits import EPSILON_WHY, MIN_EPSILON
from harness.core.models import resolve_model
from harness.core.verdict import exit_status, headline, rerun_command
from harness.core.options import check_option, check_out, check_seed
from harness.core.outdir import claim_out
from harness.samples import dependence
from harness.samples.certificate import Certificate, judge, scored_bounds, token_tv_bounds, two_sample_bounds
from harness.samples.exact import WINDOW, exact_bounds, exact_laws, plan_exact, prompt_table
from harness.samples.format import SampleRecord, read_samples
from harness.samples.producers import ScorerRefusal, config_of
from harness.laws.scenarios import load_settings
from harness.verify.family import PlannedTest, evaluate_family
from specimpl.hf import HFModel
from harness.samples.plan import early_stop_finding, early_stop_spec, early_stopped, plan_scored
from harness.samples.scoring import padded_outputs, score_records
from harness.samples.plan import plan_two_sample, position_cells
from harness.samples.report import write_report
from harness.stats.collisions import matched_identity_permutation_test

__all__ = ["add_arguments", "check_args", "run", "verify_samples", "SamplesVerdict"]

PLANNED_EPSILONS = (0.05, 0.01)  # scored mode also plans these (meta.json bounds.completions_needed_at)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--samples", type=Path, required=True, help="sample file under test (specverify.samples/1)")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--target", help="scored mode: the target model, a folder or a shipped name (tiny, exact-markov, ...: "
                                       "`python -m harness models`; safetensors)")
    mode.add_argument("--baseline", type=Path, help="two-sample mode: a sample file of the same prompts and "
                                                    "controls with speculation off")
    ap.add_argument("--exact", action="store_true",
                    help="with --target: test against the target's exact law, enumerated in float64 (a small-vocabulary "
                         "model such as exact-markov; token-TV certificate per position)")
    ap.add_argument("--window", type=int, default=WINDOW, help=f"exact mode: J of the window tests (default {WINDOW})")
    ap.add_argument("--epsilon", type=float, default=0.05, help="tolerance of the certificate, per position "
                                                                "(default 0.05)")
    ap.add_argument("--alpha", type=float, help="family-wise false-alarm budget (default: default.toml's)")
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                    help="scorer weights' dtype (the warp is float64 either way)")
    ap.add_argument("--logprob-tol", type=float, default=1e-3,
                    help="largest |engine logprob - scorer logprob| accepted (default 1e-3)")
    ap.add_argument("--eos-token-id", type=int, help="EOS id for the ending check (default: the target's config)")
    ap.add_argument("--vocab-size", type=int, help="two-sample: vocabulary size V for the bounds (default: "
                                                   "largest id in the files + 1)")
    ap.add_argument("--batch-size", type=int, default=64, help="rows per scoring forward (default 64)")
    ap.add_argument("--dependence-alpha", type=float, default=dependence.LEVEL,
                    help=f"false-alarm rate of the dependence stage per file (duplicated completions, completions "
                         f"sharing a stream; default {dependence.LEVEL:g}, on top of --alpha)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the PIT's uniforms (default 0)")
    ap.add_argument("--out", type=Path, default=None,
                    help="report folder (default: runs/verify-samples/<samples>-<hash of the options>)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bars")


@dataclass(frozen=True)
class SamplesVerdict:
    mode: str
    table: object
    certificate: Certificate
    notes: tuple
    info: dict

    @property
    def exit_code(self) -> int:
        """0 certified, 1 lossy, 4 inconclusive."""
        return exit_status(self.certificate.verdict)


def _dep_alpha(args) -> float:
    """The dependence stage's false-alarm rate (``--dependence-alpha``; callers that build ``args`` themselves may
    leave it out: :data:`harness.samples.dependence.LEVEL`)."""
    return getattr(args, "dependence_alpha", dependence.LEVEL)


def _dependence(records, args, **kw) -> tuple:
    """(the dependence stage on ``records``, its wall seconds, planner included; meta.json ``info.wall_dependence_s``)."""
    tic = time.perf_counter()
    dep = dependence.check(records, _dep_alpha(args), **kw)
    return dep, time.perf_counter() - tic


def _settings(alpha: Optional[float]):
    s = load_settings()
    return dataclasses.replace(s, family_alpha=alpha) if alpha is not None else s


def _one_law(records: list[SampleRecord], path: Path) -> tuple:
    """The controls' law key shared by every record; UsageError at the first record that differs."""
    key = records[0].controls.law_key()
    for r in records:
        if r.controls.law_key() != key:
            raise UsageError(f"{path}: request {r.request_id!r} was drawn under controls {r.controls.to_json()}, "
                             f"other than the first record's {records[0].controls.to_json()}; verify one "
                             "configuration at a time")
    return key


def _one_prompt_per_id(records: list[SampleRecord], path) -> None:
    """Every ``prompt_id`` names one prompt (the independence checks group completions by it); UsageError
    naming the two requests that give one prompt_id two prompts."""
    first: dict = {}
    for r in records:
        other = first.setdefault(r.prompt_id, r)
        if other.prompt_ids != r.prompt_ids:
            raise UsageError(f"{path}: prompt_id {r.prompt_id!r} holds two different prompts (requests "
                             f"{other.request_id!r} and {r.request_id!r}); a prompt_id must name one prompt: give "
                             "each prompt its own id")


def _one_eos_policy(records: list[SampleRecord], path, eos: Optional[int] = None) -> None:
    """Completions of one file follow one EOS policy: either they stop at EOS, or (ignore_eos) they run on
    past it.  EOS is ``eos`` or, unknown, the last token of the completions that ended at EOS.  UsageError
    naming one completion of each kind: the two laws cannot be scored as one."""
    ends = {eos} if eos is not None else {r.output_ids[-1] for r in records if r.finish_reason == "eos"}
    stopped = next((r for r in records if r.finish_reason == "eos" and r.output_ids[-1] in ends), None)
    ran_on = next((r for r in records if any(t in ends for t in r.output_ids[:-1])), None)
    if stopped is not None and ran_on is not None:
        raise UsageError(f"{path}: completions follow two EOS policies: {stopped.request_id!r} stops at EOS "
                         f"{stopped.output_ids[-1]}, {ran_on.request_id!r} runs on past it (ignore_eos); verify one "
                         "policy at a time (split the file)")


def _family(specs, settings, run_label: str):
    plan = [PlannedTest(run_label, "under_test", "samples", s) for s in specs]
    table, levels = evaluate_family(plan, settings)
    num = (table["family"] == "numerics") & table["reject"]
    table.loc[num, "verdict"] = "REJECT (logprob disagreement)"
    return table, levels


def _load_target(name: str, dtype: str):
    import torch
    try:
        return HFModel.from_pretrained(name, dtype=torch.float64 if dtype == "float64" else torch.float32,
                                       load_tokenizer=False)
    except (OSError, ValueError) as e:
        raise UsageError(f"`--target` must be a loadable causal LM (local path or cached name, safetensors); got "
                         f"{name!r} ({' '.join(str(e).split())[:200]})") from None


def _eos(target, override: Optional[int]) -> Optional[int]:
    if override is not None:
        return override
    e = getattr(target.model.config, "eos_token_id", None)
    return e[0] if isinstance(e, (list, tuple)) and e else e


def scored(records, target_name: str, args, settings) -> SamplesVerdict:
    try:
        config = config_of(records[0].controls)
    except ScorerRefusal as e:
        raise UsageError(f"{args.samples}: cannot certify: {e}") from None
    target = _load_target(target_name, args.dtype)
    V = target.vocab_size
    check_option(args.eos_token_id is None or args.eos_token_id < V, "--eos-token-id", args.eos_token_id,
                 f"a token id in [0, {V}) (the target's vocabulary)")
    _one_eos_policy(records, args.samples, _eos(target, args.eos_token_id))
    tic = time.perf_counter()
    try:
        scores = score_records(target, records, config, seed=args.seed, chunk=args.batch_size,
                               progress=not args.no_progress)
    except ValueError as e:
        raise UsageError(f"{args.samples}: {e}") from None
    except Exception as e:  # noqa: BLE001 - the model failed while scoring: exit 3
        raise SamplerError(f"the target failed while scoring: {type(e).__name__}: {e}") from e
    wall = time.perf_counter() - tic
    specs, notes, agreement = plan_scored(records, scores, _eos(target, args.eos_token_id), args.logprob_tol)
    notes += [f for f in (early_stop_finding(records),) if f]
    table, levels = _family(specs, settings, "samples")
    bounds = token_tv_bounds(padded_outputs(records).numpy(), scores.present, scores.law_sum, args.epsilon,
                             settings.tv_confidence, settings.power, also=PLANNED_EPSILONS)
    pit = scored_bounds(scores.u, scores.present, args.epsilon, settings.tv_confidence, settings.power)
    cert = judge(table, bounds, args.epsilon, settings.tv_confidence, len(records))
    log_p = np.where(scores.present, scores.logp, 0.0).sum(1)  # (N,) log P(completion) under the target
    dep, dep_wall = _dependence(records, args, log_probs=log_p)
    cert = dependence.apply(cert, dep)
    info = {"dependence": dep.to_json(), "wall_dependence_s": dep_wall, "tokens_scored": scores.n_tokens, "wall_score_s": wall, "scorer_dtype": args.dtype,
            "pit_kolmogorov": {"what": pit.what, "max_upper": pit.max_upper, "completions_needed": pit.needed,
                               "upper": list(pit.upper), "delta_each": pit.delta_each},
            "scorer_config": config.describe(), "engine_logprobs": agreement, "levels": vars(levels),
            "family_alpha": settings.family_alpha, "power": settings.power}
    return SamplesVerdict("scored", table, cert, tuple(notes), info)


SHARED_LEVEL = 1e-3  # false refusal rate of the shared-completions check (independent files refused this often)


def check_independent_baseline(records, base, samples_path: Path, baseline_path: Path) -> None:
    """UsageError naming both files when the baseline is the sample set (the same file, or the same
    completions of the same prompts under any request ids) or shares completions with it (request ids
    holding the same completion in both files beyond what independent files give, at SHARED_LEVEL): a
    two-sample test of a file against itself certifies anything."""
    where = f"`--baseline` {str(baseline_path)!r} and `--samples` {str(samples_path)!r}"
    same = samples_path.exists() and baseline_path.exists() and samples_path.samefile(baseline_path)
    if same or Counter((r.prompt_ids, r.output_ids) for r in records) == \
            Counter((r.prompt_ids, r.output_ids) for r in base):
        raise UsageError(f"{where} hold the same completions ({'one file' if same else 'identical sample sets'}); "
                         "the baseline must be an independent sample of the reference engine")
    key = lambda rs: {r.request_id: (r.prompt_ids, r.output_ids) for r in rs}  # noqa: E731
    m = matched_identity_permutation_test(key(records), key(base))
    if m.pvalue <= SHARED_LEVEL:
        raise UsageError(f"{where} share completions: {m.method} (p = {m.pvalue:.2g} <= {SHARED_LEVEL:g}); the "
                         "baseline must be drawn independently of the sample set (another seed, another run)")


def two_sample(records, baseline_path: Path, args, settings) -> SamplesVerdict:
    base = read_samples(baseline_path, option="--baseline")
    _one_prompt_per_id(base, baseline_path)
    _one_eos_policy(base, baseline_path, args.eos_token_id)
    check_independent_baseline(records, base, Path(args.samples), Path(baseline_path))
    if _one_law(base, baseline_path) != _one_law(records, args.samples):
        raise UsageError(f"`--baseline` must be drawn under the controls of `--samples`; got "
                         f"{base[0].controls.to_json()} vs {records[0].controls.to_json()} (seed aside)")
    T = records[0].controls.max_new_tokens
    ids = [t for r in records + base for t in r.output_ids]
    V = args.vocab_size if args.vocab_size is not None else (max(ids) + 1 if ids else 1)
    if ids and max(ids) >= V:
        raise UsageError(f"`--vocab-size` must exceed every token id in the files; got {V} (largest id {max(ids)})")
    try:
        specs, notes = plan_two_sample(records, base, T, V)
    except ValueError as e:
        raise UsageError(str(e)) from None
    table, levels = _family(specs, settings, "samples")
    bounds = two_sample_bounds(position_cells(records, T, V), position_cells(base, T, V), V + 1, args.epsilon,
                               settings.tv_confidence, settings.power)
    notes = list(notes) + [f for f in (early_stop_finding(records),) if f]
    if args.vocab_size is None:
        notes.append(f"vocabulary size taken as the largest id in the files + 1 = {V} (pass --vocab-size)")
    cert = judge(table, bounds, args.epsilon, settings.tv_confidence, min(len(records), len(base)))
    dep, dep_wall = _dependence(records, args, baseline_keys=[(r.prompt_ids, r.output_ids) for r in base])
    cert = dependence.apply(cert, dep)
    info = {"dependence": dep.to_json(), "wall_dependence_s": dep_wall, "sample_completions": len(records), "baseline_completions": len(base), "vocab_size": V, "levels": vars(levels),
            "tokens_compared": int(sum(len(r.output_ids) for r in records + base)),
            "family_alpha": settings.family_alpha, "power": settings.power}
    return SamplesVerdict("two-sample", table, cert, tuple(notes), info)


def exact(records, target_name: str, args, settings) -> SamplesVerdict:
    """Exact-law mode (:mod:`harness.samples.exact`): χ² and TV bounds against the enumerated float64 law."""
    try:
        config = config_of(records[0].controls)
    except ScorerRefusal as e:
        raise UsageError(f"{args.samples}: cannot certify: {e}") from None
    early = set(early_stopped(records))
    whole = [r for i, r in enumerate(records) if i not in early]  # the early stops: one finding, not a table row
    if not whole:
        raise UsageError(f"{args.samples}: {early_stop_finding(records)}; no whole completion is left to test")
    prompts, rows, toks = prompt_table(whole, args.samples)
    tic = time.perf_counter()
    try:
        laws = exact_laws(target_name, prompts, toks.shape[1], config, args.window)
    except (OSError, ValueError) as e:
        raise UsageError(f"`--target` with --exact must be a small local causal LM whose law can be enumerated; "
                         f"{' '.join(str(e).split())[:300]}") from None
    wall = time.perf_counter() - tic
    specs = plan_exact(whole, laws, rows, toks)
    if early:
        specs.append(early_stop_spec(records))
    table, levels = _family(specs, settings, "samples")
    bounds = exact_bounds(table, laws, rows, args.epsilon, levels.delta_each)
    cert = judge(table, bounds, args.epsilon, settings.tv_confidence, len(records))
    values, log_p = dependence.exact_completion_log_probs(laws, rows, toks)
    dep, dep_wall = _dependence(whole, args, keys=[(r.prompt_ids, v) for r, v in zip(whole, values)], log_probs=log_p)
    cert = dependence.apply(cert, dep)
    notes = [f"exact law: {laws.kind} ({'every position' if laws.kind == 'markov' else f'the first {laws.n_positions} positions'}); "
             f"float32 numerics floor {laws.floor:.2g} (TV of the model's float32 law from its float64 law)"]
    if laws.n_positions < toks.shape[1]:
        notes.append(f"positions {laws.n_positions}..{toks.shape[1] - 1} have no enumerated law and are not tested")
    if early:
        notes.append(f"{early_stop_finding(records)}; the law tests use the {len(whole)} whole completions")
    info = {"dependence": dep.to_json(), "wall_dependence_s": dep_wall, "exact_law": laws.kind, "prompts": len(prompts), "completions_per_prompt": np.bincount(rows).tolist(),
            "numerics_floor": laws.floor, "window": laws.window, "wall_law_s": wall, "scorer_config": config.describe(),
            "levels": vars(levels), "family_alpha": settings.family_alpha, "power": settings.power,
            "max_pair_bound": _max_bound(table, "/pair"), "max_window_bound": _max_bound(table, "window[")}
    return SamplesVerdict("exact", table, cert, tuple(notes), info)


def _max_bound(table, key: str) -> float:
    rows = table[table["test"].str.contains(key, regex=False)]
    return float(rows["tv_upper"].max()) if len(rows) else float("nan")


def verify_samples(args) -> SamplesVerdict:
    """The verdict of the options ``args`` (checked by :func:`check_args`; scored, exact or two-sample mode), writing
    nothing (:func:`run` claims the report folder); ``info['prompts']``: the prompts of the sample file (the unit of
    the advice's completions per prompt)."""
    settings = _settings(args.alpha)
    records = read_samples(args.samples)
    _one_law(records, args.samples)
    _one_prompt_per_id(records, args.samples)
    if args.target is None or args.exact:
        _one_eos_policy(records, args.samples, args.eos_token_id)
    if args.target is not None and args.exact:
        res = exact(records, args.target, args, settings)
    elif args.target is not None:
        res = scored(records, args.target, args, settings)
    else:
        res = two_sample(records, args.baseline, args, settings)
    res = dataclasses.replace(res, info={**res.info, "prompts": len({r.prompt_ids for r in records}),
                                         "unseeded": all(r.controls.seed is None for r in records)})
    finding = early_stop_finding(records)
    if finding:  # meta.json's info and the console line of run()
        res.info["early_stops"] = {"completions": len(early_stopped(records)), "finding": finding}
    return res


def check_args(args) -> None:
    """Every option of ``args`` checked before any work (UsageError naming it); ``--target`` resolved: a shipped
    short name (``tiny``, ``exact-markov``, ...: :func:`harness.core.models.resolve_model`) -> its folder."""
    check_option(MIN_EPSILON <= args.epsilon < 1, "--epsilon", args.epsilon, f"a number in [{MIN_EPSILON:g}, 1) ({EPSILON_WHY})")
    if args.alpha is not None:
        check_option(0 < args.alpha < 1, "--alpha", args.alpha, "a number in (0, 1)")
    check_option(not args.exact or args.target is not None, "--exact", True, "given with --target (scored mode)")
    check_option(args.window >= 1, "--window", args.window, "an integer >= 1")
    check_option(args.logprob_tol > 0, "--logprob-tol", args.logprob_tol, "a number > 0")
    check_option(args.batch_size >= 1, "--batch-size", args.batch_size, "an integer >= 1")
    check_option(args.eos_token_id is None or args.eos_token_id >= 0, "--eos-token-id", args.eos_token_id,
                 "a token id (an integer >= 0)")
    check_option(args.vocab_size is None or args.vocab_size >= 1, "--vocab-size", args.vocab_size, "an integer >= 1")
    check_option(0 < _dep_alpha(args) < 1, "--dependence-alpha", _dep_alpha(args), "a number in (0, 1)")
    check_seed(args.seed)
    check_out(args.out)
    if args.target is not None:
        args.target = resolve_model(args.target, "--target")


def _more(path: Path, per_prompt: int) -> Path:
    """A new sample file beside ``path`` for ``per_prompt`` completions per prompt: ``spec.jsonl`` -> ``spec-n75.jsonl``."""
    return path.with_name(f"{path.stem}-n{per_prompt}{path.suffix}")


def advice(res: SamplesVerdict, args) -> list[str]:
    """What an inconclusive verdict asks of the user: the completions that would certify (the planner, under H0), per
    prompt, and the commands that draw them into new files (another seed: independent of the completions that were
    inconclusive) and verify those (none for another verdict)."""
    c = res.certificate
    if c.verdict != "inconclusive" or c.bounds is None or not c.bounds.needed:
        return []
    prompts = max(1, int(res.info.get("prompts") or 1))
    per_file = c.bounds.what.startswith("TV between")
    per_prompt = int(c.bounds.needed) if res.mode == "exact" else -(-int(c.bounds.needed) // prompts)
    new = {"--samples": _more(Path(args.samples), per_prompt)}
    if args.baseline is not None:
        new["--baseline"] = _more(Path(args.baseline), per_prompt)
    total = per_prompt * prompts
    lines = [f"to certify epsilon = {c.epsilon:g}: about {total:,} completions{' per file' if per_file else ''} "
             f"({per_prompt:,} per prompt over {prompts} prompt(s); have {c.completions:,}), planned under H0: draw "
             f"them into new files with the `python -m harness sample` options that wrote "
             + " and ".join(f"{Path(getattr(args, k)).name}" for k in ("samples", "baseline") if getattr(args, k)) +
             ", then verify those:"]
    lines += [f"  python -m harness sample <the options that wrote {getattr(args, o[2:])}, another --seed> "
              f"--n-per-prompt {per_prompt} --out {p}" for o, p in new.items()]
    lines.append("  " + rerun_command("verify-samples", getattr(args, "_argv", None), new))
    if res.info.get("unseeded"):
        lines.append("  (the records carry no seed: the new file must not repeat these completions; an engine that "
                     "cannot be seeded and restarts one stream in every process, as mistral.rs on CPU does, draws "
                     "them again first, so draw the planned size once, into one file, decided before looking)")
    return lines


def run(args) -> int:
    """0 certified, 1 lossy, 4 inconclusive; UsageError (2) for bad input, SamplerError (3) for a failed model."""
    check_args(args)
    claim_out(args, "verify-samples", ("samples",))  # --out, or runs/verify-samples/<name>-<hash>; locked
    res = verify_samples(args)
    todo = advice(res, args)
    write_report(args.out, res, args, todo)
    print(res.certificate.headline(), file=sys.stderr)
    if "early_stops" in res.info:  # the engine did not apply the requested controls: said in words
        print(f"engine finding (tests.csv: ending/early_stops): {res.info['early_stops']['finding']}", file=sys.stderr)
    if "dependence" in res.info:  # found or not: what the dependence stage saw, and what it would see at this size
        print(res.info["dependence"]["line"], file=sys.stderr)
    for line in todo:
        print(line, file=sys.stderr)
    print(f"report: {args.out}", file=sys.stderr)
    print(f"verify-samples: {headline(res.certificate.verdict)} (exit {res.exit_code})", file=sys.stderr)
    return res.exit_code
