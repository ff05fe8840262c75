/* ah_tensor.h - the aclnn descriptors (aclTensor, aclScalar, arrays, lists), the op executor and
 * the helpers every aclnn op is built from.
 *
 * An op is three small pieces:
 *   - phase 1 (aclnnXxxGetWorkspaceSize): check the arguments with ah_check_* (each failure sets
 *     the recent error message, naming the op and the operand), then
 *         aclOpExecutor *ex = ah_executor_new("aclnnXxx", run_xxx);
 *         ah_executor_add_tensor(ex, "self", self, AH_IN); ...   (slots in prototype order)
 *         AH_EXEC_PARAMS(ex, xxx_params)->alpha = ...;           (a small POD struct)
 *         return ah_executor_finish(ex, 0, workspaceSize, executor);
 *   - phase 2 (aclnnXxx): return ah_executor_launch(executor, workspace, size, stream, "aclnnXxx");
 *   - run_xxx(ex, workspace): the kernel, on a stream worker, reading ex->tensors[slot] and
 *     AH_EXEC_PARAMS(ex, xxx_params). It sees a private copy of the executor.
 */
#ifndef AH_TENSOR_H
#define AH_TENSOR_H

#include "ah.h"
#include "aclnn_api.h"

#define AH_TENSOR_MAX_DIMS 25 /* what aclCreateTensor accepts (gert::Shape capacity) */
#define AH_OP_MAX_RANK 8      /* what the ops accept */
#define AH_EXEC_MAX_TENSORS 8
#define AH_EXEC_PARAMS_SIZE 256

struct aclTensor {
    int ndim;
    int n_storage;
    aclDataType dtype;
    aclFormat format;
    int64_t offset;  /* elements */
    void *data;      /* storage base; element i is data + (offset + sum idx*stride) * size */
    int64_t dims[AH_TENSOR_MAX_DIMS];
    int64_t strides[AH_TENSOR_MAX_DIMS]; /* elements; 0 = broadcast */
    int64_t storage_dims[AH_TENSOR_MAX_DIMS];
};

struct aclScalar {
    aclDataType dtype;
    union {
        unsigned char bytes[16];
        double align;
    } value; /* the host value, copied, in dtype's representation */
};

struct aclIntArray { uint64_t size; int64_t *values; };
struct aclFloatArray { uint64_t size; float *values; };
struct aclBoolArray { uint64_t size; bool *values; };
struct aclTensorList { uint64_t size; aclTensor **tensors; };   /* owns the tensors */
struct aclScalarList { uint64_t size; aclScalar **scalars; };   /* owns the scalars */

/* ---- tensor geometry ------------------------------------------------------------------------- */
/* Bytes per element, 0 for types the ops do not handle (string, sub-byte). */
size_t ah_dtype_size(aclDataType dtype);
const char *ah_dtype_name(aclDataType dtype);
int64_t ah_tensor_numel(const aclTensor *t);
/* True iff the view is row-major contiguous (size-1 dims may have any stride). */
bool ah_tensor_is_contiguous(const aclTensor *t);
/* The bytes the view touches: [*first, *first + *size) (size 0 for an empty view). */
void ah_tensor_extent(const aclTensor *t, const char **first, size_t *size);
/* "[2,3,4]" into buf. */
const char *ah_shape_str(char *buf, size_t cap, const int64_t *dims, int ndim);

/* ---- argument checks (phase 1). Each returns ACLNN_SUCCESS or sets the message and returns
 * ACLNN_ERR_PARAM_NULLPTR / ACLNN_ERR_PARAM_INVALID. ------------------------------------------ */
#define AH_DTYPE_BIT(t) (1ull << (unsigned)(t))
/* FLOAT FLOAT16 BF16 DOUBLE INT8 INT16 INT32 INT64 UINT8 BOOL */
#define AH_DTYPES_ARITH                                                                       \
    (AH_DTYPE_BIT(ACL_FLOAT) | AH_DTYPE_BIT(ACL_FLOAT16) | AH_DTYPE_BIT(ACL_BF16) |            \
     AH_DTYPE_BIT(ACL_DOUBLE) | AH_DTYPE_BIT(ACL_INT8) | AH_DTYPE_BIT(ACL_INT16) |            \
     AH_DTYPE_BIT(ACL_INT32) | AH_DTYPE_BIT(ACL_INT64) | AH_DTYPE_BIT(ACL_UINT8) |            \
     AH_DTYPE_BIT(ACL_BOOL))
/* ... plus UINT16 UINT32 UINT64 */
#define AH_DTYPES_REAL                                                                        \
    (AH_DTYPES_ARITH | AH_DTYPE_BIT(ACL_UINT16) | AH_DTYPE_BIT(ACL_UINT32) |                  \
     AH_DTYPE_BIT(ACL_UINT64))

