"""The tree interface of any model: :func:`as_tree_model` picks the adapter for its kind.

An n-gram model scores a whole tree in one call (:class:`specimpl.tree_models.NGramTreeModel`), a transformers
model with a tree attention mask (:class:`specimpl.hf_tree.HFTreeModel`), any other
:class:`specimpl.model.LanguageModel` one path at a time (:class:`specimpl.tree_models.SequentialTreeModel`).
"""
from __future__ import annotations

from specimpl.errors import check_arg
from specimpl.hf import HFModel  # torch only: transformers is imported when a model is loaded
from specimpl.hf_tree import HFTreeModel
from specimpl.model import LanguageModel
from specimpl.ngram import NGramModel
from specimpl.tree_models import NGramTreeModel, SequentialTreeModel

__all__ = ["as_tree_model"]


def as_tree_model(model: LanguageModel) -> LanguageModel:
    """``model`` itself if it has ``forward_tree`` and ``commit_path``, else the adapter for its kind."""
    if callable(getattr(model, "forward_tree", None)) and callable(getattr(model, "commit_path", None)):
        return model
    check_arg(isinstance(model, LanguageModel), "model", type(model).__name__, "a specimpl.LanguageModel")
    if isinstance(model, NGramModel):
        return NGramTreeModel(model)
    if isinstance(model, HFModel):
        return HFTreeModel(model)
    return SequentialTreeModel(model)
