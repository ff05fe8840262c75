"""cann_llm.server: the OpenAI-compatible HTTP server (installed from server/).

Sits on top of cann_llm's public API (the engine owns the model; routes never call the backend).
Needs the `server` extra: pip install 'cann-llm[server]'. The application arrives in a later issue.
"""
