/* vocab.c - the tokenizer's tables and merge loop (runner/tokenizer.py): token text -> id and
 * merge pair -> rank as open-addressing hash indexes over the caller's string blobs (no copy of
 * the texts, no per-string objects), and the pairwise merge of one word's symbols on them.
 *
 * Strings are given as one blob and n + 1 offsets (string i is blob[off[i] .. off[i + 1])); the
 * blobs, offsets and scores stay the caller's and must outlive the vocab. A merge line is split
 * at its first space after the first byte (as llama.cpp does; a space cannot sit inside a UTF-8
 * sequence), the first occurrence of a line giving the rank; lines without such a space merge
 * nothing. Symbols start as the word's characters (a valid UTF-8 sequence, or one byte of an
 * invalid one, as Python's surrogateescape decoding splits them) and the best pair merges first:
 * the lowest rank (BPE) or the highest score of the joined token (SPM), leftmost among equals.
 * This is llama.cpp's work-queue algorithm; stale queue entries are skipped. */
#include <stdlib.h>
#include <string.h>

#include "clm_impl.h"

#define EMPTY_SLOT (-1)

struct clm_vocab {
    const uint8_t *text;      /* token texts */
    const uint32_t *off;      /* n_tokens + 1 offsets */
    int64_t n_tokens;
    int32_t *index;           /* token ids by hash of their text, EMPTY_SLOT where free */
    uint64_t index_mask;
    const uint8_t *mtext;     /* merge lines */
    const uint32_t *moff;
    int64_t n_merges;
    int32_t *mindex;          /* merge ranks by hash of (left + right, length of left) */
    uint64_t mindex_mask;
    const double *scores;     /* per token (SPM), or NULL */
    uint8_t byte_char[256][2];  /* GPT-2's bytes_to_unicode: each byte's character as UTF-8 */
    uint8_t byte_char_len[256];
};

/* ---- hashing ---------------------------------------------------------------------------------- */

static uint64_t hash_bytes(uint64_t h, const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;   /* FNV-1a */
    return h;
}

