/* descriptors.c - aclTensor / aclScalar / array / list descriptors, the op executor (two-phase
 * plumbing: registry of live executors, repeatable executors, address updates, launch with
 * sanitizer checks) and the phase-1 argument checks shared by every aclnn op.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_tensor.h"

/* ---- dtype facts ------------------------------------------------------------------------------ */
size_t ah_dtype_size(aclDataType dtype) {
    switch (dtype) {
    case ACL_INT4: case ACL_UINT1: case ACL_STRING: return 0;
    default: return aclDataTypeSize(dtype);
    }
}

const char *ah_dtype_name(aclDataType dtype) {
    switch (dtype) {
    case ACL_FLOAT: return "FLOAT";
    case ACL_FLOAT16: return "FLOAT16";
    case ACL_BF16: return "BFLOAT16";
    case ACL_DOUBLE: return "DOUBLE";
    case ACL_INT8: return "INT8";
    case ACL_INT16: return "INT16";
    case ACL_INT32: return "INT32";
    case ACL_INT64: return "INT64";
    case ACL_UINT8: return "UINT8";
    case ACL_UINT16: return "UINT16";
    case ACL_UINT32: return "UINT32";
    case ACL_UINT64: return "UINT64";
    case ACL_BOOL: return "BOOL";
    case ACL_STRING: return "STRING";
    case ACL_COMPLEX32: return "COMPLEX32";
    case ACL_COMPLEX64: return "COMPLEX64";
    case ACL_COMPLEX128: return "COMPLEX128";
    case ACL_INT4: return "INT4";
    case ACL_UINT1: return "UINT1";
    default: return "UNDEFINED";
    }
}

/* ---- tensors ----------------------------------------------------------------------------------- */
AH_API aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum,
                                  aclDataType dataType, const int64_t *stride, int64_t offset,
                                  aclFormat format, const int64_t *storageDims,
                                  uint64_t storageDimsNum, void *tensorData) {
    if ((viewDims == NULL && viewDimsNum > 0) || (storageDims == NULL && storageDimsNum > 0)) {
        ah_error(ACLNN_ERR_PARAM_NULLPTR, "aclCreateTensor: %s is NULL with %llu dims",
                 viewDims == NULL && viewDimsNum > 0 ? "viewDims" : "storageDims",
                 (unsigned long long)(viewDims == NULL && viewDimsNum > 0 ? viewDimsNum
                                                                          : storageDimsNum));
        return NULL;
    }
    if (viewDimsNum > AH_TENSOR_MAX_DIMS || storageDimsNum > AH_TENSOR_MAX_DIMS) {
        ah_error(ACLNN_ERR_PARAM_INVALID, "aclCreateTensor: %llu dims exceed the maximum of %d",
                 (unsigned long long)(viewDimsNum > storageDimsNum ? viewDimsNum : storageDimsNum),
                 AH_TENSOR_MAX_DIMS);
        return NULL;
    }
    aclTensor *t = calloc(1, sizeof *t);
    if (!t) {
        ah_error(ACLNN_ERR_INNER, "aclCreateTensor: out of host memory");
        return NULL;
    }
    t->ndim = (int)viewDimsNum;
    t->n_storage = (int)storageDimsNum;
    t->dtype = dataType;
    t->format = format;
    t->offset = offset;
    t->data = tensorData;
    if (viewDimsNum)
        memcpy(t->dims, viewDims, viewDimsNum * sizeof(int64_t));
    if (storageDimsNum)
        memcpy(t->storage_dims, storageDims, storageDimsNum * sizeof(int64_t));
    if (stride) {
        if (viewDimsNum)
            memcpy(t->strides, stride, viewDimsNum * sizeof(int64_t));
    } else { /* row-major contiguous, as current CANN does for a NULL stride */
        int64_t step = 1;
        for (int i = t->ndim - 1; i >= 0; i--) {
            t->strides[i] = step;
            step *= t->dims[i] > 0 ? t->dims[i] : 1;
        }
    }
    return t;
}

AH_API aclnnStatus aclDestroyTensor(const aclTensor *tensor) {
    free((void *)tensor);
    return ACLNN_SUCCESS;
}

