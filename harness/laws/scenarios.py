"""Verification scenarios: small TOML files in ``harness/configs/verify/`` over one commented default.

``harness/configs/verify/default.toml`` holds the run settings (``[run]``: error budget, draws, seed, the
default scenario list) and the defaults every scenario inherits (``[scenario]``).  Each other file
``<name>.toml`` in that folder is one scenario: only the keys it changes.  A scenario is a model pair
(target and draft constructors with their parameters) × sampling controls × k × length × prompt (× EOS).

Model pairs are built by a *builder*: ``"ngram"`` (tabular toy models of :mod:`specimpl.ngram`, whose
exact law :class:`harness.laws.ngram.ExactLaw` gives) or ``"package.module:function"`` taking the scenario's
``[target]`` and ``[draft]`` tables and returning ``(target, draft)`` LanguageModels (real models: no
exact law, so the battery uses its target-scoring tests only).

Every file is checked against :data:`SCENARIO_SCHEMA` (and default.toml against :data:`DEFAULT_SCHEMA`)
before any work: an unknown key, a value of the wrong type or out of range raises
:class:`harness.core.errors.UsageError` naming the file and the dotted key (:mod:`harness.core.schema`); the
checks that need the merged scenario (EOS and prompt ids below the vocabulary size, the keys a draft
kind needs) name the scenario file, and so do the sizes (:mod:`harness.laws.sizes`: the exact law's tables
and the accumulators must fit in memory, checked before any table is built).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from harness.core.config import VERIFY_DIR, overlay, read_toml
from harness.core.errors import UsageError
from harness.core.limits import EPSILON_WHY, MAX_SEQUENCES, MIN_EPSILON
from harness.laws.ngram import ExactLaw, warp_mismatch, warp_support_mismatch
from harness.laws.sizes import check_scenario_sizes
from harness.core.schema import Field, boolean, fail, integer, number, one_of, text, validate
from specimpl.errors import check_arg
from specimpl.ngram import NGramModel, disjoint_draft, noisy_draft, random_ngram, tempered_draft
from specimpl.sampling import SamplingConfig

__all__ = ["Scenario", "scenario_law", "RunSettings", "SCENARIO_DIR", "load_settings", "load_scenario", "list_scenarios",
           "build_ngram_pair"]

SCENARIO_DIR = VERIFY_DIR
DEFAULT_FILE = "default.toml"

DRAFT_KINDS = ("same", "noisy", "tempered", "disjoint", "random")
_EPSILON = number(MIN_EPSILON, 1, allowed=f"a number in [{MIN_EPSILON:g}, 1] ({EPSILON_WHY})")  # a certificate's ε
DRAFT_NEEDS = {"noisy": "eps", "tempered": "tau"}  # the key a draft kind cannot do without
SEED = integer(0)

SCENARIO_SCHEMA = {
    "description": text(),
    "builder": text(lambda b: b == "ngram" or (b.count(":") == 1 and all(b.split(":"))),
                    "'ngram' or 'package.module:function'"),
    "k": integer(1), "max_new_tokens": integer(2), "joint_tokens": integer(0),
    "prompt": Field(
        lambda v: isinstance(v, list) and len(v) > 0 and all(type(t) is int and t >= 0 for t in v),
        "a non-empty list of token ids (integers >= 0)"),
    "eos_token_id": integer(-1, allowed="a token id (an integer >= 0), or -1 for no EOS"),
    "weight": number(0, lo_open=True), "full_weight": number(0, lo_open=True),
    **{f"{full}epsilon_{k}": _EPSILON  # certificate ε overrides (full_: with --full)
       for k in ("position", "pair", "joint") for full in ("", "full_")},
    "sampling": {"temperature": number(0, allowed="a finite number >= 0 (0 means greedy)"),
                 "top_k": integer(0, allowed="an integer >= 0 (0: no top-k)"),
                 "top_p": number(0, 1, lo_open=True), "greedy": boolean()},
    "target": {"kind": one_of("random"), "vocab_size": integer(2), "order": integer(1),
               "concentration": number(0, lo_open=True), "support": integer(0, allowed="an integer >= 0 (0: all)"),
               "seed": SEED},
    "draft": {"kind": one_of(*DRAFT_KINDS), "eps": number(0, 1), "tau": number(0, lo_open=True),
              "overlap": number(0, 1), "seed": SEED, "concentration": number(0, lo_open=True),
              "order": integer(1), "support": integer(0, allowed="an integer >= 0 (0: all)")},
}
RUN_SCHEMA = {
    "family_alpha": number(0, 1e-4, lo_open=True, allowed="a family-wise budget in (0, 1e-4]"),
    "power": Field(lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0.5 <= v < 1,
                   "a number in [0.5, 1)"),
    "tv_confidence": Field(lambda v: isinstance(v, float) and 0 < v < 1, "a number in (0, 1)"),
    **{key: integer(2, MAX_SEQUENCES) for key in ("draws", "full_draws", "control_draws", "full_control_draws")},
    "scenarios": Field(lambda v: isinstance(v, list) and all(isinstance(x, str) and x for x in v),
                       "a list of scenario names"),
    "seed": SEED, "min_chunks": integer(1), "max_chunk": integer(1), "pit_bins": integer(2), "logprob_max": integer(1),
    "von_neumann_proposals": integer(1), "full_von_neumann_proposals": integer(1),
    "control_epsilon_scale": number(1),  # control-sized runs are certified at this multiple of the tolerances
    # sequential stopping's share of family_alpha (harness.verify.sequential; 0: off); optional
    "sequential_alpha": number(0, 1e-4, allowed="a share of family_alpha in [0, family_alpha) (0: off)"),
    **{f"epsilon_{k}": _EPSILON for k in ("position", "pair", "joint", "real", "real_pair", "real_joint")},  # the certificate's
}
OPTIONAL_RUN_KEYS = ("sequential_alpha",)  # [run] keys a default.toml may leave out (0 then)
ALGORITHMS_SCHEMA = {  # [algorithms]: block / tree reference runs and controls (harness.verify.runs.AlgorithmRuns)
    **{key: integer(2) for key in ("draws", "full_draws", "control_draws", "full_control_draws")},
    "runs": Field(lambda v: isinstance(v, dict) and all(isinstance(x, list) and all(isinstance(n, str) and n for n in x)
                                                        for x in v.values()),
                  "a table: algorithm name = list of scenario names"),
    "control_scenario": text(),
}
DEFAULT_SCHEMA = {"run": RUN_SCHEMA, "scenario": SCENARIO_SCHEMA, "real_model": {},  # real_model: realmodel.py's
                  "algorithms": ALGORITHMS_SCHEMA}


@dataclass(frozen=True)
class RunSettings:
    """The ``[run]`` table of default.toml (see the comments there)."""

    family_alpha: float
    power: float
    tv_confidence: float
    draws: int
    full_draws: int
    control_draws: int
    full_control_draws: int
    scenarios: tuple
    seed: int
    min_chunks: int
    max_chunk: int
    pit_bins: int
    logprob_max: int
    von_neumann_proposals: int
    full_von_neumann_proposals: int
    raw: dict = field(default_factory=dict, compare=False)
    epsilon: dict = field(default_factory=dict)           # certificate tolerances: position, pair, joint, real, real_pair, real_joint
    epsilon_override: dict = field(default_factory=dict)  # the command line's (--epsilon), over everything
    control_epsilon_scale: float = 1.0  # lossless controls and block / tree reference runs: ε x this
    sequential_alpha: float = 0.0  # share of family_alpha spent on sequential stopping (0: none)
    stated_confidence: Optional[float] = None  # a round of --until-certified: the command's confidence through it
    full: bool = False  # the --full run: scenario files' full_epsilon_* apply
    stop_at_need: bool = False  # runs under test stop once certified (harness.verify.stopping); verify sets it unless --fixed-n


def read_defaults(directory: Optional[Path] = None) -> dict:
    """default.toml of ``directory``, checked against :data:`DEFAULT_SCHEMA` (UsageError naming file: key)."""
    d = Path(directory) if directory is not None else SCENARIO_DIR
    path = d / DEFAULT_FILE
    if not path.is_file():
        raise UsageError(f"`--scenario-dir` must be a folder holding {DEFAULT_FILE}; got {str(d)!r}")
    raw = read_toml(path, "scenario file")
    validate(raw, DEFAULT_SCHEMA, str(path), free=("real_model",) + _free(raw.get("scenario", {}), "scenario."))
    return raw


def _free(table: dict, where: str = "") -> tuple:
    """The tables a model builder other than 'ngram' reads itself (their keys are not checked here)."""
    return () if table.get("builder", "ngram") == "ngram" else (f"{where}target", f"{where}draft")


def load_settings(directory: Optional[Path] = None) -> RunSettings:
    d = Path(directory) if directory is not None else SCENARIO_DIR
    path = d / DEFAULT_FILE
    run = read_defaults(d).get("run", {})
    missing = [key for key in RUN_SCHEMA if key not in run and key not in OPTIONAL_RUN_KEYS]
    if missing:
        raise UsageError(f"{path}: [run] lacks the key(s) {missing}")
    return RunSettings(
        family_alpha=float(run["family_alpha"]), power=float(run["power"]),
        tv_confidence=float(run["tv_confidence"]), draws=int(run["draws"]), full_draws=int(run["full_draws"]),
        control_draws=int(run["control_draws"]), full_control_draws=int(run["full_control_draws"]),
        scenarios=tuple(run["scenarios"]), seed=int(run["seed"]), min_chunks=int(run["min_chunks"]),
        max_chunk=int(run["max_chunk"]), pit_bins=int(run["pit_bins"]), logprob_max=int(run["logprob_max"]),
        von_neumann_proposals=int(run["von_neumann_proposals"]),
        full_von_neumann_proposals=int(run["full_von_neumann_proposals"]), raw=run,
        epsilon={k: float(run[f"epsilon_{k}"]) for k in ("position", "pair", "joint", "real", "real_pair", "real_joint")},
        control_epsilon_scale=float(run.get("control_epsilon_scale", 1.0)),
        sequential_alpha=_sequential_alpha(path, run))


def _sequential_alpha(path: Path, run: dict) -> float:
    a = float(run.get("sequential_alpha", 0.0))
    if a >= float(run["family_alpha"]):
        raise UsageError(f"{path}: [run] sequential_alpha = {a!r} must be below family_alpha = {run['family_alpha']!r} "
                         "(it is a share of it; 0: no sequential stopping)")
    return a


@dataclass(frozen=True)
class Scenario:
    """One scenario, fully resolved (defaults merged)."""

    name: str
    description: str
    builder: str
    target: dict
    draft: dict
    config: SamplingConfig
    k: int
    max_new_tokens: int
    prompt: tuple
    eos_token_id: Optional[int]
    joint_tokens: int
    weight: float
    full_weight: float
    raw: dict = field(default_factory=dict, compare=False)

    @property
    def exact(self) -> bool:
        """Whether the exact target law is available (n-gram pairs)."""
        return self.builder == "ngram"

    def build(self):
        """(target, draft) LanguageModels."""
        if self.builder == "ngram":
            return build_ngram_pair(self.target, self.draft)
        mod, _, fn = self.builder.partition(":")
        check_arg(bool(mod) and bool(fn), f"{self.name}.builder", self.builder, "'ngram' or 'package.module:function'")
        return getattr(importlib.import_module(mod), fn)(dict(self.target), dict(self.draft))

    def describe(self) -> str:
        eos = f", eos={self.eos_token_id}" if self.eos_token_id is not None else ""
        return f"{self.config.describe()}, k={self.k}, N={self.max_new_tokens}{eos}"


def _target(spec: dict) -> NGramModel:
    kind = spec.get("kind", "random")
    check_arg(kind == "random", "target.kind", kind, "'random' (random_ngram)")
    support = spec.get("support", 0) or None
    return random_ngram(int(spec["vocab_size"]), int(spec["order"]), float(spec.get("concentration", 0.5)),
                        support=support, seed=int(spec.get("seed", 0)))


def build_ngram_pair(target_spec: dict, draft_spec: dict) -> tuple[NGramModel, NGramModel]:
    """n-gram target (``random``) and a draft at a controlled distance:
    ``same`` (q = p, alpha = 1), ``noisy`` (eps, seed, concentration), ``tempered`` (tau),
    ``disjoint`` (overlap, seed; alpha = overlap), ``random`` (an independent random table)."""
    t = _target(target_spec)
    kind = draft_spec.get("kind", "noisy")
    if kind == "same":
        d = NGramModel(t.table64.numpy(), t.order, name=f"{t.name}~same")
    elif kind == "noisy":
        d = noisy_draft(t, float(draft_spec["eps"]), seed=int(draft_spec.get("seed", 1)),
                        concentration=float(draft_spec.get("concentration", 1.0)))
    elif kind == "tempered":
        d = tempered_draft(t, float(draft_spec["tau"]))
    elif kind == "disjoint":
        d = disjoint_draft(t, float(draft_spec.get("overlap", 0.0)), seed=int(draft_spec.get("seed", 2)))
    elif kind == "random":
        d = _target({**draft_spec, "kind": "random", "vocab_size": t.vocab_size,
                     "order": int(draft_spec.get("order", t.order))})
    else:
        raise ValueError(f"`draft.kind` must be one of 'same', 'noisy', 'tempered', 'disjoint', 'random'; got {kind!r}")
    return t, d


def list_scenarios(directory: Optional[Path] = None) -> list[str]:
    d = Path(directory) if directory is not None else SCENARIO_DIR
    return sorted(p.stem for p in d.glob("*.toml") if p.name != DEFAULT_FILE)


def load_scenario(name: str, directory: Optional[Path] = None) -> Scenario:
    """Scenario ``name`` (file ``<name>.toml``) merged over default.toml's ``[scenario]``; both files are
    checked first (:data:`SCENARIO_SCHEMA`), then the merged scenario; UsageError naming file: key."""
    d = Path(directory) if directory is not None else SCENARIO_DIR
    path = d / f"{name}.toml"
    if not path.is_file():
        raise UsageError(f"`--scenario` must be one of {list_scenarios(d)}; got {name!r} (no file {path})")
    defaults = read_defaults(d)
    base = defaults.get("scenario", {})
    own = read_toml(path, "scenario file")
    validate(own, SCENARIO_SCHEMA, str(path), free=_free({**base, **own}))
    raw = overlay(base, own)
    _check_merged(raw, str(path))
    check_scenario_sizes(raw, own, defaults.get("run", {}), str(path))  # before any table is built
    try:
        sc = scenario_from_dict(name, raw)
        if sc.exact:
            sc.build()  # the n-gram pair's own checks (e.g. a disjoint draft needs support < vocab_size)
    except (KeyError, ValueError) as e:
        raise UsageError(f"{path}: {e if isinstance(e, ValueError) else f'lacks the key {e.args[0]!r}'}") from None
    return sc


def _check_merged(raw: dict, source: str) -> None:
    """The checks that need the scenario merged over the defaults (ids against the vocabulary size, the
    key a draft kind needs, J <= N)."""
    if raw.get("builder", "ngram") == "ngram":
        V = raw.get("target", {}).get("vocab_size")
        if V is None:
            fail(source, "target.vocab_size", None, "an integer >= 2 (the n-gram target's vocabulary size)")
        eos = raw.get("eos_token_id", -1)
        if not -1 <= eos < V:
            fail(source, "eos_token_id", eos, f"a token id in [0, vocab_size = {V}), or -1 for no EOS")
        prompt = raw.get("prompt", [0])
        if any(t >= V for t in prompt):
            fail(source, "prompt", prompt, f"a non-empty list of token ids in [0, vocab_size = {V})")
        support = raw["target"].get("support", 0)
        if support > V:
            fail(source, "target.support", support, f"an integer in [0, vocab_size = {V}] (0: all)")
        kind = raw.get("draft", {}).get("kind", "noisy")
        need = DRAFT_NEEDS.get(kind)
        if need and need not in raw.get("draft", {}):
            fail(source, f"draft.{need}", None, f"set for draft.kind = {kind!r}")
    J, N = raw.get("joint_tokens", 0), raw.get("max_new_tokens", 2)
    if J > N:
        fail(source, "joint_tokens", J, f"an integer in [0, max_new_tokens = {N}]")


def scenario_from_dict(name: str, raw: dict[str, Any]) -> Scenario:
    s = raw.get("sampling", {})
    top_k = int(s.get("top_k", 0)) or None
    config = SamplingConfig(temperature=float(s.get("temperature", 1.0)), top_k=top_k,
                            top_p=float(s.get("top_p", 1.0)), greedy=bool(s.get("greedy", False)))
    eos = raw.get("eos_token_id", -1)
    eos = None if eos is None or int(eos) < 0 else int(eos)
    sc = Scenario(name=name, description=str(raw.get("description", "")), builder=str(raw.get("builder", "ngram")),
                  target=dict(raw.get("target", {})), draft=dict(raw.get("draft", {})), config=config,
                  k=int(raw["k"]), max_new_tokens=int(raw["max_new_tokens"]),
                  prompt=tuple(int(t) for t in raw.get("prompt", [0])), eos_token_id=eos,
                  joint_tokens=int(raw.get("joint_tokens", 0)), weight=float(raw.get("weight", 1.0)),
                  full_weight=float(raw.get("full_weight", raw.get("weight", 1.0))), raw=raw)
    check_arg(sc.k >= 1, f"{name}.k", sc.k, "an integer >= 1")
    check_arg(sc.max_new_tokens >= 2, f"{name}.max_new_tokens", sc.max_new_tokens, "an integer >= 2")
    check_arg(0 <= sc.joint_tokens <= sc.max_new_tokens, f"{name}.joint_tokens", sc.joint_tokens,
              f"an integer in [0, max_new_tokens = {sc.max_new_tokens}]")
    check_arg(sc.weight > 0, f"{name}.weight", sc.weight, "a number > 0")
    check_arg(sc.full_weight > 0, f"{name}.full_weight", sc.full_weight, "a number > 0")
    return sc


# ------------------------------------------------------------------------------ exact-law scenarios
WARP_SUPPORT_TOL = 1e-9  # mass on tokens the float32 and float64 warps disagree about keeping (a tie flip)
WARP_TV_TOL = 1e-6       # TV between the float32 and float64 warped tables (float32 rounding alone: <= 6e-8 on
                         # every shipped scenario; the tightest certificate, 5e-4, is 500x above)


def scenario_law(sc) -> tuple[ExactLaw, tuple]:
    """The exact law of a scenario and its (target, draft) models; ValueError when there is none or the
    sampling controls sit on a float32 tie."""
    if not sc.exact:
        raise ValueError(f"scenario {sc.name!r} uses builder {sc.builder!r}; this battery needs an exact law "
                         "(builder 'ngram'); real-model pairs: python -m harness pit")
    models = sc.build()
    law = ExactLaw(models[0], models[1], list(sc.prompt), sc.max_new_tokens, sc.config, sc.eos_token_id)
    off = max(warp_support_mismatch(models[0], sc.config), warp_support_mismatch(models[1], sc.config))
    mismatch = max(warp_mismatch(models[0], sc.config), warp_mismatch(models[1], sc.config))
    if off > WARP_SUPPORT_TOL or mismatch > WARP_TV_TOL:
        raise ValueError(f"scenario {sc.name!r}: the sampling controls sit on a float32 tie (the float32 warp keeps "
                         f"other tokens than float64, mass {off:.3g} on them; TV {mismatch:.3g} between the tables); "
                         "change top_k / top_p / seed")
    return law, models