static uint64_t hash_final(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

#define HASH_SEED 0xcbf29ce484222325ull

static uint64_t text_hash(const uint8_t *p, size_t n) { return hash_final(hash_bytes(HASH_SEED, p, n)); }

/* a merge pair: both halves' bytes, then the length of the left one */
static uint64_t pair_hash(const uint8_t *a, size_t na, const uint8_t *b, size_t nb) {
    uint64_t h = hash_bytes(hash_bytes(HASH_SEED, a, na), b, nb);
    return hash_final(h ^ ((uint64_t)na * 0x9e3779b97f4a7c15ull));
}

static uint64_t table_size(int64_t n) {
    uint64_t size = 16;
    while (size < (uint64_t)n + (uint64_t)n / 2 + 1) size <<= 1;   /* load factor at most 2/3 */
    return size;
}

static int32_t *new_table(uint64_t size) {
    int32_t *t = malloc(size * sizeof(int32_t));
    if (t != NULL) memset(t, 0xff, size * sizeof(int32_t));   /* every slot EMPTY_SLOT */
    return t;
}

/* ---- lookups ---------------------------------------------------------------------------------- */

static int32_t find_token(const clm_vocab *v, const uint8_t *p, size_t n) {
    for (uint64_t i = text_hash(p, n) & v->index_mask;; i = (i + 1) & v->index_mask) {
        const int32_t id = v->index[i];
        if (id == EMPTY_SLOT) return -1;
        const uint32_t s = v->off[id];
        if (v->off[id + 1] - s == n && memcmp(v->text + s, p, n) == 0) return id;
    }
}

/* The rank of merging the adjacent symbols a and b, or -1. A left part with a space after its
 * first byte is no merge's left part (a line splits at its first such space). */
static int32_t find_merge(const clm_vocab *v, const uint8_t *a, size_t na, const uint8_t *b, size_t nb) {
    if (v->mindex == NULL || na == 0 || (na > 1 && memchr(a + 1, ' ', na - 1) != NULL)) return -1;
    for (uint64_t i = pair_hash(a, na, b, nb) & v->mindex_mask;; i = (i + 1) & v->mindex_mask) {
        const int32_t r = v->mindex[i];
        if (r == EMPTY_SLOT) return -1;
        const uint8_t *line = v->mtext + v->moff[r];
        if (v->moff[r + 1] - v->moff[r] == na + 1 + nb && line[na] == ' ' && memcmp(line, a, na) == 0 &&
            memcmp(line + na + 1, b, nb) == 0)
            return r;
    }
}

/* ---- construction ----------------------------------------------------------------------------- */

static clm_status check_offsets(const uint32_t *off, int64_t n, const char *what) {
    for (int64_t i = 0; i < n; i++)
        if (off[i + 1] < off[i])
            return clm_error(CLM_ERR_INVALID_ARG, "clm_vocab: %s offsets decrease at %lld", what, (long long)i);
    return CLM_OK;
}

static void init_byte_chars(clm_vocab *v) {
    /* printable Latin-1 bytes stand for themselves, the others for U+0100 onwards in byte order */
    int next = 256;
    for (int b = 0; b < 256; b++) {
        const bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        const int cp = keep ? b : next++;
        if (cp < 0x80) {
            v->byte_char[b][0] = (uint8_t)cp;
            v->byte_char_len[b] = 1;
        } else {
            v->byte_char[b][0] = (uint8_t)(0xC0 | (cp >> 6));
            v->byte_char[b][1] = (uint8_t)(0x80 | (cp & 0x3F));
            v->byte_char_len[b] = 2;
        }
    }
}

clm_status clm_vocab_new(const char *text, const uint32_t *offsets, int64_t n_tokens, clm_vocab **out,
                         int64_t *duplicate) {
    CLM_CHECK_ARG(out != NULL && duplicate != NULL, "clm_vocab_new: NULL argument");
    *out = NULL;
    duplicate[0] = duplicate[1] = -1;
    CLM_CHECK_ARG(n_tokens >= 0 && n_tokens < INT32_MAX, "clm_vocab_new: %lld tokens", (long long)n_tokens);
    CLM_CHECK_ARG(offsets != NULL && (text != NULL || n_tokens == 0), "clm_vocab_new: NULL text or offsets");
    clm_status st = check_offsets(offsets, n_tokens, "token");
    if (st != CLM_OK) return st;
    clm_vocab *v = calloc(1, sizeof(*v));
    if (v == NULL) return clm_error(CLM_ERR_OUT_OF_MEMORY, "clm_vocab_new: out of memory");
    v->text = (const uint8_t *)text;
    v->off = offsets;
    v->n_tokens = n_tokens;
    const uint64_t size = table_size(n_tokens);
    v->index = new_table(size);
    if (v->index == NULL) {
        free(v);
        return clm_error(CLM_ERR_OUT_OF_MEMORY, "clm_vocab_new: out of memory (%lld tokens)", (long long)n_tokens);
    }
    v->index_mask = size - 1;
    for (int64_t id = 0; id < n_tokens; id++) {
        const uint8_t *p = v->text + offsets[id];
        const size_t n = offsets[id + 1] - offsets[id];
        uint64_t i = text_hash(p, n) & v->index_mask;
        for (;; i = (i + 1) & v->index_mask) {
            const int32_t other = v->index[i];
            if (other == EMPTY_SLOT) break;
            if (offsets[other + 1] - offsets[other] == n && memcmp(v->text + offsets[other], p, n) == 0) {
                duplicate[0] = other;
                duplicate[1] = id;
                clm_vocab_free(v);
                return clm_error(CLM_ERR_INVALID_ARG, "duplicate token (ids %lld and %lld)", (long long)other,
                                 (long long)id);
            }
        }
        v->index[i] = (int32_t)id;
    }
    init_byte_chars(v);
    *out = v;
    return CLM_OK;
}

clm_status clm_vocab_set_merges(clm_vocab *v, const char *text, const uint32_t *offsets, int64_t n_merges) {
    CLM_CHECK_ARG(v != NULL && offsets != NULL && (text != NULL || n_merges == 0), "clm_vocab_set_merges: NULL argument");
    CLM_CHECK_ARG(n_merges >= 0 && n_merges < INT32_MAX, "clm_vocab_set_merges: %lld merges", (long long)n_merges);
    clm_status st = check_offsets(offsets, n_merges, "merge");
    if (st != CLM_OK) return st;
    const uint64_t size = table_size(n_merges);
    int32_t *index = new_table(size);
    if (index == NULL) return clm_error(CLM_ERR_OUT_OF_MEMORY, "clm_vocab_set_merges: out of memory");
    const uint8_t *mtext = (const uint8_t *)text;
    for (int64_t r = 0; r < n_merges; r++) {
        const uint8_t *line = mtext + offsets[r];
        const size_t n = offsets[r + 1] - offsets[r];
        const uint8_t *space = n > 1 ? memchr(line + 1, ' ', n - 1) : NULL;
        if (space == NULL) continue;              /* nothing to split: merges nothing */
        const size_t na = (size_t)(space - line);
        uint64_t i = pair_hash(line, na, space + 1, n - na - 1) & (size - 1);
        bool seen = false;
        for (;; i = (i + 1) & (size - 1)) {
            const int32_t other = index[i];
            if (other == EMPTY_SLOT) break;
            if (offsets[other + 1] - offsets[other] == n && memcmp(mtext + offsets[other], line, n) == 0) {
                seen = true;                      /* the first occurrence keeps its rank */
                break;
            }
        }
        if (!seen) index[i] = (int32_t)r;
    }
    free(v->mindex);
    v->mindex = index;
    v->mindex_mask = size - 1;
    v->mtext = mtext;
    v->moff = offsets;
    v->n_merges = n_merges;
    return CLM_OK;
}

clm_status clm_vocab_set_scores(clm_vocab *v, const double *scores) {
    CLM_CHECK_ARG(v != NULL, "clm_vocab_set_scores: NULL vocab");
    v->scores = scores;
    return CLM_OK;
}

void clm_vocab_free(clm_vocab *v) {
    if (v == NULL) return;
    free(v->index);
    free(v->mindex);
    free(v);
}

clm_status clm_vocab_find(const clm_vocab *v, const char *text, size_t len, int32_t *id) {
    CLM_CHECK_ARG(v != NULL && id != NULL && (text != NULL || len == 0), "clm_vocab_find: NULL argument");
    *id = find_token(v, (const uint8_t *)text, len);
    return CLM_OK;
}

clm_status clm_vocab_merge_rank(const clm_vocab *v, const char *left, size_t left_len, const char *right,
                                size_t right_len, int32_t *rank) {
    CLM_CHECK_ARG(v != NULL && rank != NULL && (left != NULL || left_len == 0) && (right != NULL || right_len == 0),
                  "clm_vocab_merge_rank: NULL argument");
    *rank = find_merge(v, (const uint8_t *)left, left_len, (const uint8_t *)right, right_len);
    return CLM_OK;
}

/* ---- the merge loop --------------------------------------------------------------------------- */

/* The length of the character at p (n > 0 bytes left): a valid UTF-8 sequence, else 1 byte. */
static size_t char_len(const uint8_t *p, size_t n) {
    const uint8_t c = p[0];
    if (c < 0x80) return 1;
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF;                 /* the second byte's range */
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if (c == 0xED) len = 3, hi = 0x9F;      /* no surrogates */
    else if (c >= 0xE1 && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;      /* no overlong forms */
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) len = 4, hi = 0x8F;      /* nothing above U+10FFFF */
    else return 1;
    if (n < len || p[1] < lo || p[1] > hi) return 1;
    for (size_t i = 2; i < len; i++)
        if (p[i] < 0x80 || p[i] > 0xBF) return 1;
    return len;
}

typedef struct {
    double priority;          /* lower merges first */
    int32_t left, right;
    uint32_t size;            /* bytes of both symbols when queued: a changed symbol is stale */
} merge_item;

typedef struct {
    uint32_t start, len;      /* bytes of the symbol in the word; len 0: merged into its left */
    int32_t prev, next;
} symbol;

static bool item_before(const merge_item *x, const merge_item *y) {
    return x->priority < y->priority || (x->priority == y->priority && x->left < y->left);
}

static void heap_push(merge_item *heap, size_t *n, merge_item item) {
    size_t i = (*n)++;
    while (i > 0) {
        const size_t parent = (i - 1) / 2;
        if (!item_before(&item, &heap[parent])) break;
        heap[i] = heap[parent];
        i = parent;
    }
    heap[i] = item;
}

static merge_item heap_pop(merge_item *heap, size_t *n) {
    const merge_item top = heap[0];
    const merge_item last = heap[--*n];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= *n) break;
        if (child + 1 < *n && item_before(&heap[child + 1], &heap[child])) child++;
        if (!item_before(&heap[child], &last)) break;
        heap[i] = heap[child];
        i = child;
    }
    if (*n > 0) heap[i] = last;
    return top;
}