AH_API aclnnStatus aclGetViewShape(const aclTensor *tensor, int64_t **viewDims,
                                   uint64_t *viewDimsNum) {
    if (!tensor || !viewDims || !viewDimsNum)
        return ah_error(ACLNN_ERR_PARAM_NULLPTR, "aclGetViewShape: NULL argument");
    /* The caller frees the array (delete[] in CANN); malloc(0) may return NULL. */
    *viewDims = malloc((size_t)(tensor->ndim ? tensor->ndim : 1) * sizeof(int64_t));
    if (!*viewDims)
        return ah_error(ACLNN_ERR_INNER, "aclGetViewShape: out of host memory");
    memcpy(*viewDims, tensor->dims, (size_t)tensor->ndim * sizeof(int64_t));
    *viewDimsNum = (uint64_t)tensor->ndim;
    return ACLNN_SUCCESS;
}

AH_API aclnnStatus aclGetStorageShape(const aclTensor *tensor, int64_t **storageDims,
                                      uint64_t *storageDimsNum) {
    if (!tensor || !storageDims || !storageDimsNum)
        return ah_error(ACLNN_ERR_PARAM_NULLPTR, "aclGetStorageShape: NULL argument");
    *storageDims = malloc((size_t)(tensor->n_storage ? tensor->n_storage : 1) * sizeof(int64_t));
    if (!*storageDims)
        return ah_error(ACLNN_ERR_INNER, "aclGetStorageShape: out of host memory");
    memcpy(*storageDims, tensor->storage_dims, (size_t)tensor->n_storage * sizeof(int64_t));
    *storageDimsNum = (uint64_t)tensor->n_storage;
    return ACLNN_SUCCESS;
}

AH_API aclnnStatus aclGetViewStrides(const aclTensor *tensor, int64_t **stridesValue,
                                     uint64_t *stridesNum) {
    if (!tensor || !stridesValue || !stridesNum)
        return ah_error(ACLNN_ERR_PARAM_NULLPTR, "aclGetViewStrides: NULL argument");
    *stridesValue = malloc((size_t)(tensor->ndim ? tensor->ndim : 1) * sizeof(int64_t));
    if (!*stridesValue)
        return ah_error(ACLNN_ERR_INNER, "aclGetViewStrides: out of host memory");
    memcpy(*stridesValue, tensor->strides, (size_t)tensor->ndim * sizeof(int64_t));
    *stridesNum = (uint64_t)tensor->ndim;
    return ACLNN_SUCCESS;
}

AH_API aclnnStatus aclGetViewOffset(const aclTensor *tensor, int64_t *offset) {
    if (!tensor || !offset)
        return ah_error(ACLNN_ERR_PARAM_NULLPTR, "aclGetViewOffset: NULL argument");
    *offset = tensor->offset;
    return ACLNN_SUCCESS;
}

AH_API aclnnStatus aclGetFormat(const aclTensor *tensor, aclFormat *format) {
    if (!tensor || !format)
        return ah_error(ACLNN_ERR_PARAM_NULLPTR, "aclGetFormat: NULL argument");
    *format = tensor->format;
    return ACLNN_SUCCESS;
}

AH_API aclnnStatus aclGetDataType(const aclTensor *tensor, aclDataType *dataType) {
    if (!tensor || !dataType)
        return ah_error(ACLNN_ERR_PARAM_NULLPTR, "aclGetDataType: NULL argument");
    *dataType = tensor->dtype;
    return ACLNN_SUCCESS;
}

AH_API aclnnStatus aclSetRawTensorAddr(aclTensor *tensor, void *addr) {
    if (!tensor)
        return ah_error(ACLNN_ERR_PARAM_NULLPTR, "aclSetRawTensorAddr: tensor is NULL");
    tensor->data = addr;
    return ACLNN_SUCCESS;
}

AH_API aclnnStatus aclGetRawTensorAddr(const aclTensor *tensor, void **addr) {
    if (!tensor || !addr)
        return ah_error(ACLNN_ERR_PARAM_NULLPTR, "aclGetRawTensorAddr: NULL argument");
    *addr = tensor->data;
    return ACLNN_SUCCESS;
}

