"""`python -m harness pit`: the real-model battery on its whole catalogue, through verify's family.

    python -m harness pit                                   # reference, every real-model bug, the lossless
                                                            # control(s), transformers' assisted generation
    python -m harness pit --only reference --only kv_not_rolled_back --n-sequences 256
    python -m harness pit --sampler mypkg.mymod:my_generate # a sampler of your own instead of the catalogue

The certificate: the sampler under test (and the controls sized in ``[real_model.exact.controls]``) also runs on
the exact transformer pair, judged against its enumerated law (:mod:`harness.verify.exactmodel`; ``--exact-sequences``);
as in ``verify``, the sampler under test's draw there stops at the need (:mod:`harness.verify.stopping`; ``--fixed-n``
draws its whole size).
The PIT tests: each sampler runs on the shipped tiny transformers pair with the settings of ``[real_model]`` in
``harness/configs/verify/default.toml`` (``--max-new-tokens``, ``--k``, ``--temperature`` override
them); its output is scored by the target and tested by the sequential randomized-PIT tests of
:func:`harness.verify.battery.plan_pit_value_tests`.  These are the tests of ``verify``'s real-model scenario,
drawn (:mod:`harness.verify.draw`), put in one family with a Holm adjustment at ``--alpha``
(:mod:`harness.verify.family`), judged (:mod:`harness.verify.verdicts`) and reported
(:mod:`harness.verify.report`) by the same code; only the catalogue is larger.

Roles: the reference and ``--sampler`` samplers and the lossless controls must pass, the bugs of
``harness.controls.hf.HF_BUGS`` must be caught, transformers' assisted generation is a *peer*: reported,
not judged.  Exit status 0 when every run is as its role requires, 1 lossy (a run under test lossy, a bug not
caught), 4 inconclusive (nothing lossy, a run not certified: the console gives the draws and the command that
would certify), 2 for bad arguments, 3 when the reference or a ``--sampler`` failed, 130 when interrupted
(:mod:`harness.core.errors`, :mod:`harness.core.verdict`).
The report goes to ``--out`` (default ``runs/pit/<name>-<hash>``; the committed one is ``results/hf/pit/``); an
interrupted run resumes from its finished draws.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from harness.verify.realmodel import RealModelSpec
from harness.laws.scenarios import load_settings
from harness.core.backends import Backend, SerialBackend
from harness.core.cputime import tree_cpu_s
from harness.core.errors import UsageError
from harness.core.verdict import exit_status
from harness.core.options import check_option, check_unique
from harness.core.outdir import claim_out
from harness.core.threads import with_threads
from harness.core.limits import MAX_SEQUENCES
from harness.verify.cli import (SEQUENCES_WHY, add_common_arguments, check_common, real_model_spec, rerun,
                                 with_epsilon)
from harness.verify.draw import RunState, draw_all
from harness.verify.family import family_config
from harness.verify.pipeline import VerifyResult, conclude, real_model_config
from harness.verify.runs import UNDER_TEST, RealRun, RunSet, real_model_seed
from harness.verify.sampler import load_sampler, sampler_failure
from harness.controls import hf as hf_bugs
from specimpl.speculative import speculative_generate
from specimpl.hf import tiny_pair_positions
from specimpl.sampling import MIN_TEMPERATURE
from specimpl.hf_assisted import hf_assisted_generate

__all__ = ["add_arguments", "run", "catalogue", "pit"]

PEER = "hf_assisted"


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--sampler", action="append", metavar="MODULE:FUNCTION",
                    help="sampler to test instead of the catalogue, 'package.module:function' or "
                         "'path/to/file.py:function' (repeatable)")
    ap.add_argument("--only", action="append", metavar="NAME", help="catalogue names to run (repeatable)")
    ap.add_argument("--n-sequences", type=int, default=1600, help="sequences of the reference or --sampler (x T tokens)")
    ap.add_argument("--bug-sequences", type=int, default=256, help="sequences per real-model bug")
    ap.add_argument("--control-sequences", type=int, default=512, help="sequences per lossless control")
    ap.add_argument("--peer-sequences", type=int, default=512, help="sequences of HF assisted generation (batch 1)")
    ap.add_argument("--no-peer", action="store_true", help="skip transformers' assisted generation")
    ap.add_argument("--exact-sequences", type=int, metavar="N",
                    help="sequences per prompt of the reference or --sampler on the exact transformer pair, the "
                         "certificate (default: default.toml's [real_model.exact] n_sequences; 0: none, so no "
                         "certificate: inconclusive); the controls draw their [real_model.exact.controls] sizes")
    ap.add_argument("--fixed-n", action="store_true",
                    help="draw the exact-pair certificate to its fixed size and read it once there (default: it stops "
                         "at the first look where it holds, up to 1.25 x that size; harness/verify/stopping.py)")
    ap.add_argument("--max-new-tokens", type=int, help="T, tokens per sequence (default: default.toml's)")
    ap.add_argument("--k", type=int, help="draft tokens per round (default: default.toml's)")
    ap.add_argument("--temperature", type=float, help="sampling temperature (default: default.toml's)")
    ap.add_argument("--seed", type=int, help="base seed (default: default.toml's)")
    ap.add_argument("--alpha", type=float, help="family-wise false-alarm budget (default: default.toml's)")
    ap.add_argument("--out", type=Path, default=None,
                    help="report folder (default: runs/pit/<name>-<hash of the options>; the committed reference "
                         "is written only by --out results/hf/pit)")
    add_common_arguments(ap)


def catalogue(include_peer: bool) -> dict[str, tuple[str, Callable]]:
    """name -> (role, sampler): the reference sampler, the lossless controls and the bugs of
    :mod:`harness.controls.hf`, and (``include_peer``) transformers' assisted generation."""
    cat = {"reference": ("reference", speculative_generate)}
    cat.update({n: ("lossless", f) for n, f in hf_bugs.HF_LOSSLESS_CONTROLS.items()})
    cat.update({n: ("lossy", f) for n, f in hf_bugs.HF_BUGS.items()})
    if include_peer:
        cat[PEER] = ("peer", hf_assisted_generate)
    return cat