enum { MODE_BPE, MODE_SPM };

/* The priority of merging symbols a and b (adjacent in w), or false when they do not merge. */
static bool pair_priority(const clm_vocab *v, int mode, const uint8_t *w, const symbol *a, const symbol *b,
                          double *priority) {
    if (mode == MODE_BPE) {
        const int32_t r = find_merge(v, w + a->start, a->len, w + b->start, b->len);
        *priority = r;
        return r >= 0;
    }
    const int32_t id = find_token(v, w + a->start, (size_t)a->len + b->len);
    if (id < 0) return false;
    *priority = v->scores != NULL ? -v->scores[id] : 0.0;
    return true;
}

static void queue_pair(const clm_vocab *v, int mode, const uint8_t *w, const symbol *syms, int32_t left,
                       int32_t right, merge_item *heap, size_t *n_heap) {
    double priority;
    if (pair_priority(v, mode, w, &syms[left], &syms[right], &priority))
        heap_push(heap, n_heap,
                  (merge_item){priority, left, right, syms[left].len + syms[right].len});
}

/* Merges the characters of w[0..n) into symbols (syms, linked by next from index 0). */
static clm_status merge_word(const clm_vocab *v, int mode, const uint8_t *w, size_t n, symbol **out_syms) {
    symbol *syms = malloc((n ? n : 1) * sizeof(symbol));
    merge_item *heap = malloc((3 * n + 1) * sizeof(merge_item));
    if (syms == NULL || heap == NULL) {
        free(syms);
        free(heap);
        return clm_error(CLM_ERR_OUT_OF_MEMORY, "tokenizer: out of memory for a word of %zu bytes", n);
    }
    int32_t n_syms = 0;
    for (size_t at = 0; at < n;) {
        const size_t len = char_len(w + at, n - at);
        syms[n_syms] = (symbol){(uint32_t)at, (uint32_t)len, n_syms - 1, n_syms + 1};
        n_syms++;
        at += len;
    }
    if (n_syms > 0) syms[n_syms - 1].next = -1;
    size_t n_heap = 0;
    for (int32_t i = 0; i + 1 < n_syms; i++) queue_pair(v, mode, w, syms, i, i + 1, heap, &n_heap);
    while (n_heap > 0) {
        const merge_item top = heap_pop(heap, &n_heap);
        symbol *l = &syms[top.left], *r = &syms[top.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != top.size) continue;   /* stale */
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (l->next >= 0) syms[l->next].prev = top.left;
        if (l->prev >= 0) queue_pair(v, mode, w, syms, l->prev, top.left, heap, &n_heap);
        if (l->next >= 0) queue_pair(v, mode, w, syms, top.left, l->next, heap, &n_heap);
    }
    free(heap);
    *out_syms = syms;
    return CLM_OK;
}