/* ---- scalars and arrays ------------------------------------------------------------------------ */
AH_API aclScalar *aclCreateScalar(void *value, aclDataType dataType) {
    size_t size = aclDataTypeSize(dataType);
    if (!value) {
        ah_error(ACLNN_ERR_PARAM_NULLPTR, "aclCreateScalar: value is NULL");
        return NULL;
    }
    if (size == 0 || dataType == ACL_INT4 || dataType == ACL_UINT1) {
        ah_error(ACLNN_ERR_PARAM_INVALID, "aclCreateScalar: unsupported dtype %s (%d)",
                 ah_dtype_name(dataType), (int)dataType);
        return NULL;
    }
    aclScalar *s = calloc(1, sizeof *s);
    if (!s) {
        ah_error(ACLNN_ERR_INNER, "aclCreateScalar: out of host memory");
        return NULL;
    }
    s->dtype = dataType;
    memcpy(s->value.bytes, value, size);
    return s;
}

AH_API aclnnStatus aclDestroyScalar(const aclScalar *scalar) {
    free((void *)scalar);
    return ACLNN_SUCCESS;
}

/* One allocation holding the header and a copy of the values. */
static void *new_array(const void *values, uint64_t size, size_t elem, size_t header,
                       const char *fn) {
    if (!values && size > 0) {
        ah_error(ACLNN_ERR_PARAM_NULLPTR, "%s: value is NULL with size %llu", fn,
                 (unsigned long long)size);
        return NULL;
    }
    if (size > (SIZE_MAX - header) / elem) {
        ah_error(ACLNN_ERR_PARAM_INVALID, "%s: size %llu is too large", fn,
                 (unsigned long long)size);
        return NULL;
    }
    unsigned char *a = calloc(1, header + (size_t)size * elem + 1);
    if (!a) {
        ah_error(ACLNN_ERR_INNER, "%s: out of host memory", fn);
        return NULL;
    }
    if (size)
        memcpy(a + header, values, (size_t)size * elem);
    return a;
}

#define ARRAY_HEADER(type) ((sizeof(type) + 15) / 16 * 16)

AH_API aclIntArray *aclCreateIntArray(const int64_t *value, uint64_t size) {
    aclIntArray *a = new_array(value, size, sizeof(int64_t), ARRAY_HEADER(aclIntArray),
                               "aclCreateIntArray");
    if (a) {
        a->size = size;
        a->values = (int64_t *)(void *)((unsigned char *)a + ARRAY_HEADER(aclIntArray));
    }
    return a;
}

AH_API aclFloatArray *aclCreateFloatArray(const float *value, uint64_t size) {
    aclFloatArray *a = new_array(value, size, sizeof(float), ARRAY_HEADER(aclFloatArray),
                                 "aclCreateFloatArray");
    if (a) {
        a->size = size;
        a->values = (float *)(void *)((unsigned char *)a + ARRAY_HEADER(aclFloatArray));
    }
    return a;
}

AH_API aclBoolArray *aclCreateBoolArray(const bool *value, uint64_t size) {
    aclBoolArray *a = new_array(value, size, sizeof(bool), ARRAY_HEADER(aclBoolArray),
                                "aclCreateBoolArray");
    if (a) {
        a->size = size;
        a->values = (bool *)(void *)((unsigned char *)a + ARRAY_HEADER(aclBoolArray));
    }
    return a;
}

AH_API aclTensorList *aclCreateTensorList(const aclTensor *const *value, uint64_t size) {
    aclTensorList *a = new_array(value, size, sizeof(aclTensor *), ARRAY_HEADER(aclTensorList),
                                 "aclCreateTensorList");
    if (a) {
        a->size = size;
        a->tensors = (aclTensor **)(void *)((unsigned char *)a + ARRAY_HEADER(aclTensorList));
    }
    return a;
}

AH_API aclScalarList *aclCreateScalarList(const aclScalar *const *value, uint64_t size) {
    aclScalarList *a = new_array(value, size, sizeof(aclScalar *), ARRAY_HEADER(aclScalarList),
                                 "aclCreateScalarList");
    if (a) {
        a->size = size;
        a->scalars = (aclScalar **)(void *)((unsigned char *)a + ARRAY_HEADER(aclScalarList));
    }
    return a;
}

