#!/usr/bin/env bash
# Header fidelity: check the backend against real CANN headers.
#
#   scripts/check_headers.sh TOOLKIT_DIR      a full CANN toolkit tree (ASCEND_TOOLKIT_HOME, or an
#                                             unpacked version directory such as .../8.1.RC1)
#   scripts/check_headers.sh --runtime-only INCLUDE_DIR
#                                             a directory holding only the acl runtime headers
#                                             (acl/acl.h ...), e.g. torch_npu/include from the
#                                             torch-npu wheel
#
# Both modes compile every backend source (backend_cann/src) in toolkit mode against the real
# runtime headers, with implicit declarations as errors, and check the project's HCCL
# declarations (backend_cann/acl_host/include/aclnn_c/hccl_api.h) against the real hccl.h and
# hccl_types.h (enumerators, RootInfo size, prototypes). The full mode also compiles a C++ unit
# that includes the real aclnn headers together with the project's declarations
# (backend_cann/acl_host/include/aclnn_c/aclnn_api.h), so any
# prototype that differs from CANN's is a "conflicting declaration" compile error, and checks
# that every function the project declares exists in the real headers. The exception is
# aclnn_post81.h (ops newer than 8.1.RC1, declared weak): its functions may be missing from the
# toolkit (listed as such; the backend then keeps its composition), and those the toolkit has are
# compiled against their real prototypes like the rest.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
backend="$here/backend_cann"
decls_dir="$backend/acl_host/include/aclnn_c"   # the project's aclnn declarations
decls="$decls_dir/aclnn_api.h"                  # includes the per-family aclnn_*.h beside it
CC=${CC:-gcc}
CXX=${CXX:-g++}

runtime_only=0
if [ "${1:-}" = "--runtime-only" ]; then
  runtime_only=1
  shift