static clm_status emit(int32_t id, int32_t *ids, int64_t cap, int64_t *n_ids) {
    if (*n_ids >= cap)
        return clm_error(CLM_ERR_INVALID_ARG, "tokenizer: more than %lld ids for a word (output too small)",
                         (long long)cap);
    ids[(*n_ids)++] = id;
    return CLM_OK;
}

/* "<0xXX>" */
static int32_t find_byte_token(const clm_vocab *v, uint8_t b) {
    static const char hex[] = "0123456789ABCDEF";
    const uint8_t name[6] = {'<', '0', 'x', (uint8_t)hex[b >> 4], (uint8_t)hex[b & 15], '>'};
    return find_token(v, name, sizeof(name));
}

/* The symbols' ids; a symbol that is no token becomes tokens of its bytes: BPE drops a byte no
 * token covers, SPM takes unk_id for it (none: an error). */
static clm_status emit_symbols(const clm_vocab *v, int mode, uint32_t flags, const uint8_t *w, const symbol *syms,
                               size_t n, int32_t unk_id, int32_t *ids, int64_t cap, int64_t *n_ids) {
    clm_status st = CLM_OK;
    for (int32_t i = n ? 0 : -1; i >= 0 && st == CLM_OK; i = syms[i].next) {
        const uint8_t *p = w + syms[i].start;
        const int32_t id = find_token(v, p, syms[i].len);
        if (id >= 0) {
            st = emit(id, ids, cap, n_ids);
            continue;
        }
        for (uint32_t j = 0; j < syms[i].len && st == CLM_OK; j++) {
            int32_t t;
            if (mode == MODE_SPM) {
                t = find_byte_token(v, p[j]);
                if (t < 0) t = find_token(v, p + j, 1);
                if (t < 0) t = unk_id;
                if (t < 0) return clm_error(CLM_ERR_INVALID_ARG, "no byte token for 0x%02X", p[j]);
            } else {
                t = (flags & CLM_BPE_BYTE_LEVEL) ? find_token(v, p + j, 1) : find_byte_token(v, p[j]);
            }
            if (t >= 0) st = emit(t, ids, cap, n_ids);
        }
    }
    return st;
}