AH_API aclnnStatus aclDestroyIntArray(const aclIntArray *array) {
    free((void *)array);
    return ACLNN_SUCCESS;
}

AH_API aclnnStatus aclDestroyFloatArray(const aclFloatArray *array) {
    free((void *)array);
    return ACLNN_SUCCESS;
}

AH_API aclnnStatus aclDestroyBoolArray(const aclBoolArray *array) {
    free((void *)array);
    return ACLNN_SUCCESS;
}

AH_API aclnnStatus aclDestroyTensorList(const aclTensorList *array) {
    if (array)
        for (uint64_t i = 0; i < array->size; i++)
            free(array->tensors[i]);
    free((void *)array);
    return ACLNN_SUCCESS;
}

AH_API aclnnStatus aclDestroyScalarList(const aclScalarList *array) {
    if (array)
        for (uint64_t i = 0; i < array->size; i++)
            free(array->scalars[i]);
    free((void *)array);
    return ACLNN_SUCCESS;
}

AH_API aclnnStatus aclGetIntArraySize(const aclIntArray *array, uint64_t *size) {
    if (!array || !size)
        return ah_error(ACLNN_ERR_PARAM_NULLPTR, "aclGetIntArraySize: NULL argument");
    *size = array->size;
    return ACLNN_SUCCESS;
}

AH_API aclnnStatus aclGetFloatArraySize(const aclFloatArray *array, uint64_t *size) {
    if (!array || !size)
        return ah_error(ACLNN_ERR_PARAM_NULLPTR, "aclGetFloatArraySize: NULL argument");
    *size = array->size;
    return ACLNN_SUCCESS;
}

AH_API aclnnStatus aclGetBoolArraySize(const aclBoolArray *array, uint64_t *size) {
    if (!array || !size)
        return ah_error(ACLNN_ERR_PARAM_NULLPTR, "aclGetBoolArraySize: NULL argument");
    *size = array->size;
    return ACLNN_SUCCESS;
}

AH_API aclnnStatus aclGetTensorListSize(const aclTensorList *tensorList, uint64_t *size) {
    if (!tensorList || !size)
        return ah_error(ACLNN_ERR_PARAM_NULLPTR, "aclGetTensorListSize: NULL argument");
    *size = tensorList->size;
    return ACLNN_SUCCESS;
}

/* ---- aclnn init ---------------------------------------------------------------------------------- */
AH_API aclnnStatus aclnnInit(const char *configPath) { return ACLNN_SUCCESS; }

AH_API aclnnStatus aclnnFinalize() { return ACLNN_SUCCESS; }

/* ---- tensor geometry ------------------------------------------------------------------------------ */
int64_t ah_tensor_numel(const aclTensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->dims[i];
    return n;
}

bool ah_tensor_is_contiguous(const aclTensor *t) {
    int64_t step = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->dims[i] != 1 && t->strides[i] != step)
            return false;
        step *= t->dims[i];
    }
    return true;
}

void ah_tensor_extent(const aclTensor *t, const char **first, size_t *size) {
    int64_t es = (int64_t)ah_dtype_size(t->dtype), lo = t->offset, hi = t->offset;
    bool empty = false;
    for (int i = 0; i < t->ndim; i++) {
        if (t->dims[i] == 0)
            empty = true;
        else if (t->strides[i] > 0)
            hi += (t->dims[i] - 1) * t->strides[i];
        else
            lo += (t->dims[i] - 1) * t->strides[i];
    }
    if (t->dtype == ACL_INT4) { /* two elements per byte; offsets and strides count nibbles */
        *first = (const char *)((uintptr_t)t->data + (uintptr_t)(lo / 2));
        *size = empty ? 0 : (size_t)(hi / 2 - lo / 2 + 1);
        return;
    }
    /* integer arithmetic: data may be NULL for an empty view */
    *first = (const char *)((uintptr_t)t->data + (uintptr_t)(lo * es));
    *size = empty ? 0 : (size_t)((hi - lo + 1) * es);
}

const char *ah_shape_str(char *buf, size_t cap, const int64_t *dims, int ndim) {
    size_t used = 0;
    used += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, i ? ",%lld" : "%lld", (long long)dims[i]);
    if (used < cap)
        snprintf(buf + used, cap - used, "]");
    return buf;
}

