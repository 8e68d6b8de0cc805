"""`python -m harness verify`: its options, their checks, and the run they start.

Bad arguments (an unknown scenario, a malformed ``--sampler``, too few draws, contradicting flags, a bad
scenario file) raise :class:`harness.core.errors.UsageError` before any work (exit 2, one line naming the
option or ``file: key``); otherwise :func:`harness.verify.pipeline.verify` runs and the exit status is 0 when
everything passed as its role requires (the samplers under test and the lossless controls *certified*, the
buggy controls lossy), 1 when it is lossy (a sampler under test lossy, a buggy control not caught, a lossless control
lossy), 4 when it is inconclusive (nothing lossy, but a run that must be certified is not: the console and
summary.md give the draws that would certify and the command that draws them), 3 when the sampler under test
failed (:func:`sampler_failure`); :mod:`harness.verify.outcome`.
"""
from __future__ import annotations

import argparse
import inspect
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional

from harness.laws.algorithms import NAMES, Algorithm
from harness.core.backends import Backend, add_backend_arguments, check_backend_options, make_backend
from harness.core.config import overlay, read_toml
from harness.core.schema import fail
from harness.core.errors import UsageError
from harness.core.verdict import exit_status, rerun_command
from harness.core.threads import with_threads
from harness.core.limits import MAX_SEQUENCES
from harness.core.options import check_option, check_out, check_seed, check_threads, check_unique
from harness.core.outdir import claim_out
from harness.verify.realmodel import REAL_MODEL_SCENARIO, RealModelSpec, load_real_model_spec
from harness.laws.scenarios import SCENARIO_DIR, load_scenario, load_settings
from harness.verify.epsilon import parse_epsilon_option
from harness.verify.pipeline import verify
from harness.verify.sampler import load_sampler, sampler_failure
from harness.verify.isolation import import_timeout
from harness.verify.until import until_certified

SEQUENCES_WHY = "sequences a run may draw at most: more would take days per scenario"

__all__ = ["add_arguments", "run", "fail_args", "with_epsilon", "check_common", "real_model_spec",
           "backend_of", "rerun"]


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--sampler", metavar="MODULE:FUNCTION",
                    help="sampler to verify, 'package.module:function' or 'path/to/file.py:function', with the "
                         "signature of specimpl.speculative_generate (default: the reference sampler, plus the "
                         "negative and lossless controls)")
    ap.add_argument("--algorithm", metavar="NAME",
                    help="verification algorithm of --sampler, whose exact acceptance law it is judged against: "
                         "chain, block, tree<n> or tree<n>-wor (default: the function's `algorithm` attribute, "
                         "else chain)")
    ap.add_argument("--scenario", action="append", metavar="NAME",
                    help="scenario file harness/configs/verify/NAME.toml (repeatable; default: the list in default.toml)")
    ap.add_argument("--draws", type=int, metavar="N", help="sequences per scenario (times its weight)")
    ap.add_argument("--control-draws", type=int, metavar="N", help="sequences per control")
    ap.add_argument("--seed", type=int, help="base seed (default: default.toml's)")
    ap.add_argument("--full", action="store_true", help="the large run (>= 100 M tokens)")
    ap.add_argument("--no-controls", action="store_true", help="skip the negative / lossless controls")
    ap.add_argument("--until-certified", type=int, metavar="BUDGET",
                    help="draw in rounds of doubling size (from --draws or default.toml's) until the run is certified "
                         "or lossy, up to BUDGET sequences per scenario (x its weight); each round gets half the "
                         "remaining false-alarm and confidence budget (harness/verify/until.py)")
    ap.add_argument("--no-sequential", action="store_true",
                    help="draw every run to its full size (no sequential stopping of clearly lossy runs; the "
                         "Holm family then gets all of family_alpha)")
    ap.add_argument("--stop-at-need", action="store_true",
                    help="the default: each exact-law run under test, and its real-model certificate on the exact "
                         "pair, stops at the first look where its certificate holds, its bounds valid at that "
                         "data-dependent size (a union over a fixed grid of looks from the planner's need up to 1.25 x "
                         "the run's size; harness/verify/stopping.py)")
    ap.add_argument("--fixed-n", action="store_true",
                    help="draw every run to its fixed size and read its certificate once there (the procedure "
                         "before issue 42; --until-certified implies it)")
    ap.add_argument("--no-real-model", action="store_true",
                    help="skip the real-model scenario (its certificate on the exact transformer pair, its "
                         "sequential PIT tests on the shipped tiny pair)")
    ap.add_argument("--real-model-sequences", type=int, metavar="N",
                    help="sequences of the sampler under test on the tiny pair (PIT tests) in the real-model "
                         "scenario (default: default.toml [real_model] n_sequences; the exact pair's certificate "
                         "draws [real_model.exact] n_sequences per prompt)")
    ap.add_argument("--out", type=Path, help="report folder (default: runs/verify/<sampler-scenarios>-<hash of the "
                                             "options>, a folder per set of options; the committed reference is "
                                             "written only by --out results/verify)")
    add_backend_arguments(ap, "processes drawing the exact-law shards (default: every core; 1: in this process, "
                              "except a --sampler's draws: on one worker process); the results do not depend on it")
    ap.add_argument("--sampler-timeout", type=float, metavar="S",
                    help="seconds one task of the sampler (a shard of draws, or a real-model run) may run on a worker "
                         "before it is stopped and the run ends in exit 3 (default: 600 s + 10 ms per token the task "
                         "draws; 0: no limit; not enforced on --backend ray); it also bounds the trial import of "
                         "--sampler's module (default 600 s)")
    add_common_arguments(ap)


