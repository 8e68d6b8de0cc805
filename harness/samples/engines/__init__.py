"""Real serving engines, driven from the harness: model export to an engine's format and sample
producers that write the engine sample files (``specverify.samples/1``, see README).

    harness.samples.engines.gguf_export   a transformers Llama checkpoint -> GGUF (llama.cpp), float32
    harness.samples.engines.llama_cpp     samples from llama.cpp (llama-cpp-python: Python API and HTTP server)
    harness.samples.engines.openvino_export   a transformers checkpoint -> OpenVINO IR (optimum-intel, in the
                                              engine's venv), cached by content
    harness.samples.engines.openvino_engine   samples from OpenVINO GenAI (openvino_worker.py runs in its venv)

Everything here is optional: ``pip install -e ".[llama]"`` (the ``gguf`` and ``llama-cpp-python``
packages); importing :mod:`harness.samples.engines` itself imports neither.
"""