/* ---- argument checks -------------------------------------------------------------------------------- */
static bool format_fits(aclFormat format, int ndim) {
    switch (format) {
    case ACL_FORMAT_ND: return true;
    case ACL_FORMAT_NCDHW: case ACL_FORMAT_NDHWC: return ndim == 5;
    case ACL_FORMAT_NCHW: case ACL_FORMAT_NHWC: case ACL_FORMAT_HWCN: return ndim == 4;
    case ACL_FORMAT_NCL: return ndim == 3;
    case ACL_FORMAT_NC: return ndim == 2;
    default: return false; /* private NPU layouts and undefined */
    }
}

/* The elements the view reaches, [offset + negative steps, offset + positive steps], lie inside
 * the storage shape given to aclCreateTensor: l0op::Contiguous, which the L2 APIs run on strided
 * inputs, refuses a view whose shape and strides reach past its storage. Called on a non-empty
 * tensor whose reach check_tensor has already bounded. */
static aclnnStatus check_view_in_storage(const char *op, const char *name, const aclTensor *t) {
    int64_t lo = t->offset, hi = t->offset, storage = 1;
    for (int i = 0; i < t->ndim; i++) {
        int64_t span = (t->dims[i] - 1) * t->strides[i];
        if (span < 0)
            lo += span;
        else
            hi += span;
    }
    for (int i = 0; i < t->n_storage; i++)
        if (t->storage_dims[i] < 0 || __builtin_mul_overflow(storage, t->storage_dims[i], &storage))
            return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: %s has an invalid storage shape", op,
                            name);
    if (lo < 0 || hi >= storage)
        return ah_error(ACLNN_ERR_PARAM_INVALID,
                        "%s: %s view (offset %lld, elements %lld..%lld) reaches outside its storage "
                        "of %lld elements", op, name, (long long)t->offset, (long long)lo,
                        (long long)hi, (long long)storage);
    return ACLNN_SUCCESS;
}

aclnnStatus ah_check_tensor(const char *op, const char *name, const aclTensor *t,
                            uint64_t dtype_mask, int min_rank, int max_rank) {
    if (!t)
        return ah_error(ACLNN_ERR_PARAM_NULLPTR, "%s: %s is NULL", op, name);
    unsigned dt = (unsigned)t->dtype;
    if (dt >= 64 || !(dtype_mask & (1ull << dt)))
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: %s has unsupported dtype %s (%d)", op,
                        name, ah_dtype_name(t->dtype), (int)t->dtype);
    if (t->ndim < min_rank || t->ndim > max_rank)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: %s has rank %d, expected %d..%d", op, name,
                        t->ndim, min_rank, max_rank);
    if (!format_fits(t->format, t->ndim))
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: %s has format %d, not usable at rank %d",
                        op, name, (int)t->format, t->ndim);
    /* dims >= 0 and every byte offset the view reaches fits in int64 */
    int64_t es = (int64_t)ah_dtype_size(t->dtype), reach = t->offset < 0 ? -t->offset : t->offset;
    for (int i = 0; i < t->ndim; i++) {
        int64_t step = t->strides[i] < 0 ? -t->strides[i] : t->strides[i], span;
        if (t->dims[i] < 0 || t->strides[i] == INT64_MIN)
            return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: %s has dim %d = %lld (stride %lld)",
                            op, name, i, (long long)t->dims[i], (long long)t->strides[i]);
        if (t->dims[i] == 0)
            continue;
        if (__builtin_mul_overflow(t->dims[i] - 1, step, &span) ||
            __builtin_add_overflow(reach, span, &reach))
            return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: %s view is too large", op, name);
    }
    int64_t bytes, numel = 1;
    for (int i = 0; i < t->ndim; i++)
        if (__builtin_mul_overflow(numel, t->dims[i], &numel))
            return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: %s has too many elements", op, name);
    if (__builtin_mul_overflow(reach + 1, es, &bytes))
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: %s view is too large", op, name);
    return numel ? check_view_in_storage(op, name, t) : ACLNN_SUCCESS;
}