def add_common_arguments(ap: argparse.ArgumentParser) -> None:
    """Options ``verify`` and ``pit`` share."""
    ap.add_argument("--scenario-dir", type=Path, default=SCENARIO_DIR, help="folder of scenario files")
    ap.add_argument("--epsilon", action="append", metavar="EPS|KEY=EPS[,KEY=EPS]",
                    help="tolerances of the certificate, over default.toml's and the scenario files': one number "
                         "is the per-position TV; or KEY=EPS with KEY position, pair, joint (TV) or real, real_pair, "
                         "real_joint (token TV of the real-model certificate on the exact pair: each position, "
                         "pair, window), comma-separated or repeated")
    ap.add_argument("--fresh", action="store_true", help="ignore draws saved by an interrupted run")
    ap.add_argument("--no-figures", action="store_true", help="write tables and summary only")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch and BLAS threads (default 1: the work is many small batched ops, and a second thread "
                         "on a busy 2-core machine slows them down several times)")


def backend_of(args) -> Backend:
    """The backend of the options (checked: UsageError naming the option)."""
    return make_backend(getattr(args, "backend", "local"), getattr(args, "workers", None), getattr(args, "address", None))


def fail_args(command: str, msg: str) -> int:
    print(f"python -m harness {command}: error: {' '.join(str(msg).split())}", file=sys.stderr)
    return 2


def check_common(args) -> None:
    """The options of :func:`add_common_arguments` (and ``--seed``, ``--out`` where present); UsageError."""
    check_threads(args.threads)
    check_backend_options(getattr(args, "backend", "local"), getattr(args, "workers", None),
                          getattr(args, "address", None))
    check_seed(getattr(args, "seed", None))
    check_out(getattr(args, "out", None))
    check_option(Path(args.scenario_dir).is_dir(), "--scenario-dir", str(args.scenario_dir), "an existing folder")


def with_epsilon(settings, args):
    """``settings`` with the command line's ``--epsilon`` laid over its tolerances (UsageError naming it)."""
    epsilon = parse_epsilon_option(getattr(args, "epsilon", None))
    return replace(settings, epsilon_override=epsilon) if epsilon else settings




@dataclass(frozen=True)
class _Choice:
    """What the options ask for."""

    settings: object
    sampler: Optional[Callable]
    scenarios: list
    real_model: Optional[RealModelSpec]
    algorithm: Optional[str] = None


