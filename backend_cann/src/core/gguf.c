/* gguf.c - the one GGUF scan that Python is slow at: walking a string array (the tokenizer's
 * tokens and merges, ~150k strings each) to find where each string lies and where the array ends.
 * The loaders (runner/loader.py, runner/gguf_vocab.py) do everything else. */
#include <stdint.h>
#include <string.h>

#include "clm_impl.h"

clm_status clm_gguf_string_spans(const void *data, size_t size, size_t offset, uint64_t count,
                                 uint64_t *spans, size_t *end) {
    CLM_CHECK_ARG(data != NULL && end != NULL, "gguf_string_spans: NULL argument");
    const uint8_t *p = data;
    size_t off = offset;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t n;
        if (off > size || size - off < 8)
            return clm_error(CLM_ERR_INVALID_ARG, "string %llu of %llu: its length runs past the end "
                             "of the file", (unsigned long long)i, (unsigned long long)count);
        memcpy(&n, p + off, 8); /* GGUF is little-endian, as every supported host */
        off += 8;
        if (n > size - off)
            return clm_error(CLM_ERR_INVALID_ARG, "string %llu of %llu (%llu bytes) runs past the end "
                             "of the file", (unsigned long long)i, (unsigned long long)count,
                             (unsigned long long)n);
        if (spans != NULL) {
            spans[2 * i] = off;
            spans[2 * i + 1] = n;
        }
        off += (size_t)n;
    }
    *end = off;
    return CLM_OK;
}
