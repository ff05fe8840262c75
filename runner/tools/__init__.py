"""Developer tools on top of the backend: the op checker (opcheck, `cann-llm test-ops`), the
tensor diff (diff, `cann-llm diff`) and its dumps (dump).

The tools are libraries: they raise their own errors (ValueError and subclasses) and never import
the CLI; their commands and flags live in cann_llm.cli.
"""
