"""Verification algorithms by name, with their sampler and their exact round law.

Names: ``chain`` (token-level, the reference sampler :func:`specimpl.speculative_generate`), ``block``
(Sun et al. 2024, :func:`specimpl.block.block_generate`), ``tree<n>`` (n i.i.d. chains verified by
recursive rejection sampling, :func:`specimpl.tree.tree_generate`) and ``tree<n>-wor`` (the same tree
drawn without replacement); k is the depth.  :meth:`Algorithm.round_law` is the algorithm's exact
round law on an n-gram pair (:mod:`harness.laws.rounds`), :func:`acceptance_for` its expected
per-sequence SpecStats counts on a scenario's exact law (what the acceptance tests of
:func:`harness.verify.battery.plan_tests` compare a run against).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

import torch

from harness.laws.rounds import ExactRounds, RoundLaw, acceptance_law
from specimpl.errors import check_arg
from specimpl.sampling import SamplingConfig
from specimpl.tree import tree_generate
from specimpl.speculative import speculative_generate
from specimpl.block import block_generate

__all__ = ["Algorithm", "acceptance_for", "NAMES"]

NAMES = "'chain', 'block', 'tree<n>' or 'tree<n>-wor' (n >= 1)"
_NAME = re.compile(r"^(chain|block|tree(\d+)(-wor)?)$")
_ENUM_LIMIT = 4_000_000  # C V^k block enumeration (harness.laws.rounds.block_round_law's own limit)
_WOR_LIMIT = 200_000  # C V^(n-1) sequences of rejected siblings enumerated without replacement


@dataclass(frozen=True)
class Algorithm:
    """One verification algorithm: ``kind`` chain / block / tree, ``n`` chains, ``replacement``."""

    name: str
    kind: str
    n: int = 1
    replacement: bool = True

    @classmethod
    def parse(cls, name: str, argument: str = "algorithms") -> "Algorithm":
        m = _NAME.match(str(name))
        check_arg(m is not None and (m.group(2) is None or int(m.group(2)) >= 1), argument, name, NAMES)
        if m.group(2) is None:
            return cls(name, name)
        return cls(name, "tree", int(m.group(2)), m.group(3) is None)

    def generate(self, target, draft, prompts, *, k: int, max_new_tokens: int,
                 config: SamplingConfig = SamplingConfig(), generator: Optional[torch.Generator] = None,
                 eos_token_id: Optional[int] = None):
        """The algorithm's reference sampler (the sampler call signature)."""
        kw = dict(k=k, max_new_tokens=max_new_tokens, config=config, eos_token_id=eos_token_id, generator=generator)
        if self.kind == "chain":
            return speculative_generate(target, draft, prompts, **kw)
        if self.kind == "block":
            return block_generate(target, draft, prompts, **kw)
        return tree_generate(target, draft, prompts, n_drafts=self.n, replacement=self.replacement, **kw)

    def sampler(self):
        """:meth:`generate` as a plain function named after the algorithm (a run's sampler)."""

        def generate(target, draft, prompts, **kw):
            return self.generate(target, draft, prompts, **kw)

        generate.__name__ = generate.__qualname__ = f"{self.name.replace('-', '_')}_generate"
        generate.algorithm = self.name
        return generate

    def exact_law(self, rounds: ExactRounds, k: int, disjoint_draft: bool = False) -> tuple[Optional[RoundLaw], str]:
        """(round law, how it was obtained) or (None, why not) on an n-gram pair."""
        C, V = rounds.P.shape
        if self.kind == "chain":
            return rounds.chain(k), "recursion"
        if self.kind == "block":
            if C * V ** k <= _ENUM_LIMIT:
                return rounds.block(k), "enumeration"
            if disjoint_draft:  # w_i in {0, 1}: block verification makes the token-level decisions
                return rounds.chain(k), "token-level law (disjoint draft: block = token-level)"
            return None, f"C V^k = {C}*{V}^{k} blocks: too many to enumerate"
        if not self.replacement and C * V ** (self.n - 1) > _WOR_LIMIT:
            return None, f"C V^(n-1) = {C}*{V}^{self.n - 1} rejection sequences: too many to enumerate"
        return rounds.tree(k, n_drafts=self.n, replacement=self.replacement), "recursion"

    def round_law(self, rounds: ExactRounds, k: int) -> RoundLaw:
        """The exact round law; ValueError (naming the algorithm) where it cannot be computed."""
        law, how = self.exact_law(rounds, k)
        if law is None:
            raise ValueError(f"algorithm {self.name!r}: no exact round law ({how})")
        return law


def acceptance_for(algorithm: str, law, k: int):
    """Expected per-sequence SpecStats counts (:class:`harness.laws.ngram.AcceptanceLaw`) of ``algorithm`` on
    the scenario whose exact law is ``law`` (:class:`harness.laws.ngram.ExactLaw`): the reference sampler's
    own law for ``chain``, else the round law propagated over the generation."""
    algo = Algorithm.parse(algorithm, "algorithm")
    if algo.kind == "chain":
        return law.acceptance_law(k)
    rounds = ExactRounds.from_law(law)
    return acceptance_law(algo.round_law(rounds, k), rounds.start, rounds.n_tokens)