aclnnStatus ah_check_scalar(const char *op, const char *name, const aclScalar *s,
                            uint64_t dtype_mask) {
    if (!s)
        return ah_error(ACLNN_ERR_PARAM_NULLPTR, "%s: %s is NULL", op, name);
    unsigned dt = (unsigned)s->dtype;
    if (dt >= 64 || !(dtype_mask & (1ull << dt)))
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: scalar %s has unsupported dtype %s (%d)",
                        op, name, ah_dtype_name(s->dtype), (int)s->dtype);
    return ACLNN_SUCCESS;
}

aclnnStatus ah_check_single_tensor(const char *op, const char *name, const aclTensorList *list,
                                   const char *unsupported, const aclTensor **out) {
    if (!list)
        return ah_error(ACLNN_ERR_PARAM_NULLPTR, "%s: %s is NULL", op, name);
    if (list->size != 1)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: %s holds %llu tensors; acl_host supports one (%s is not implemented)",
                        op, name, (unsigned long long)list->size, unsupported);
    if (!list->tensors[0])
        return ah_error(ACLNN_ERR_PARAM_NULLPTR, "%s: %s[0] is NULL", op, name);
    *out = list->tensors[0];
    return ACLNN_SUCCESS;
}

aclnnStatus ah_check_out_ptrs(const char *op, const uint64_t *workspaceSize,
                              aclOpExecutor *const *executor) {
    if (!workspaceSize)
        return ah_error(ACLNN_ERR_PARAM_NULLPTR, "%s: workspaceSize is NULL", op);
    if (!executor)
        return ah_error(ACLNN_ERR_PARAM_NULLPTR, "%s: executor is NULL", op);
    return ACLNN_SUCCESS;
}

aclnnStatus ah_check_broadcast(const char *op, const char *name_a, const aclTensor *a,
                               const char *name_b, const aclTensor *b, int64_t *dims, int *ndim) {
    int n = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int i = 0; i < n; i++) { /* i counts from the right */
        int64_t da = i < a->ndim ? a->dims[a->ndim - 1 - i] : 1;
        int64_t db = i < b->ndim ? b->dims[b->ndim - 1 - i] : 1;
        if (da != db && da != 1 && db != 1) {
            char sa[256], sb[256];
            return ah_error(ACLNN_ERR_PARAM_INVALID,
                            "%s: %s and %s shapes %s and %s do not broadcast", op, name_a, name_b,
                            ah_shape_str(sa, sizeof sa, a->dims, a->ndim),
                            ah_shape_str(sb, sizeof sb, b->dims, b->ndim));
        }
        dims[n - 1 - i] = da == 1 ? db : da;
    }
    *ndim = n;
    return ACLNN_SUCCESS;
}

aclnnStatus ah_check_shape(const char *op, const char *name, const aclTensor *t,
                           const int64_t *dims, int ndim, const char *expected_what) {
    bool same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = t->dims[i] == dims[i];
    if (same)
        return ACLNN_SUCCESS;
    char st[256], se[256];
    return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: %s has shape %s but %s is %s", op, name,
                    ah_shape_str(st, sizeof st, t->dims, t->ndim), expected_what,
                    ah_shape_str(se, sizeof se, dims, ndim));
}

/* ---- the registry of live executors: lets phase 2 and the executor APIs reject a consumed,
 * destroyed or foreign pointer with an error instead of touching freed memory. ----------------- */
#define EXEC_MAGIC 0x6578656375746f72ull /* "executor" */
#define REGISTRY_BUCKETS 1024

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static aclOpExecutor *registry[REGISTRY_BUCKETS];

static size_t registry_bucket(const aclOpExecutor *ex) {
    return (size_t)(((uintptr_t)ex >> 4) * 0x9e3779b97f4a7c15ull >> 54) % REGISTRY_BUCKETS;
}

static void registry_add(aclOpExecutor *ex) {
    pthread_mutex_lock(&registry_lock);
    size_t b = registry_bucket(ex);
    ex->registry_next = registry[b];
    registry[b] = ex;
    pthread_mutex_unlock(&registry_lock);
}

