/* hccl_api.h - C declarations of the HCCL subset cann-llm calls (CANN's hccl/hccl.h and
 * hccl/hccl_types.h).
 *
 * The real hccl_types.h sizes HcclRootInfo with `const uint32_t HCCL_ROOT_INFO_BYTES`, which is
 * not a constant expression in C, so the real headers compile as C++ only; a C project declares
 * what it uses itself, as with aclnn (aclnn_api.h beside this file). Names, enumerator values,
 * the RootInfo size and the prototypes are CANN's: scripts/check_headers.sh compiles this file
 * together with the real headers (torch-npu ships them under third_party/hccl/inc/hccl/), so any
 * drift is a compile error. acl_host implements every function declared here (src/hccl.c); the
 * toolkit build links libhccl.so.
 *
 * Two switches serve that check: CLM_HCCL_TYPES_ONLY declares the types alone (compared with the
 * real ones in a namespace), CLM_HCCL_PROTOTYPES_ONLY the prototypes alone (against the real
 * types, so that a differing prototype is a conflicting declaration).
 */
#ifndef CANN_LLM_HCCL_API_H
#define CANN_LLM_HCCL_API_H

#include <stdint.h>

#include "acl/acl_base.h" /* aclrtStream */

#ifdef __cplusplus
extern "C" {
#endif

#ifndef CLM_HCCL_PROTOTYPES_ONLY
/* The enumerators of 8.1.RC1, which later toolkits keep: they add HcclResult 23 and 24 (before
 * the HCCL_E_RESERVED sentinel, which moves, so it is not declared) and the HIF8 / FP8 data types
 * 14 to 17; none of those is declared here. */
typedef enum {
    HCCL_SUCCESS = 0,
    HCCL_E_PARA = 1,
    HCCL_E_PTR = 2,
    HCCL_E_MEMORY = 3,
    HCCL_E_INTERNAL = 4,
    HCCL_E_NOT_SUPPORT = 5,
    HCCL_E_NOT_FOUND = 6,
    HCCL_E_UNAVAIL = 7,
    HCCL_E_SYSCALL = 8,
    HCCL_E_TIMEOUT = 9,
    HCCL_E_OPEN_FILE_FAILURE = 10,
    HCCL_E_TCP_CONNECT = 11,
    HCCL_E_ROCE_CONNECT = 12,
    HCCL_E_TCP_TRANSFER = 13,
    HCCL_E_ROCE_TRANSFER = 14,
    HCCL_E_RUNTIME = 15,
    HCCL_E_DRV = 16,
    HCCL_E_PROFILING = 17,
    HCCL_E_CCE = 18,
    HCCL_E_NETWORK = 19,
    HCCL_E_AGAIN = 20,
    HCCL_E_REMOTE = 21,
    HCCL_E_SUSPENDING = 22
} HcclResult;

typedef void *HcclComm; /* a communicator */

typedef enum {
    HCCL_REDUCE_SUM = 0,
    HCCL_REDUCE_PROD = 1,
    HCCL_REDUCE_MAX = 2,
    HCCL_REDUCE_MIN = 3,
    HCCL_REDUCE_RESERVED = 255
} HcclReduceOp;

typedef enum {
    HCCL_DATA_TYPE_INT8 = 0,
    HCCL_DATA_TYPE_INT16 = 1,
    HCCL_DATA_TYPE_INT32 = 2,
    HCCL_DATA_TYPE_FP16 = 3,
    HCCL_DATA_TYPE_FP32 = 4,
    HCCL_DATA_TYPE_INT64 = 5,
    HCCL_DATA_TYPE_UINT64 = 6,
    HCCL_DATA_TYPE_UINT8 = 7,
    HCCL_DATA_TYPE_UINT16 = 8,
    HCCL_DATA_TYPE_UINT32 = 9,
    HCCL_DATA_TYPE_FP64 = 10,
    HCCL_DATA_TYPE_BFP16 = 11,
    HCCL_DATA_TYPE_INT128 = 12,
    HCCL_DATA_TYPE_RESERVED = 255
} HcclDataType;

#ifdef __cplusplus
const uint32_t HCCL_ROOT_INFO_BYTES = 4108;
#else
enum { HCCL_ROOT_INFO_BYTES = 4108 };
#endif

/* The blob the root rank makes (HcclGetRootInfo) and every rank passes to HcclCommInitRootInfo. */
typedef struct HcclRootInfoDef {
    char internal[HCCL_ROOT_INFO_BYTES];
} HcclRootInfo;
#endif /* !CLM_HCCL_PROTOTYPES_ONLY */

#ifndef CLM_HCCL_TYPES_ONLY
/* Root rank only, with its device set: fills the blob the other ranks receive out of band. */
extern HcclResult HcclGetRootInfo(HcclRootInfo *rootInfo);
/* Joins the communicator of rootInfo as `rank` of nRanks; returns once every rank has joined. */
extern HcclResult HcclCommInitRootInfo(uint32_t nRanks, const HcclRootInfo *rootInfo, uint32_t rank,
                                       HcclComm *comm);
/* The collectives and point-to-point calls are queued on `stream`: synchronize it before
 * reading the results. count, type (and op, root) must be equal on every rank. */
extern HcclResult HcclAllReduce(void *sendBuf, void *recvBuf, uint64_t count, HcclDataType dataType,
                                HcclReduceOp op, HcclComm comm, aclrtStream stream);
extern HcclResult HcclBroadcast(void *buf, uint64_t count, HcclDataType dataType, uint32_t root,
                                HcclComm comm, aclrtStream stream);
extern HcclResult HcclAllGather(void *sendBuf, void *recvBuf, uint64_t sendCount,
                                HcclDataType dataType, HcclComm comm, aclrtStream stream);
extern HcclResult HcclGetRankSize(HcclComm comm, uint32_t *rankSize);
extern HcclResult HcclGetRankId(HcclComm comm, uint32_t *rank);
extern HcclResult HcclSend(void *sendBuf, uint64_t count, HcclDataType dataType, uint32_t destRank,
                           HcclComm comm, aclrtStream stream);
extern HcclResult HcclRecv(void *recvBuf, uint64_t count, HcclDataType dataType, uint32_t srcRank,
                           HcclComm comm, aclrtStream stream);
extern HcclResult HcclCommDestroy(HcclComm comm);
extern const char *HcclGetErrorString(HcclResult code);
#endif /* !CLM_HCCL_TYPES_ONLY */

#ifdef __cplusplus
}
#endif

#endif /* CANN_LLM_HCCL_API_H */
