"""cann_llm: GGUF language models on Ascend NPUs (or the acl_host runtime) from Python.

`import cann_llm` stays cheap: the compiled backend (cann_llm.backend, the only module that
touches the cffi extension) loads on first use of a name it provides, so `cann-llm --version`
works even where the native libraries cannot load.
"""

import os as _os

__version__ = "0.1.0"

# numpy's OpenBLAS starts a thread per core at import, and each spins ~2^28 cycles waiting for
# work before it sleeps, again after every BLAS call: ~55 ms of CPU per thread after the import
# (the kernels here do not use BLAS; only the CPU reference does). Idle BLAS threads sleep at
# once unless the user chose otherwise; it only takes effect when numpy is not imported yet.
_os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

_BACKEND_NAMES = (
    "Backend", "Buffer", "BufferType", "CannError", "Context", "Device", "Event", "Graph",
    "Op", "Registry", "Status", "Tensor", "TensorType", "check", "runtime_name",
)

__all__ = ["__version__", "load", "Model", "ContextFullError", "NonFiniteLogitsError",
           "Engine", "SamplingParams", *_BACKEND_NAMES]


def __getattr__(name):
    if name in ("load", "Model", "ContextFullError", "NonFiniteLogitsError"):
        from . import model
        return getattr(model, name)
    if name == "Engine":
        from . import engine
        return engine.Engine
    if name == "SamplingParams":
        from . import sampler
        return sampler.SamplingParams
    if name in _BACKEND_NAMES:
        from . import backend
        return getattr(backend, name)
    raise AttributeError(f"module 'cann_llm' has no attribute {name!r}")