/* Removes ex if `take`; returns whether it was live. */
static bool registry_find(const aclOpExecutor *ex, bool take) {
    bool found = false;
    pthread_mutex_lock(&registry_lock);
    for (aclOpExecutor **p = &registry[registry_bucket(ex)]; *p; p = &(*p)->registry_next) {
        if (*p == ex) {
            found = true;
            if (take)
                *p = ex->registry_next;
            break;
        }
    }
    pthread_mutex_unlock(&registry_lock);
    return found;
}

static aclnnStatus not_live(const char *fn, const aclOpExecutor *ex) {
    return ah_error(ACLNN_ERR_PARAM_INVALID,
                    "%s: executor %p is not live (already launched, destroyed, or not created "
                    "by a GetWorkspaceSize call)", fn, (const void *)ex);
}

/* ---- executors ------------------------------------------------------------------------------------- */
aclOpExecutor *ah_executor_new(const char *op, ah_op_run_fn run) {
    size_t size = sizeof(aclOpExecutor) + AH_EXEC_MAX_TENSORS * sizeof(aclTensor);
    aclOpExecutor *ex = calloc(1, size);
    if (!ex) {
        ah_error(ACLNN_ERR_INNER, "%s: out of host memory for the executor", op);
        return NULL;
    }
    ex->magic = EXEC_MAGIC;
    ex->op = op;
    ex->run = run;
    ex->alloc_size = size;
    return ex;
}

int ah_executor_add_tensor(aclOpExecutor *ex, const char *name, const aclTensor *t,
                           ah_slot_role role) {
    if (ex->n_tensors >= AH_EXEC_MAX_TENSORS)
        return -1;
    int slot = ex->n_tensors++;
    ex->tensors[slot] = *t;
    ex->tensor_names[slot] = name;
    if (role & AH_IN)
        ex->input_slot[ex->n_inputs++] = (int8_t)slot;
    if (role & AH_OUT)
        ex->output_slot[ex->n_outputs++] = (int8_t)slot;
    return slot;
}

aclnnStatus ah_executor_finish(aclOpExecutor *ex, uint64_t workspace_size,
                               uint64_t *workspaceSize, aclOpExecutor **executor) {
    size_t used = sizeof(aclOpExecutor) + (size_t)ex->n_tensors * sizeof(aclTensor);
    aclOpExecutor *shrunk = used < ex->alloc_size ? realloc(ex, used) : NULL;
    if (shrunk) { /* not registered yet: nothing else points to it */
        ex = shrunk;
        ex->alloc_size = used;
    }
    ex->workspace_size = workspace_size;
    registry_add(ex);
    *workspaceSize = workspace_size;
    *executor = ex;
    return ACLNN_SUCCESS;
}

static void executor_release(void *arg) {
    aclOpExecutor *ex = arg;
    ex->magic = 0;
    free(ex);
}

/* What a queued task runs: its own executor (consumed) or a snapshot of a repeatable one. */
typedef struct launch_task {
    aclOpExecutor *ex;
    void *workspace;
} launch_task;

static aclError launch_run(void *arg) {
    launch_task *task = arg;
    return task->ex->run(task->ex, task->workspace);
}

static void launch_release(void *arg) {
    launch_task *task = arg;
    executor_release(task->ex);
    free(task);
}