def _sequences(role: str, args) -> int:
    return {"lossy": args.bug_sequences, "lossless": args.control_sequences,
            "peer": args.peer_sequences}.get(role, args.n_sequences)


def _entries(args) -> list[tuple[str, str, Callable, int]]:
    """(name, role, sampler, sequences) per run the options ask for; ValueError naming the option."""
    if args.sampler:
        todo = {s: ("sampler", load_sampler(s, trial=True)) for s in args.sampler}  # imported in a child first
    else:
        todo = catalogue(not args.no_peer)
    if args.only:
        unknown = sorted(set(args.only) - set(todo))
        if unknown:
            raise ValueError(f"`--only` must name runs among {sorted(todo)}; got {unknown}")
        todo = {n: v for n, v in todo.items() if n in args.only}
    for name in ("--n-sequences", "--bug-sequences", "--control-sequences", "--peer-sequences"):
        v = getattr(args, name[2:].replace("-", "_"))
        if not 2 <= v <= MAX_SEQUENCES:  # as verify's --real-model-sequences (probe 47: 10^14 ran until killed)
            raise ValueError(f"`{name}` must be an integer in [2, {MAX_SEQUENCES:,}] ({SEQUENCES_WHY}); got {v!r}")
    return [(n, role, fn, _sequences(role, args)) for n, (role, fn) in todo.items()]


def _check_positions(spec: RealModelSpec) -> None:
    """T fits the shipped pair's positions with the longest prompt and a scored block (probe 47:
    --max-new-tokens 10^9 was a MemoryError blamed on the sampler, exit 3)."""
    mpe = tiny_pair_positions()
    check_option(spec.k <= 64, "--k", spec.k, "an integer in [1, 64] (draft tokens per round)")
    most = mpe - max(spec.prompt_lengths) - spec.k - 1
    check_option(spec.max_new_tokens <= most, "--max-new-tokens", spec.max_new_tokens,
                 f"an integer in [2, {most:,}] (the tiny pair's {mpe:,} positions = prompts up to "
                 f"{max(spec.prompt_lengths)} + T + k {spec.k} + 1)")


def _spec(args) -> RealModelSpec:
    """default.toml's ``[real_model]`` with the options' overrides (checked as that table is)."""
    t = args.temperature  # the options are checked here, so that an error names the option, not default.toml
    check_option(t is None or t == 0 or (math.isfinite(t) and t >= MIN_TEMPERATURE), "--temperature", t,
                 f"0 (greedy) or a finite number >= {MIN_TEMPERATURE:g} (below that, logits / temperature can "
                 "overflow float32)")
    check_option(args.k is None or args.k >= 1, "--k", args.k, "an integer in [1, 64] (draft tokens per round)")
    check_option(args.max_new_tokens is None or args.max_new_tokens >= 2, "--max-new-tokens", args.max_new_tokens,
                 "an integer >= 2 (tokens per sequence)")
    over = {k: v for k, v in (("max_new_tokens", args.max_new_tokens), ("k", args.k)) if v is not None}
    if args.temperature is not None:
        over["sampling"] = {"temperature": args.temperature}
    return real_model_spec(Path(args.scenario_dir) / "default.toml", over)


