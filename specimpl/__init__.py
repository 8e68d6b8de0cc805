"""Reference speculative samplers, toy and real model wrappers (never imports ``harness``).

    speculative     the algorithm: verify_block (accept/resample) and the generic round loop
    tabular         the same round loops on lookup tables for n-gram models (explicit opt-in)
    autoregressive  the target-only baseline
    result          what samplers return: GenerationResult, SpecStats, PAD
    inputs          argument checks and prompt batches shared by every sampler
    sampling        SamplingConfig, warp, sample_categorical, TableSampler
    model           the LanguageModel interface;  ngram: tabular toy models and exact laws
    hf, hf_cache    transformers causal LMs behind that interface, and their ragged KV cache
    hf_drafts       draft variants that dial alpha on a real pair;  hf_bugs: real-model bug controls
    hf_assisted     transformers' own decoders under the sampler call signature
    von_neumann     the von Neumann rejection sampler and its demo
    errors, timing  argument errors in scipy's manner; device syncs for honest phase timings
"""
from specimpl.sampling import SamplingConfig, warp, sample_categorical
from specimpl.model import LanguageModel, ModelState
from specimpl.result import GenerationResult, SpecStats, PAD
from specimpl.speculative import SpeculativeSampler, speculative_generate, verify_block, verify_block_checked
from specimpl.autoregressive import autoregressive_generate
from specimpl.ngram import NGramModel, random_ngram, noisy_draft, tempered_draft, disjoint_draft

__all__ = [
    "SamplingConfig", "warp", "sample_categorical", "LanguageModel", "ModelState", "GenerationResult",
    "SpecStats", "SpeculativeSampler", "speculative_generate", "verify_block", "verify_block_checked", "PAD", "autoregressive_generate",
    "NGramModel", "random_ngram", "noisy_draft", "tempered_draft", "disjoint_draft",
]
from specimpl.block import BlockSampler, block_generate, verify_block_jointly  # noqa: E402  beyond one chain (issue 12)
from specimpl.tree import TokenTree, TreeSampler, tree_generate, tree_generate_without_replacement, verify_tree  # noqa: E402
__all__ += ["BlockSampler", "block_generate", "verify_block_jointly", "TokenTree", "TreeSampler", "tree_generate",  # noqa: E402
            "tree_generate_without_replacement", "verify_tree"]
