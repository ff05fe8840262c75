# The cffi extension cann_llm._cann_llm (API mode), included by the top-level CMakeLists.txt when
# scikit-build-core drives the build. runner/_ffi_build.py emits the C source from runner/_cdef.py;
# compiling it against cann_llm.h checks every declaration. The module, libcann_llm.so and (host
# build) libacl_host.so are installed side by side in the cann_llm package, found through $ORIGIN.

find_package(Python COMPONENTS Interpreter Development.Module REQUIRED)

set(CLM_FFI_SOURCE ${CMAKE_CURRENT_BINARY_DIR}/cffi/_cann_llm.c)
add_custom_command(
  OUTPUT ${CLM_FFI_SOURCE}
  COMMAND ${Python_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/runner/_ffi_build.py ${CLM_FFI_SOURCE}
  DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/runner/_ffi_build.py ${CMAKE_CURRENT_SOURCE_DIR}/runner/_cdef.py
          ${CMAKE_CURRENT_SOURCE_DIR}/backend_cann/include/cann_llm.h
  COMMENT "cffi: generating _cann_llm.c"
  VERBATIM)

Python_add_library(_cann_llm MODULE WITH_SOABI ${CLM_FFI_SOURCE})
target_link_libraries(_cann_llm PRIVATE cann_llm)
set_target_properties(_cann_llm PROPERTIES BUILD_RPATH "$ORIGIN" INSTALL_RPATH "$ORIGIN")

install(TARGETS _cann_llm cann_llm LIBRARY DESTINATION cann_llm)
if(TARGET acl_host)
  install(TARGETS acl_host LIBRARY DESTINATION cann_llm)
endif()

# ---- the Python sources -----------------------------------------------------------------------
# runner/ is the package cann_llm and server/ is cann_llm.server. scikit-build-core's wheel.packages
# cannot rename a directory, so they are installed here. An editable install (SKBUILD_STATE
# editable) installs instead a small __init__.py per package that points the package's __path__
# at the work tree, so edits to .py files are live and only C changes need a rebuild.
set(CLM_PY_PACKAGES "runner=cann_llm" "server=cann_llm/server")
foreach(entry ${CLM_PY_PACKAGES})
  string(REPLACE "=" ";" entry "${entry}")
  list(GET entry 0 source_dir)
  list(GET entry 1 package_dir)
  set(source_path "${CMAKE_CURRENT_SOURCE_DIR}/${source_dir}")
  if(SKBUILD_STATE STREQUAL "editable")
    set(shim "${CMAKE_CURRENT_BINARY_DIR}/editable/${package_dir}/__init__.py")
    file(WRITE "${shim}"
      "# Editable install of cann-llm: this package's sources are read from ${source_path}.\n"
      "import os as _os\n"
      "__path__ = ['${source_path}', _os.path.dirname(__file__)]\n"
      "__file__ = _os.path.join(__path__[0], '__init__.py')\n"
      "del _os\n"
      "with open(__file__, encoding='utf-8') as _source:\n"
      "    exec(compile(_source.read(), __file__, 'exec'))\n"
      "del _source\n")
    install(FILES "${shim}" DESTINATION "${package_dir}")
  else()
    install(DIRECTORY "${source_path}/" DESTINATION "${package_dir}"
      FILES_MATCHING PATTERN "*.py" PATTERN "py.typed" PATTERN "*.html"
      PATTERN "_ffi_build.py" EXCLUDE PATTERN "__pycache__" EXCLUDE)
  endif()
endforeach()
