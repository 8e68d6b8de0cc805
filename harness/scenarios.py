"""Verification scenarios: small TOML files in ``harness/experiments/verify/`` over one commented default.

``harness/experiments/verify/default.toml`` holds the run settings (``[run]``: error budget, draws, seed, the
default scenario list) and the defaults every scenario inherits (``[scenario]``).  Each other file
``<name>.toml`` in that folder is one scenario: only the keys it changes.  A scenario is a model pair
(target and draft constructors with their parameters) × sampling controls × k × length × prompt (× EOS).

Model pairs are built by a *builder*: ``"ngram"`` (tabular toy models of :mod:`specimpl.ngram`, whose
exact law :class:`harness.exact.ExactLaw` gives) or ``"package.module:function"`` taking the scenario's
``[target]`` and ``[draft]`` tables and returning ``(target, draft)`` LanguageModels (real models: no
exact law, so the battery uses its target-scoring tests only).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from harness.config import VERIFY_DIR, overlay, read_toml
from specimpl.errors import check_arg
from specimpl.ngram import NGramModel, disjoint_draft, noisy_draft, random_ngram, tempered_draft
from specimpl.sampling import SamplingConfig

__all__ = ["Scenario", "RunSettings", "SCENARIO_DIR", "load_settings", "load_scenario", "list_scenarios",
           "build_ngram_pair"]

SCENARIO_DIR = VERIFY_DIR
DEFAULT_FILE = "default.toml"


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


def load_settings(directory: Optional[Path] = None) -> RunSettings:
    d = Path(directory) if directory is not None else SCENARIO_DIR
    path = d / DEFAULT_FILE
    check_arg(path.is_file(), "scenario directory", str(d), f"a folder holding {DEFAULT_FILE}")
    run = read_toml(path, "scenario file").get("run", {})
    try:
        s = RunSettings(
            family_alpha=float(run["family_alpha"]), power=float(run["power"]),
            tv_confidence=float(run["tv_confidence"]), draws=int(run["draws"]), full_draws=int(run["full_draws"]),
            control_draws=int(run["control_draws"]), full_control_draws=int(run["full_control_draws"]),
            scenarios=tuple(run["scenarios"]), seed=int(run["seed"]), min_chunks=int(run["min_chunks"]),
            max_chunk=int(run["max_chunk"]), pit_bins=int(run["pit_bins"]), logprob_max=int(run["logprob_max"]),
            von_neumann_proposals=int(run["von_neumann_proposals"]),
            full_von_neumann_proposals=int(run["full_von_neumann_proposals"]), raw=run)
    except KeyError as e:
        raise ValueError(f"{path}: [run] lacks the key {e.args[0]!r}") from None
    check_arg(0 < s.family_alpha <= 1e-4, "family_alpha", s.family_alpha, "a family-wise budget in (0, 1e-4]")
    check_arg(0.5 <= s.power < 1, "power", s.power, "a number in [0.5, 1)")
    return s


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
    """Scenario ``name`` (file ``<name>.toml``) merged over default.toml's ``[scenario]``."""
    d = Path(directory) if directory is not None else SCENARIO_DIR
    path = d / f"{name}.toml"
    if not path.is_file():
        raise ValueError(f"`--scenario` must be one of {list_scenarios(d)}; got {name!r} (no file {path})")
    base = read_toml(d / DEFAULT_FILE, "scenario file").get("scenario", {})
    raw = overlay(base, read_toml(path, "scenario file"))  # not strict (yet): unknown keys are kept
    return scenario_from_dict(name, raw)


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
