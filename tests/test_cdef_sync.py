"""The committed cffi declarations (runner/_cdef.py) against the public header they come from."""

import importlib.util

from conftest import REPO_ROOT


def _gen_cdef():
    spec = importlib.util.spec_from_file_location("gen_cdef", REPO_ROOT / "scripts" / "gen_cdef.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_cdef_matches_header():
    gen = _gen_cdef()
    header = (REPO_ROOT / "backend_cann" / "include" / "cann_llm.h").read_text()
    committed = (REPO_ROOT / "runner" / "_cdef.py").read_text()
    assert committed == gen.render_module(header), \
        "runner/_cdef.py is stale: run `python scripts/gen_cdef.py` and commit the result"


def test_cdef_has_no_preprocessor_lines_but_integer_defines():
    gen = _gen_cdef()
    cdef, defines = gen.header_to_cdef((REPO_ROOT / "backend_cann/include/cann_llm.h").read_text())
    for line in cdef.splitlines():
        assert not line.lstrip().startswith("#") or line.startswith("#define CLM_"), line
    assert "extern" not in cdef and "/*" not in cdef and "__cplusplus" not in cdef
    assert defines["CLM_MAX_DIMS"] == 4


def test_generator_strips_wrappers():
    gen = _gen_cdef()
    header = ('#ifndef X_H\n#define X_H\n#include <stdint.h>\n#ifdef __cplusplus\nextern "C" {\n'
              '#endif\n#define CLM_ABI_VERSION 7 /* abi */\n#define CLM_NAME "x"\n'
              'int f(int a); // one\n#ifdef __cplusplus\n}\n#endif\n#endif\n')
    cdef, defines = gen.header_to_cdef(header)
    assert cdef == "#define CLM_ABI_VERSION 7\nint f(int a);\n"
    assert defines == {"CLM_ABI_VERSION": 7}


def test_installed_library_has_the_committed_abi(clm):
    from cann_llm import _cdef
    assert clm.lib.clm_abi_version() == _cdef.CLM_ABI_VERSION == clm.lib.CLM_ABI_VERSION


def test_abi_mismatch_is_a_clear_import_error():
    from conftest import run_python
    result = run_python("import cann_llm._cdef as cdef\n"
                        "cdef.CLM_ABI_VERSION += 1000\n"
                        "try:\n"
                        "    import cann_llm.backend\n"
                        "except ImportError as exc:\n"
                        "    print('IMPORT ERROR:', exc)\n")
    assert result.returncode == 0, result.stderr
    assert "IMPORT ERROR" in result.stdout and "ABI version" in result.stdout, result.stdout