def _choose(args) -> _Choice:
    """The options, checked; UsageError (naming the option or file: key) when they are bad."""
    check_common(args)
    check_unique(args.scenario, "--scenario")
    timeout = getattr(args, "sampler_timeout", None)
    check_option(timeout is None or (timeout >= 0 and timeout == timeout and timeout != float("inf")),
                 "--sampler-timeout", timeout, "a finite number of seconds >= 0 (0: no limit)")
    for name, v in (("--draws", args.draws), ("--control-draws", args.control_draws),
                    ("--real-model-sequences", args.real_model_sequences), ("--until-certified", args.until_certified)):
        check_option(v is None or 2 <= v <= MAX_SEQUENCES, name, v, f"an integer in [2, {MAX_SEQUENCES:,}] ({SEQUENCES_WHY})")
    settings = with_epsilon(load_settings(args.scenario_dir), args)
    if args.no_sequential:
        settings = replace(settings, sequential_alpha=0.0)
    if getattr(args, "stop_at_need", False):
        check_option(args.until_certified is None, "--stop-at-need", True, "not with --until-certified (it sizes "
                     "the run itself)")
        check_option(not getattr(args, "fixed_n", False), "--stop-at-need", True, "not with --fixed-n")
    if not getattr(args, "fixed_n", False) and args.until_certified is None:  # stop at the need: the default
        settings = replace(settings, stop_at_need=True)
    sampler = (load_sampler(args.sampler, trial=True, trial_timeout=import_timeout(timeout))  # in a child first
               if args.sampler else None)
    algorithm = _algorithm(getattr(args, "algorithm", None), sampler)
    names = args.scenario or list(settings.scenarios)
    rm_spec = real_model_spec(Path(args.scenario_dir) / "default.toml")
    explicit_rm = REAL_MODEL_SCENARIO in names
    names = [n for n in names if n != REAL_MODEL_SCENARIO]
    use_rm = explicit_rm if args.scenario else rm_spec.enabled
    if args.no_real_model:
        if explicit_rm:
            raise UsageError(f"`--scenario` {REAL_MODEL_SCENARIO!r} contradicts `--no-real-model`")
        use_rm = False
    scenarios = [load_scenario(n, args.scenario_dir) for n in names]
    _check_run_draws(args, settings, scenarios)
    inexact = [s.name for s in scenarios if not s.exact]
    if inexact:
        raise UsageError(f"`--scenario` {inexact} use a model builder without an exact law; this battery needs "
                         "builder 'ngram' (real-model pairs: python -m harness pit)")
    return _Choice(settings, sampler, scenarios, rm_spec if use_rm else None, algorithm)


def _check_run_draws(args, settings, scenarios) -> None:
    """Every run's sequences (the draws times a scenario's weight) at most MAX_SEQUENCES, before any work."""
    draws = args.draws or (settings.full_draws if args.full else settings.draws)
    option = "--draws" if args.draws else f"{Path(args.scenario_dir) / 'default.toml'}: `run.{'full_' * args.full}draws`"
    for sc in scenarios:
        w = sc.full_weight if args.full else sc.weight
        key = "full_weight" if args.full and "full_weight" in sc.raw else "weight"
        if MAX_SEQUENCES / w < 2:  # no --draws fits: the scenario's weight is what is wrong
            fail(str(Path(args.scenario_dir) / f"{sc.name}.toml"), key, w, f"a number in (0, {MAX_SEQUENCES / 2:g}] "
                 f"(a run draws --draws x {key} sequences, at least 2 and at most {MAX_SEQUENCES:,})")
        check_option(draws * w <= MAX_SEQUENCES, option, draws, f"at most {int(MAX_SEQUENCES / w):,} (scenario "
                     f"{sc.name!r} draws {w:g} x this; {MAX_SEQUENCES:,} {SEQUENCES_WHY})")


def _algorithm(name: Optional[str], sampler: Optional[Callable]) -> Optional[str]:
    """The algorithm the sampler under test is judged against: ``--algorithm``, else the function's
    ``algorithm`` attribute (None: chain); UsageError when it names none, or comes without --sampler."""
    if name is None and sampler is not None:
        name = getattr(inspect.unwrap(sampler), "algorithm", None)
        where = "the sampler's `algorithm` attribute"
    else:
        where = "`--algorithm`"
    if name is None:
        return None
    if sampler is None:
        raise UsageError("`--algorithm` needs `--sampler` (the reference runs already cover every algorithm)")
    try:
        return Algorithm.parse(name, "algorithm").name
    except ValueError:
        raise UsageError(f"{where} must be {NAMES}; got {name!r}") from None


