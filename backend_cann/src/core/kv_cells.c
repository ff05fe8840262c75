/* kv_cells.c - the runner's KV-cell bookkeeping on the host: the attention mask of a micro-batch
 * and the count of used cells, from the cache's per-cell position and sequence-set arrays
 * (runner/kv_cache.py). One pass in C instead of several numpy passes with temporaries: a decode
 * step builds its mask row in microseconds, a 512-token prompt its 512 x n_kv mask without
 * materialising the comparison arrays. */
#include "clm_impl.h"

#define MAX_SEQ 64
#define F16_ZERO 0x0000u
#define F16_NEG_INF 0xFC00u

clm_status clm_kv_mask(const int64_t *cell_pos, const uint64_t *cell_seq, int64_t n_kv,
                       const int64_t *token_pos, const int64_t *token_seq, int64_t n_tokens,
                       int64_t n_swa, uint16_t *out) {
    if (n_kv < 0 || n_tokens < 0) return clm_error(CLM_ERR_INVALID_ARG, "clm_kv_mask: negative size");
    if ((n_kv > 0 && (cell_pos == NULL || cell_seq == NULL)) ||
        (n_tokens > 0 && (token_pos == NULL || token_seq == NULL || (n_kv > 0 && out == NULL))))
        return clm_error(CLM_ERR_INVALID_ARG, "clm_kv_mask: NULL array");
    for (int64_t t = 0; t < n_tokens; t++)
        if (token_seq[t] < 0 || token_seq[t] >= MAX_SEQ)
            return clm_error(CLM_ERR_INVALID_ARG, "clm_kv_mask: sequence id %lld of token %lld is not in 0..%d",
                             (long long)token_seq[t], (long long)t, MAX_SEQ - 1);
    for (int64_t t = 0; t < n_tokens; t++) {
        const uint64_t bit = (uint64_t)1 << token_seq[t];
        const int64_t p = token_pos[t];
        /* cells n_swa or more positions behind p are hidden too (n_swa <= 0: no window) */
        const int64_t oldest = n_swa > 0 ? p - n_swa + 1 : INT64_MIN;
        uint16_t *row = out + t * n_kv;
        for (int64_t j = 0; j < n_kv; j++) {
            const int64_t cp = cell_pos[j];
            const bool visible = (cell_seq[j] & bit) != 0 && cp >= 0 && cp <= p && cp >= oldest;
            row[j] = visible ? F16_ZERO : F16_NEG_INF;
        }
    }
    return CLM_OK;
}

clm_status clm_kv_cells_used(const int64_t *cell_pos, int64_t n_cells, int64_t *n_used, int64_t *last_used,
                             int64_t *first_free) {
    if (n_cells < 0 || (n_cells > 0 && cell_pos == NULL) || n_used == NULL || last_used == NULL ||
        first_free == NULL)
        return clm_error(CLM_ERR_INVALID_ARG, "clm_kv_cells_used: bad arguments");
    int64_t used = 0, last = -1, first = -1;
    for (int64_t j = 0; j < n_cells; j++) {
        const int64_t u = cell_pos[j] >= 0;
        used += u;
        last = u ? j : last;
        first = (!u && first < 0) ? j : first;
    }
    *n_used = used;
    *last_used = last;
    *first_free = first;
    return CLM_OK;
}

clm_status clm_kv_decode_step(int64_t *cell_pos, uint64_t *cell_seq, int64_t n_cells, const int64_t *token_pos,
                              const int64_t *token_seq, int64_t n_tokens, int64_t n_pad, int64_t *cells,
                              int64_t *n_used, int64_t *n_kv, uint16_t *mask) {
    if (n_cells < 0 || n_tokens < 0 || n_pad <= 0 || n_used == NULL || n_kv == NULL ||
        (n_cells > 0 && (cell_pos == NULL || cell_seq == NULL)) ||
        (n_tokens > 0 && (token_pos == NULL || token_seq == NULL || cells == NULL || mask == NULL)))
        return clm_error(CLM_ERR_INVALID_ARG, "clm_kv_decode_step: bad arguments");
    for (int64_t t = 0; t < n_tokens; t++)
        if (token_seq[t] < 0 || token_seq[t] >= MAX_SEQ)
            return clm_error(CLM_ERR_INVALID_ARG, "clm_kv_decode_step: sequence id %lld of token %lld is not in 0..%d",
                             (long long)token_seq[t], (long long)t, MAX_SEQ - 1);
    /* one scan: the cells in use, the last of them, and the first n_tokens empty ones */
    int64_t used = 0, last = -1, found = 0;
    for (int64_t j = 0; j < n_cells; j++) {
        if (cell_pos[j] >= 0) {
            used++;
            last = j;
        } else if (found < n_tokens) {
            cells[found++] = j;
        }
    }
    *n_used = used;
    *n_kv = -1;
    if (found < n_tokens) return CLM_OK; /* the context is full: nothing written */
    for (int64_t t = 0; t < n_tokens; t++) {
        cell_pos[cells[t]] = token_pos[t];
        cell_seq[cells[t]] = (uint64_t)1 << token_seq[t];
        if (cells[t] > last) last = cells[t];
    }
    int64_t kv = (last + 1 + n_pad - 1) / n_pad * n_pad;
    if (kv < n_pad) kv = n_pad;
    if (kv > n_cells) kv = n_cells;
    *n_kv = kv;
    return clm_kv_mask(cell_pos, cell_seq, kv, token_pos, token_seq, n_tokens, 0, mask);
}