/* NULL, dtype not in dtype_mask, rank outside [min_rank, max_rank], negative dims, element count
 * overflow, or a private / rank-mismatched format. */
aclnnStatus ah_check_tensor(const char *op, const char *name, const aclTensor *t,
                            uint64_t dtype_mask, int min_rank, int max_rank);
aclnnStatus ah_check_scalar(const char *op, const char *name, const aclScalar *s,
                            uint64_t dtype_mask);
aclnnStatus ah_check_out_ptrs(const char *op, const uint64_t *workspaceSize,
                              aclOpExecutor *const *executor);
/* The one tensor of a list that must hold exactly one (*out); otherwise the message names the
 * list and says what acl_host does not implement (`unsupported`, e.g. "the tensorlist batch mode"). */
aclnnStatus ah_check_single_tensor(const char *op, const char *name, const aclTensorList *list,
                                   const char *unsupported, const aclTensor **out);
/* NumPy broadcast of a and b into dims/ndim; on failure the message names both operands. */
aclnnStatus ah_check_broadcast(const char *op, const char *name_a, const aclTensor *a,
                               const char *name_b, const aclTensor *b, int64_t *dims, int *ndim);
/* t's view shape equals dims/ndim; on failure the message says what was expected. */
aclnnStatus ah_check_shape(const char *op, const char *name, const aclTensor *t,
                           const int64_t *dims, int ndim, const char *expected_what);

/* ---- executors ----------------------------------------------------------------------------------- */
typedef aclError (*ah_op_run_fn)(const aclOpExecutor *ex, void *workspace);

typedef enum ah_slot_role { AH_IN = 1, AH_OUT = 2, AH_INOUT = 3 } ah_slot_role;

struct aclOpExecutor {
    uint64_t magic;
    const char *op;              /* "aclnnAdd": phase 2 must be the same op */
    ah_op_run_fn run;
    bool repeatable;
    uint64_t workspace_size;     /* required bytes */
    size_t alloc_size;           /* bytes of this object: room for n_tensors once finished */
    int n_tensors, n_inputs, n_outputs;
    const char *tensor_names[AH_EXEC_MAX_TENSORS];
    int8_t input_slot[AH_EXEC_MAX_TENSORS];          /* aclSetInputTensorAddr index -> slot */
    int8_t output_slot[AH_EXEC_MAX_TENSORS];
    _Alignas(16) unsigned char params[AH_EXEC_PARAMS_SIZE];
    aclOpExecutor *registry_next;
    /* copies, taken in phase 1; AH_EXEC_MAX_TENSORS are allocated until ah_executor_finish
     * shrinks the object to the n_tensors used (a tensor is 632 bytes: a captured graph holds
     * one executor per launch) */
    aclTensor tensors[];
};

/* The op's parameter struct inside the executor (compile error if it does not fit). */
#define AH_EXEC_PARAMS(ex, type)                                                              \
    ((type *)(void *)(ex)->params + 0 * sizeof(char[sizeof(type) <= AH_EXEC_PARAMS_SIZE ? 1 : -1]))

/* Returns from the calling function when an aclnn status is not ACLNN_SUCCESS. */
#define AH_TRY(expr)                                                                          \
    do {                                                                                      \
        aclnnStatus ah_try_status_ = (expr);                                                  \
        if (ah_try_status_ != ACLNN_SUCCESS) return ah_try_status_;                           \
    } while (0)

/* NULL only on allocation failure (message set). */
aclOpExecutor *ah_executor_new(const char *op, ah_op_run_fn run);
/* Copies *t into the next slot and returns the slot index (role says whether it counts as an
 * input, an output or both for aclSetInput/OutputTensorAddr). Slots must not exceed
 * AH_EXEC_MAX_TENSORS (a programming error, reported as -1). */
int ah_executor_add_tensor(aclOpExecutor *ex, const char *name, const aclTensor *t,
                           ah_slot_role role);
/* Registers ex, stores *workspaceSize and *executor. On failure frees ex. */
aclnnStatus ah_executor_finish(aclOpExecutor *ex, uint64_t workspace_size,
                               uint64_t *workspaceSize, aclOpExecutor **executor);
/* Phase 2: validates the executor, the workspace and every tensor's device extent, and queues
 * the run on stream. A non-repeatable executor is consumed whatever the outcome. */
aclnnStatus ah_executor_launch(aclOpExecutor *ex, void *workspace, uint64_t workspace_size,
                               aclrtStream stream, const char *op);

#endif /* AH_TENSOR_H */
