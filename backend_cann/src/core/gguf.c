/* gguf.c - the GGUF scans that Python is slow at: walking a string array (the tokenizer's tokens
 * and merges, ~150k strings each) to find where each string lies and where the array ends, and
 * copying its strings into one blob without temporaries. The loaders (runner/loader.py,
 * runner/gguf_vocab.py) do everything else. */
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

clm_status clm_gguf_string_blob(const void *data, size_t size, size_t offset, uint64_t count, char *text,
                                size_t text_size, uint32_t *offsets, size_t *end) {
    CLM_CHECK_ARG(data != NULL && end != NULL && offsets != NULL && (text != NULL || text_size == 0),
                  "gguf_string_blob: NULL argument");
    clm_status st = clm_gguf_string_spans(data, size, offset, count, NULL, end);
    if (st != CLM_OK) return st;
    if (*end - offset - 8 * count != text_size || text_size > UINT32_MAX)
        return clm_error(CLM_ERR_INVALID_ARG, "gguf_string_blob: %zu bytes of text, the blob has %zu (at most 4 GiB)",
                         (size_t)(*end - offset - 8 * count), text_size);
    const uint8_t *p = data;
    size_t off = offset, at = 0;
    offsets[0] = 0;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t n;
        memcpy(&n, p + off, 8);
        memcpy(text + at, p + off + 8, (size_t)n);
        off += 8 + (size_t)n;
        at += (size_t)n;
        offsets[i + 1] = (uint32_t)at;
    }
    return CLM_OK;
}