def _exact_n(spec: RealModelSpec, name: str, role: str, exact_sequences: Optional[int]) -> int:
    """Sequences per prompt of one run on the exact pair: the sampler under test ``exact_sequences`` (None: the
    spec's), a control its ``[real_model.exact.controls]`` size (0 if none), the peer none."""
    if spec.exact is None or role == "peer":
        return 0
    if role in UNDER_TEST:
        return spec.exact.n_sequences if exact_sequences is None else int(exact_sequences)
    return int(spec.exact.controls_of().get(name, 0))


def pit(entries, spec: RealModelSpec, settings, *, seed: Optional[int] = None, out: Optional[Path] = None,
        fresh: bool = False, figures: bool = True, progress: bool = True,
        exact_sequences: Optional[int] = None, rerun: Optional[Callable[[dict], str]] = None,
        backend: Optional[Backend] = None) -> VerifyResult:
    """Draw every (name, role, sampler, sequences) of ``entries`` on the real pair with ``spec`` (and, for the
    certificate, on the exact pair: ``exact_sequences`` per prompt for the sampler under test, see
    :func:`_exact_n`), and test, judge and report them as one family (``settings``: default.toml's run settings)."""
    t_start, c_start = time.perf_counter(), tree_cpu_s()
    seed = settings.seed if seed is None else seed
    rs = RunSet(real_model=spec, real_runs=[
        RealRun(name, role, fn, n, real_model_seed(seed, name), batch_size=1 if name == PEER else None,
                exact_n=_exact_n(spec, name, role, exact_sequences))
        for name, role, fn, n in entries])
    state = RunState(out, fresh)
    draw_all(rs, seed, settings, state, progress, backend)

    tested = ", ".join(rr.label for rr in rs.real_runs if rr.role in UNDER_TEST) or "real-model controls"

    def config(levels) -> dict:
        return {"command": "pit", "sampler": tested, **family_config(settings, levels),
                "real_model": real_model_config(rs)}

    return conclude(rs, settings, config, seed=seed, out=out, figures=figures, state=state, t_start=t_start,
                    t_drawn=time.perf_counter(), rerun=rerun, c_start=c_start)


def run(args) -> int:
    """Exit 0 / 1 / 4 (certified / lossy / inconclusive, :mod:`harness.verify.outcome`); UsageError (2) before any work; SamplerError (3) when the reference
    or a ``--sampler`` failed (the report is written first)."""
    check_common(args)
    check_unique(args.sampler, "--sampler")
    check_unique(args.only, "--only")
    if args.alpha is not None:
        check_option(0 < args.alpha < 1, "--alpha", args.alpha, "a number in (0, 1)")
    settings = dataclasses.replace(with_epsilon(load_settings(args.scenario_dir), args), stop_at_need=not args.fixed_n)
    if args.alpha is not None:
        settings = dataclasses.replace(settings, family_alpha=args.alpha)
    try:
        entries = _entries(args)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.exact_sequences is not None:
        check_option(0 <= args.exact_sequences <= MAX_SEQUENCES, "--exact-sequences", args.exact_sequences,
                     f"an integer in [0, {MAX_SEQUENCES:,}] ({SEQUENCES_WHY})")
    spec = _spec(args)
    _check_positions(spec)
    claim_out(args, "pit", ("sampler", "only"))  # --out, or runs/pit/<name>-<hash>; locked
    (Path(args.out) / "error.log").unlink(missing_ok=True)  # a failure log of an earlier run is not this run's
    res = with_threads(args.threads, lambda: pit(entries, spec, settings, seed=args.seed, out=args.out,
                                                 fresh=args.fresh, figures=not args.no_figures,
                                                 progress=not args.no_progress,
                                                 exact_sequences=args.exact_sequences,
                                                 backend=SerialBackend(isolate_plugins=True),  # a --sampler on
                                                 # a worker process: it never ends this one (its exit status)
                                                 rerun=rerun("pit", args, settings.seed if args.seed is None
                                                             else args.seed)))
    print(res.console, file=sys.stderr)
    samplers = [fn for _, role, fn, _ in entries if role in UNDER_TEST]
    failure = sampler_failure(res.verdicts, samplers[0] if len(samplers) == 1 else None)
    if failure is not None:
        raise failure
    return exit_status(res.verdict)
