"""Reference speculative samplers, toy and real model wrappers."""
from specimpl.sampling import SamplingConfig, warp, sample_categorical
from specimpl.model import LanguageModel, ModelState
from specimpl.speculative import (GenerationResult, SpecStats, SpeculativeSampler, speculative_generate,
                                  verify_block, verify_block_checked, PAD)
from specimpl.autoregressive import autoregressive_generate
from specimpl.ngram import NGramModel, random_ngram, noisy_draft, tempered_draft, disjoint_draft

__all__ = [
    "SamplingConfig", "warp", "sample_categorical", "LanguageModel", "ModelState", "GenerationResult",
    "SpecStats", "SpeculativeSampler", "speculative_generate", "verify_block", "verify_block_checked", "PAD", "autoregressive_generate",
    "NGramModel", "random_ngram", "noisy_draft", "tempered_draft", "disjoint_draft",
]