clm_status clm_vocab_bpe(const clm_vocab *v, const char *word, size_t len, uint32_t flags, int32_t *ids,
                         int64_t cap, int64_t *n_ids) {
    CLM_CHECK_ARG(v != NULL && n_ids != NULL && (word != NULL || len == 0) && (ids != NULL || cap == 0),
                  "clm_vocab_bpe: NULL argument");
    CLM_CHECK_ARG(len < UINT32_MAX / 2, "clm_vocab_bpe: a word of %zu bytes", len);
    *n_ids = 0;
    const uint8_t *w = (const uint8_t *)word;
    uint8_t *mapped = NULL;
    if (flags & CLM_BPE_BYTE_LEVEL) {             /* bytes as GPT-2's printable characters */
        mapped = malloc(2 * len + 1);
        if (mapped == NULL) return clm_error(CLM_ERR_OUT_OF_MEMORY, "clm_vocab_bpe: out of memory");
        size_t m = 0;
        for (size_t i = 0; i < len; i++) {
            const uint8_t b = w[i];
            mapped[m++] = v->byte_char[b][0];
            if (v->byte_char_len[b] == 2) mapped[m++] = v->byte_char[b][1];
        }
        w = mapped;
        len = m;
    }
    clm_status st = CLM_OK;
    bool whole = false;
    if (len > 0 && (flags & (CLM_BPE_IGNORE_MERGES | CLM_BPE_NEWLINE_TOKENS))) {
        bool newlines = (flags & CLM_BPE_NEWLINE_TOKENS) != 0;
        for (size_t i = 0; newlines && i < len; i++) newlines = w[i] == '\n';
        if ((flags & CLM_BPE_IGNORE_MERGES) || newlines) {
            const int32_t id = find_token(v, w, len);
            if (id >= 0) {
                whole = true;
                st = emit(id, ids, cap, n_ids);
            }
        }
    }
    if (!whole && st == CLM_OK) {
        symbol *syms = NULL;
        st = merge_word(v, MODE_BPE, w, len, &syms);
        if (st == CLM_OK) st = emit_symbols(v, MODE_BPE, flags, w, syms, len, -1, ids, cap, n_ids);
        free(syms);
    }
    free(mapped);
    return st;
}

clm_status clm_vocab_spm(const clm_vocab *v, const char *text, size_t len, int32_t unk_id, int32_t *ids,
                         int64_t cap, int64_t *n_ids) {
    CLM_CHECK_ARG(v != NULL && n_ids != NULL && (text != NULL || len == 0) && (ids != NULL || cap == 0),
                  "clm_vocab_spm: NULL argument");
    CLM_CHECK_ARG(len < UINT32_MAX / 2, "clm_vocab_spm: a text of %zu bytes", len);
    CLM_CHECK_ARG(unk_id < v->n_tokens, "clm_vocab_spm: unknown-token id %d out of range", unk_id);
    *n_ids = 0;
    symbol *syms = NULL;
    clm_status st = merge_word(v, MODE_SPM, (const uint8_t *)text, len, &syms);
    if (st == CLM_OK)
        st = emit_symbols(v, MODE_SPM, 0, (const uint8_t *)text, syms, len, unk_id < 0 ? -1 : unk_id, ids, cap,
                          n_ids);
    free(syms);
    return st;
}