fi
[ $# -eq 1 ] || { echo "usage: $0 [--runtime-only] DIR" >&2; exit 2; }
root=$(cd "$1" && pwd)

# Locate the runtime include directory (the one holding acl/acl.h).
include_dir=""
for cand in "$root" "$root/include" "$root"/*-linux/include; do
  if [ -f "$cand/acl/acl.h" ]; then include_dir=$cand; break; fi
done
[ -n "$include_dir" ] || { echo "check_headers: no acl/acl.h under $root" >&2; exit 1; }
echo "runtime headers: $include_dir"

# 1. Every backend source compiles in toolkit mode against the real runtime headers.
status=0
for src in "$backend"/src/core/*.c "$backend"/src/cann/*.c; do
  if ! "$CC" -std=gnu11 -fsyntax-only -Wall -Werror=implicit-function-declaration \
      -Werror=incompatible-pointer-types -Werror=int-conversion \
      -DCLM_RUNTIME_NAME='"toolkit"' -I"$backend/include" -I"$backend/src" -I"$include_dir" \
      -I"$decls_dir" -I"$here/ascendc_ops/include" "$src"; then
    echo "FAIL: $src does not compile against $include_dir" >&2
    status=1
  fi
done
[ $status -eq 0 ] && echo "ok: backend sources compile against the real runtime headers"

# 2. The project's HCCL declarations (hccl_api.h) against the real hccl.h / hccl_types.h (C++
# only; the toolkit has them in include/hccl/, torch-npu in include/third_party/hccl/inc/hccl/):
# every enumerator the project declares exists in the real header with the same value and enum
# type, HcclRootInfo has the same size, every declared function exists there, and the prototypes,
# re-declared against the real types, must agree with the real ones (else a conflicting
# declaration of a C function is a compile error).
hccl_h=""
for cand in "$include_dir/hccl/hccl.h" "$include_dir/third_party/hccl/inc/hccl/hccl.h"; do
  if [ -f "$cand" ]; then hccl_h=$cand; break; fi
done
[ -n "$hccl_h" ] || { echo "check_headers: no hccl/hccl.h under $include_dir" >&2; exit 1; }
echo "hccl headers: $(dirname "$hccl_h")"
hccl_decls="$decls_dir/hccl_api.h"
hccl_unit=$(mktemp --suffix=.cpp)
trap 'rm -f "$hccl_unit"' EXIT
{
  echo '#include <type_traits>'
  echo "#include \"$hccl_h\""
  echo 'namespace clm {'
  echo '#define CLM_HCCL_TYPES_ONLY'
  echo "#include \"$hccl_decls\""
  echo '#undef CLM_HCCL_TYPES_ONLY'
  echo '}'
  # "typedef enum {" ... "} Name;": each enumerator NAME = value checked against the real one
  awk '/^typedef enum/ { inside = 1; n = 0; next }
       inside && /^} *[A-Za-z_]+;/ { name = $2; sub(";", "", name)
         for (i = 0; i < n; i++)
           printf "static_assert(static_cast<long long>(clm::%s) == static_cast<long long>(::%s) && std::is_same<decltype(::%s), ::%s>::value, \"%s differs from the real %s\");\n", e[i], e[i], e[i], name, e[i], name
         inside = 0; next }
       inside { line = $0; sub("/[*].*", "", line); k = split(line, parts, ",")
                for (i = 1; i <= k; i++) if (match(parts[i], /[A-Z][A-Z_0-9]+/))
                  e[n++] = substr(parts[i], RSTART, RLENGTH) }' "$hccl_decls"
  echo 'static_assert(sizeof(clm::HcclRootInfo) == sizeof(::HcclRootInfo), "HcclRootInfo size");'
  echo 'static_assert(clm::HCCL_ROOT_INFO_BYTES == ::HCCL_ROOT_INFO_BYTES, "HCCL_ROOT_INFO_BYTES");'
  echo 'static_assert(std::is_same<clm::HcclComm, ::HcclComm>::value, "HcclComm");'
  echo '#undef CANN_LLM_HCCL_API_H'
  echo '#define CLM_HCCL_PROTOTYPES_ONLY'
  echo "#include \"$hccl_decls\""
} > "$hccl_unit"
n_enum=$(grep -c '^static_assert(static_cast' "$hccl_unit" || true)
hccl_functions=$(grep -ohE '\b(Hccl[A-Za-z0-9_]+)\(' "$hccl_decls" | tr -d '(' | sort -u)
hccl_missing=0
for fn in $hccl_functions; do
  if ! grep -qE "\\b$fn\\(" "$hccl_h"; then
    echo "FAIL: $fn is declared in hccl_api.h but not in $hccl_h" >&2
    hccl_missing=1
  fi
done
if [ "$n_enum" -gt 0 ] && "$CXX" -std=c++17 -fsyntax-only -I"$include_dir" "$hccl_unit" && \
    [ $hccl_missing -eq 0 ]; then
  echo "ok: hccl_api.h matches the real HCCL headers ($n_enum enumerators," \
       "$(echo "$hccl_functions" | wc -w) functions, HcclRootInfo)"
else
  echo "FAIL: hccl_api.h disagrees with the real HCCL headers (see above)" >&2
  status=1
fi
rm -f "$hccl_unit"
[ $runtime_only -eq 1 ] && exit $status

# 3. The project's aclnn declarations against the real aclnn headers.
aclnnop_dir=""
for cand in "$include_dir/aclnnop" "$root/opp/built-in/op_impl/ai_core/tbe/op_api/include/aclnnop" \
            "$root"/*/opp/built-in/op_impl/ai_core/tbe/op_api/include/aclnnop; do
  if [ -d "$cand" ]; then aclnnop_dir=$cand; break; fi
done
[ -n "$aclnnop_dir" ] || { echo "check_headers: no aclnnop/ headers under $root" >&2; exit 1; }
[ -f "$include_dir/aclnn/acl_meta.h" ] || { echo "check_headers: no aclnn/acl_meta.h in $include_dir" >&2; exit 1; }
echo "aclnn op headers: $aclnnop_dir"

post81="$decls_dir/aclnn_post81.h"   # ops after 8.1.RC1, declared weak: may be missing
functions=$(ls "$decls_dir"/aclnn_*.h | grep -vxF "$post81" | xargs grep -ohE '\b(acl[A-Za-z0-9_]+)\(' |
            tr -d '(' | sort -u)
post81_functions=$(grep -ohE '\b(aclnn[A-Za-z0-9_]+)\(' "$post81" | tr -d '(' | sort -u)
unit=$(mktemp --suffix=.cpp)
trap 'rm -f "$unit"' EXIT
{
  echo '#include "aclnn/acl_meta.h"'
  echo '#include "aclnn/aclnn_base.h"'
  for fn in $functions $post81_functions; do
    case "$fn" in aclnn*) ;; *) continue ;; esac
    header=$(grep -lE "\\b$fn\\(" "$aclnnop_dir"/*.h 2>/dev/null | head -n 1 || true)
    if [ -n "$header" ]; then echo "#include \"aclnnop/$(basename "$header")\""; fi
  done | sort -u
  echo "#include \"$decls\""
  echo "#include \"$post81\""
} > "$unit"

missing=0
for fn in $functions; do
  if ! grep -qrE "\\b$fn\\(" "$include_dir/aclnn" "$include_dir/acl" "$aclnnop_dir"; then
    echo "FAIL: $fn is declared in aclnn_api.h but not in the real headers" >&2
    missing=1
  fi
done
[ $missing -eq 0 ] && echo "ok: all $(echo "$functions" | wc -w) declared functions exist in the real headers"
n_post81_found=0
for fn in $post81_functions; do
  if grep -qrE "\\b$fn\\(" "$include_dir/aclnn" "$aclnnop_dir"; then
    n_post81_found=$((n_post81_found + 1))
  else
    echo "note: $fn (aclnn_post81.h, weak) is not in this toolkit: the backend sees NULL and keeps its composition"
  fi
done
echo "ok: $n_post81_found of $(echo "$post81_functions" | wc -w) post-8.1.RC1 functions are in this toolkit" \
     "(their prototypes are compiled against the real ones below)"

if "$CXX" -std=c++17 -fsyntax-only -I"$include_dir" -I"$include_dir/aclnn" -I"$(dirname "$aclnnop_dir")" \
    -I"$aclnnop_dir" "$unit"; then
  echo "ok: aclnn_api.h prototypes match the real headers"
else
  echo "FAIL: aclnn_api.h disagrees with the real aclnn headers (see the compiler errors above)" >&2
  status=1
fi
exit $(( status | missing ))