def real_model_spec(path: Path, overrides: Optional[dict] = None) -> RealModelSpec:
    """The ``[real_model]`` table of default.toml ``path`` (with ``overrides`` laid over it), checked;
    UsageError naming the file and key."""
    raw = read_toml(path, "scenario file").get("real_model") or {}
    try:
        return load_real_model_spec(overlay(raw, overrides or {}))
    except ValueError as e:
        raise UsageError(f"{path}: {e}") from None


def run(args) -> int:
    """Exit status 0 (certified), 1 (lossy), 4 (inconclusive); UsageError (2) before any work, SamplerError (3)
    when the sampler under test failed (the report is written first)."""
    try:
        ch = _choose(args)
    except UsageError:
        raise
    except ValueError as e:  # a check elsewhere (scenario settings, real-model table) that names its key
        raise UsageError(str(e)) from None
    first = args.draws or (ch.settings.full_draws if args.full else ch.settings.draws)
    check_option(args.until_certified is None or args.until_certified >= first, "--until-certified",
                 args.until_certified, f"an integer >= the first round's {first} sequences (--draws)")
    out = claim_out(args, "verify", ("sampler", "scenario", "full"))  # --out, or runs/verify/<name>-<hash>; locked
    (Path(out) / "error.log").unlink(missing_ok=True)  # a failure log of an earlier run is not this run's
    with backend_of(args) as backend:
        if args.until_certified is not None:
            res = until_certified(lambda s, d, seed, controls, note: _verify(
                args, replace(ch, settings=s), out, backend, draws=d, seed=seed, controls=controls, note=note),
                ch.settings, first, args.until_certified, args.seed if args.seed is not None else ch.settings.seed)
        else:
            res = _verify(args, ch, out, backend)
    print(res.console, file=sys.stderr)
    failure = sampler_failure(res.verdicts, ch.sampler)
    if failure is not None:
        args.failure_dir = out
        raise failure
    return exit_status(res.verdict)


def rerun(command: str, args, seed: int) -> Callable[[dict], str]:
    """options -> this command line with them set and the next seed, ``seed + 1``: the rerun an inconclusive
    verdict suggests is drawn independently of the run that prompted it (with the same seed it would redraw most
    of the same sequences, and the size planned to certify 95 % of lossless runs would certify far fewer of the
    runs that were inconclusive); an ``--until-certified`` budget is kept at >= 4 x the new ``--draws``."""
    def line(options: dict) -> str:
        options = {**options, "--seed": (int(seed) + 1) % 2 ** 63}
        if getattr(args, "until_certified", None) is not None and "--draws" in options:
            options["--until-certified"] = max(args.until_certified, 4 * options["--draws"])
        return rerun_command(command, getattr(args, "_argv", None), options)
    return line


def _verify(args, ch: _Choice, out: Path, backend: Backend, *, draws: Optional[int] = None,
            seed: Optional[int] = None, controls: bool = True, note: Optional[dict] = None):
    return with_threads(args.threads, lambda: verify(
        sampler=ch.sampler, sampler_label=args.sampler or "reference", scenarios=ch.scenarios, settings=ch.settings,
        draws=args.draws if draws is None else draws, control_draws=args.control_draws,
        seed=args.seed if seed is None else seed, full=args.full, note=note,
        controls=controls and not args.sampler and not args.no_controls, out=out, fresh=args.fresh,
        figures=not args.no_figures,
        progress=not args.no_progress, scenario_dir=args.scenario_dir, real_model=ch.real_model,
        real_model_sequences=args.real_model_sequences, algorithm=ch.algorithm, backend=backend,
        rerun=rerun("verify", args, ch.settings.seed if args.seed is None else args.seed),
        sampler_timeout=getattr(args, "sampler_timeout", None)))
