"""Real serving engines, driven from the harness: model export to an engine's format and sample
producers that write the engine sample files (``specverify.samples/1``, see README).

    harness.samples.engines.gguf_export   a transformers Llama checkpoint -> GGUF (llama.cpp), float32
    harness.samples.engines.llama_cpp     samples from llama.cpp (llama-cpp-python: Python API and HTTP server)

Everything here is optional: ``pip install -e ".[llama]"`` (the ``gguf`` and ``llama-cpp-python``
packages); importing :mod:`harness.samples.engines` itself imports neither.
"""
