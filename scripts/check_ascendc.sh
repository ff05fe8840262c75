#!/usr/bin/env bash
# AscendC kernel fidelity: compile the kernels of ascendc_ops/kernels against the real AscendC
# headers of a CANN toolkit in CPU-debug mode, the way CANN's own CPU-debug build (tikicpulib)
# compiles kernels for the 910B, with g++ -fsyntax-only.
#
#   scripts/check_ascendc.sh TOOLKIT_DIR
#
# TOOLKIT_DIR is a toolkit version directory (ASCEND_TOOLKIT_HOME, or an unpacked one such as
# .../ascend-toolkit/8.1.RC1; the public copy github.com/leideng/CANN-8.1.RC1 has one under
# Ascend/ascend-toolkit/8.1.RC1). It needs <arch>-linux/ascendc/include (basic_api, highlevel_api)
# and tools/tikicpulib/lib/include (the CPU-debug stubs).
#
# The defines and include order are those of tikicpulib's CMake target for the 910B family
# (tools/tikicpulib/lib/cmake/targets-tikicpulib.cmake, product ascend910B1): __CCE_AICORE__=220
# and __DAV_C220__ select the dav_c220 implementation headers; ASCENDC_CPU_DEBUG, __CCE_KT_TEST__
# and ASCENDC_DEBUG the CPU-debug stubs. __NPU_ARCH__=2201 is what the AscendC compiler defines for
# dav-c220 (the 8.1.RC1 headers do not test it; newer ones do). What this checks and what it
# cannot: docs/ascendc.md, "Checking against the real headers".
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
CXX=${CXX:-g++}
[ $# -eq 1 ] || { echo "usage: $0 TOOLKIT_DIR" >&2; exit 2; }
root=$(cd "$1" && pwd)

ascendc=""
for cand in "$root"/*-linux/ascendc/include "$root/ascendc/include" "$root/compiler/ascendc/include"; do
  if [ -f "$cand/basic_api/kernel_operator.h" ]; then ascendc=$cand; break; fi
done
[ -n "$ascendc" ] || { echo "check_ascendc: no ascendc/include/basic_api/kernel_operator.h under $root" >&2; exit 1; }
cpu_debug=""
for cand in "$root/tools/tikicpulib/lib/include" "$root"/*-linux/tools/tikicpulib/lib/include; do
  if [ -f "$cand/stub_def.h" ]; then cpu_debug=$cand; break; fi
done
[ -n "$cpu_debug" ] || { echo "check_ascendc: no tools/tikicpulib/lib/include/stub_def.h under $root" >&2; exit 1; }
runtime=""
for cand in "$root"/*-linux/include "$root/include"; do
  if [ -d "$cand" ]; then runtime=$cand; break; fi
done
echo "AscendC headers: $ascendc"
echo "CPU-debug stubs: $cpu_debug"

defines=(-D__CCE_AICORE__=220 -D__DAV_C220__ -D__NPU_ARCH__=2201 -D_GLIBCXX_USE_CXX11_ABI=0 -D__CCE_KT_TEST__=1
         -DASCENDC_CPU_DEBUG=1 -DASCENDC_DEBUG=1)
# the project's headers first; the toolkit's as system headers (their own warnings are not ours),
# in tikicpulib's order
includes=(-I"$here/ascendc_ops/include" -I"$here/ascendc_ops/kernels" -isystem "$cpu_debug")
[ -n "$runtime" ] && includes+=(-isystem "$runtime")
for dir in basic_api basic_api/interface basic_api/impl highlevel_api highlevel_api/lib highlevel_api/impl \
           highlevel_api/lib/matmul; do
  includes+=(-isystem "$ascendc/$dir")
done

status=0
for src in "$here"/ascendc_ops/kernels/*.cpp; do
  # the shim (ascendc_ops/host) must not be on the path: the real kernel_operator.h is
  if "$CXX" -std=c++17 -fsyntax-only -Wall -Wextra -Werror "${defines[@]}" "${includes[@]}" "$src"; then
    echo "ok: $(basename "$src") compiles against the real AscendC headers (dav_c220, CPU debug)"
  else
    echo "FAIL: $(basename "$src") does not compile against $ascendc" >&2
    status=1
  fi
done
exit $status