aclnnStatus ah_executor_launch(aclOpExecutor *ex, void *workspace, uint64_t workspace_size,
                               aclrtStream stream, const char *op) {
    if (!ex)
        return ah_error(ACLNN_ERR_INNER_NULLPTR, "%s: executor is NULL", op);
    if (!registry_find(ex, false))
        return not_live(op, ex);
    if (ex->op != op && strcmp(ex->op, op) != 0)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: executor was created by %sGetWorkspaceSize",
                        op, ex->op);
    /* from here on a one-shot executor is consumed, whatever happens */
    aclOpExecutor *run_ex = ex;
    if (!ex->repeatable) {
        registry_find(ex, true);
    } else {
        run_ex = malloc(ex->alloc_size);
        if (!run_ex)
            return ah_error(ACLNN_ERR_INNER, "%s: out of host memory", op);
        memcpy(run_ex, ex, ex->alloc_size);
    }
    aclnnStatus status = ACLNN_SUCCESS;
    ah_range ranges[AH_EXEC_MAX_TENSORS + 1];
    size_t n_ranges = 0;
    launch_task *task = NULL;
    if (workspace_size < run_ex->workspace_size) {
        status = ah_error(ACLNN_ERR_PARAM_INVALID, "%s: workspace of %llu bytes, %llu needed", op,
                          (unsigned long long)workspace_size,
                          (unsigned long long)run_ex->workspace_size);
        goto fail;
    }
    if (workspace_size > 0) {
        char what[96];
        snprintf(what, sizeof what, "%s: workspace", op);
        if (ah_mem_check_device(workspace, (size_t)workspace_size, what) != ACL_SUCCESS) {
            status = ACLNN_ERR_RUNTIME_ERROR;
            goto fail;
        }
        ranges[n_ranges++] = (ah_range){workspace, (size_t)workspace_size};
    }
    for (int i = 0; i < run_ex->n_tensors; i++) {
        const char *first;
        size_t size;
        ah_tensor_extent(&run_ex->tensors[i], &first, &size);
        if (size == 0)
            continue;
        char what[96];
        snprintf(what, sizeof what, "%s: tensor %s", op, run_ex->tensor_names[i]);
        if (ah_mem_check_device(first, size, what) != ACL_SUCCESS) {
            status = ACLNN_ERR_RUNTIME_ERROR;
            goto fail;
        }
        ranges[n_ranges++] = (ah_range){first, size};
    }
    task = malloc(sizeof *task);
    if (!task) {
        status = ah_error(ACLNN_ERR_INNER, "%s: out of host memory", op);
        goto fail;
    }
    task->ex = run_ex;
    task->workspace = workspace;
    /* ah_stream_submit releases the task itself when it fails */
    if (ah_stream_submit(stream, op, launch_run, task, launch_release, ranges, n_ranges) !=
        ACL_SUCCESS)
        return ACLNN_ERR_RUNTIME_ERROR;
    return ACLNN_SUCCESS;
fail:
    executor_release(run_ex);
    return status;
}

/* ---- executor API ------------------------------------------------------------------------------------ */
AH_API aclnnStatus aclSetAclOpExecutorRepeatable(aclOpExecutor *executor) {
    if (!executor)
        return ah_error(ACLNN_ERR_INNER_NULLPTR, "aclSetAclOpExecutorRepeatable: executor is NULL");
    if (!registry_find(executor, false))
        return not_live("aclSetAclOpExecutorRepeatable", executor);
    executor->repeatable = true;
    return ACLNN_SUCCESS;
}

AH_API aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor *executor) {
    if (!executor)
        return ah_error(ACLNN_ERR_INNER_NULLPTR, "aclDestroyAclOpExecutor: executor is NULL");
    if (!registry_find(executor, true))
        return not_live("aclDestroyAclOpExecutor", executor);
    executor_release(executor);
    return ACLNN_SUCCESS;
}

static aclnnStatus set_tensor_addr(const char *fn, aclOpExecutor *ex, size_t index,
                                   aclTensor *tensor, void *addr, bool output) {
    if (!ex)
        return ah_error(ACLNN_ERR_INNER_NULLPTR, "%s: executor is NULL", fn);
    if (!registry_find(ex, false))
        return not_live(fn, ex);
    int count = output ? ex->n_outputs : ex->n_inputs;
    if (index >= (size_t)count)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: index %zu, but %s has %d %s", fn, index,
                        ex->op, count, output ? "outputs" : "inputs");
    int slot = output ? ex->output_slot[index] : ex->input_slot[index];
    ex->tensors[slot].data = addr;
    if (tensor)
        tensor->data = addr;
    return ACLNN_SUCCESS;
}

AH_API aclnnStatus aclSetInputTensorAddr(aclOpExecutor *executor, const size_t index,
                                         aclTensor *tensor, void *addr) {
    return set_tensor_addr("aclSetInputTensorAddr", executor, index, tensor, addr, false);
}

AH_API aclnnStatus aclSetOutputTensorAddr(aclOpExecutor *executor, const size_t index,
                                          aclTensor *tensor, void *addr) {
    return set_tensor_addr("aclSetOutputTensorAddr", executor, index, tensor, addr, true);
}
