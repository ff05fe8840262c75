"""cffi builder for cann_llm._cann_llm, the API-mode extension over libcann_llm.

runner/cffi_module.cmake runs this at build time to emit the extension's C source; CMake then
compiles it against backend_cann/include/cann_llm.h, so any drift between the generated cdef
(runner/_cdef.py) and the real header fails the build. Usage: _ffi_build.py OUTPUT.c
"""

import importlib.util
import pathlib
import sys

import cffi

_HERE = pathlib.Path(__file__).resolve().parent


def _load_cdef_module():
    """Import runner/_cdef.py by path: the cann_llm package is not importable at build time."""
    spec = importlib.util.spec_from_file_location("_cann_llm_cdef", _HERE / "_cdef.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ffibuilder = cffi.FFI()
ffibuilder.cdef(_load_cdef_module().CDEF)
ffibuilder.set_source("cann_llm._cann_llm", '#include "cann_llm.h"')


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} OUTPUT.c", file=sys.stderr)
        return 2
    output = pathlib.Path(argv[1])
    output.parent.mkdir(parents=True, exist_ok=True)
    ffibuilder.emit_c_code(str(output))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
