"""The transformers release specimpl.hf needs, checked before its cache classes are imported.

:data:`MIN_TRANSFORMERS` is also pyproject.toml's bound (tests/specimpl/test_hf_version.py checks that they agree).
"""
from __future__ import annotations

import os

__all__ = ["MIN_TRANSFORMERS", "require_transformers"]

# The first transformers release whose cache API RaggedLayer implements: CacheLayerMixin with the
# abstract get_max_length() and get_mask_sizes(query_length) (5.12 and earlier want
# get_max_cache_shape() and get_mask_sizes(cache_position)).  pyproject.toml declares the same bound
# (tests/specimpl/test_hf_version.py checks that they agree).
MIN_TRANSFORMERS = "5.13"


def require_transformers():
    """The ``transformers`` module, after checking that it is at least :data:`MIN_TRANSFORMERS`.

    Raises ``ImportError`` naming the installed and the required version (instead of a ``TypeError``
    about an abstract method deep inside the first forward call).
    """
    import transformers
    from packaging.version import Version
    have = transformers.__version__
    if Version(have) < Version(MIN_TRANSFORMERS):
        raise ImportError(f"`transformers` must be version >= {MIN_TRANSFORMERS} for specimpl.hf (its KV cache "
                          f"implements that release's cache-layer API); got {have!r} from "
                          f"{os.path.dirname(transformers.__file__)}; upgrade: pip install 'transformers>={MIN_TRANSFORMERS}'")
    return transformers
