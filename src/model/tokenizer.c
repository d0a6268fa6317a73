/* tokenizer.c - byte-level BPE.
 *
 * The vocabulary is kept in raw bytes: each token's GPT-2 "byte-level" string (bytes mapped to
 * printable code points, e.g. 'Ġ' for a space) is turned back into the bytes it stands for at load.
 * Encoding then never builds byte-level strings: a piece starts as one symbol per byte and merges
 * look up (left id, right id) in a hash table of merge ranks.
 */
#include "model/tokenizer.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "util/alloc.h"

enum { TOKEN_NORMAL = 1, TOKEN_UNKNOWN = 2, TOKEN_CONTROL = 3, TOKEN_USER = 4, TOKEN_UNUSED = 5, TOKEN_BYTE = 6 };

typedef enum pre_kind {
    PRE_GPT2,   /* "gpt-2" (llama.cpp's name); "default" and "gpt2" in files written before it */
    PRE_SMOLLM, /* digits one by one, then GPT-2 */
} pre_kind;

typedef struct merge_slot {
    uint64_t key;     /* (left << 32 | right) + 1; 0 = empty */
    uint32_t rank;
    int32_t merged;   /* id of left+right */
} merge_slot;

struct mn_tokenizer {
    uint32_t n_vocab;
    char **piece;          /* [n_vocab] raw bytes of each token */
    uint32_t *piece_len;   /* [n_vocab] */
    uint8_t *type;         /* [n_vocab] token types */
    int32_t byte_id[256];  /* the single-byte token of each byte, -1 if none */
    int32_t *str_slots;    /* open addressing: raw bytes -> id (-1 empty) */
    size_t str_mask;
    merge_slot *merges;
    size_t merge_mask;
    pre_kind pre;
    int32_t bos, eos;
    int32_t eog[MN_TOK_MAX_EOG]; /* the tokens that end a generation (mn_tok_is_eog), eos first */
    uint32_t n_eog;
    bool add_bos;
    bool lossless;         /* every byte has a token: decode(encode(x)) == x for all x */
    uint32_t max_piece;    /* bytes of the longest piece */
    uint32_t max_ctrl;     /* bytes of the longest control token's text */
    int32_t *ctrl;         /* the control tokens with a text, by first byte, longest first within one */
    uint32_t n_ctrl;
    uint32_t ctrl_at[257]; /* ctrl[ctrl_at[b] .. ctrl_at[b + 1]) are those whose text starts with byte b */
};

/* ---- tokens buffer ----------------------------------------------------------------------------- */

mn_status mn_tokens_push(mn_tokens *t, int32_t id)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        int32_t *ids = mn_realloc(t->ids, cap * sizeof *ids);
        if (!ids)
            return MN_NOMEM;
        t->ids = ids;
        t->cap = cap;
    }
    t->ids[t->n++] = id;
    return MN_OK;
}

void mn_tokens_free(mn_tokens *t)
{
    mn_free(t->ids);
    memset(t, 0, sizeof *t);
}

/* ---- hashing ----------------------------------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static size_t pow2_at_least(size_t n)
{
    size_t c = 16;
    while (c < n)
        c <<= 1;
    return c;
}

static int32_t str_lookup(const mn_tokenizer *t, const char *s, size_t n)
{
    for (size_t i = hash_bytes(s, n) & t->str_mask;; i = (i + 1) & t->str_mask) {
        int32_t id = t->str_slots[i];
        if (id < 0)
            return -1;
        if (t->piece_len[id] == n && memcmp(t->piece[id], s, n) == 0)
            return id;
    }
}

static void str_insert(mn_tokenizer *t, int32_t id)
{
    size_t i = hash_bytes(t->piece[id], t->piece_len[id]) & t->str_mask;
    while (t->str_slots[i] >= 0) {
        int32_t o = t->str_slots[i];
        if (t->piece_len[o] == t->piece_len[id] && memcmp(t->piece[o], t->piece[id], t->piece_len[id]) == 0)
            return; /* a duplicate string keeps its first id, as the reference dictionaries do */
        i = (i + 1) & t->str_mask;
    }
    t->str_slots[i] = id;
}

static const merge_slot *merge_lookup(const mn_tokenizer *t, int32_t a, int32_t b)
{
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    for (size_t i = mix64(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        if (t->merges[i].key == key)
            return &t->merges[i];
        if (t->merges[i].key == 0)
            return NULL;
    }
}

/* ---- GPT-2 byte <-> code point map ------------------------------------------------------------ */

static int byte_is_printable(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174); }

/* cp_to_byte[cp] for cp < 324: the byte a GPT-2 byte-level code point stands for, or -1. */
static void build_cp_map(int16_t cp_to_byte[324])
{
    for (int i = 0; i < 324; i++)
        cp_to_byte[i] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        if (byte_is_printable(b))
            cp_to_byte[b] = (int16_t)b;
        else
            cp_to_byte[256 + extra++] = (int16_t)b;
    }
}

/* Turn a byte-level token string into raw bytes (into out, at most n bytes). Returns the length, or
 * -1 when the string holds a code point outside the byte map (then the token is taken literally). */
static long bytelevel_decode(const int16_t cp_to_byte[324], const char *s, size_t n, char *out)
{
    size_t i = 0, o = 0;
    while (i < n) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0 || cp >= 324 || cp_to_byte[cp] < 0)
            return -1;
        out[o++] = (char)cp_to_byte[cp];
        i += (size_t)k;
    }
    return (long)o;
}

/* ---- loading ----------------------------------------------------------------------------------- */

/* Control-token order for mn_tok_encode_special: by first byte, then longest first, then by id. */
typedef struct ctrl_key {
    uint32_t key;   /* first byte << 16 | (0xffff - length); lengths are at most 4096 */
    int32_t id;
} ctrl_key;

static int ctrl_cmp(const void *a, const void *b)
{
    const ctrl_key *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* The control tokens, for mn_tok_encode_special: bucketed by first byte so that a position of the
 * text only meets the tokens that can start there, longest first in a bucket so that the longest
 * match wins. */
static mn_status index_control(mn_tokenizer *t, mn_err *err)
{
    for (uint32_t i = 0; i < t->n_vocab; i++)
        if (t->type[i] == TOKEN_CONTROL && t->piece_len[i] > 0) {
            t->n_ctrl++;
            t->max_ctrl = t->piece_len[i] > t->max_ctrl ? t->piece_len[i] : t->max_ctrl;
        }
    if (!t->n_ctrl)
        return MN_OK;
    ctrl_key *keys = mn_malloc(t->n_ctrl * sizeof *keys);
    if (!keys || !(t->ctrl = mn_malloc(t->n_ctrl * sizeof *t->ctrl))) {
        mn_free(keys);
        return mn_fail(err, MN_NOMEM, "tokenizer: out of memory");
    }
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++)
        if (t->type[i] == TOKEN_CONTROL && t->piece_len[i] > 0)
            keys[n++] = (ctrl_key){(uint32_t)(uint8_t)t->piece[i][0] << 16 | (0xffffu - t->piece_len[i]), (int32_t)i};
    qsort(keys, n, sizeof *keys, ctrl_cmp);
    uint32_t k = 0;
    for (uint32_t b = 0; b < 256; b++) {
        t->ctrl_at[b] = k;
        while (k < n && keys[k].key >> 16 == b)
            t->ctrl[k] = keys[k].id, k++;
    }
    t->ctrl_at[256] = k;
    mn_free(keys);
    return MN_OK;
}

static mn_status load_vocab(mn_tokenizer *t, const gguf_file *f, mn_err *err)
{
    const gguf_kv *toks, *types = NULL;
    mn_status s = gguf_get_array(f, "tokenizer.ggml.tokens", GGUF_STRING, &toks, err);
    if (s != MN_OK)
        return s;
    if (toks->arr_n != t->n_vocab)
        return mn_fail(err, MN_INVALID, "tokenizer: %llu tokens but the embedding has %u rows",
                       (unsigned long long)toks->arr_n, t->n_vocab);
    if (gguf_find_kv(f, "tokenizer.ggml.token_type")) {
        if ((s = gguf_get_array(f, "tokenizer.ggml.token_type", GGUF_I32, &types, err)))
            return s;
        if (types->arr_n != t->n_vocab)
            return mn_fail(err, MN_INVALID, "tokenizer: token_type has %llu entries, expected %u",
                           (unsigned long long)types->arr_n, t->n_vocab);
    }
    gguf_str *strs = mn_malloc(t->n_vocab * sizeof *strs);
    t->piece = mn_calloc(t->n_vocab, sizeof *t->piece);
    t->piece_len = mn_calloc(t->n_vocab, sizeof *t->piece_len);
    t->type = mn_calloc(t->n_vocab, 1);
    t->str_mask = pow2_at_least(t->n_vocab * 2) - 1;
    t->str_slots = mn_malloc((t->str_mask + 1) * sizeof *t->str_slots);
    if (!strs || !t->piece || !t->piece_len || !t->type || !t->str_slots) {
        mn_free(strs);
        return mn_fail(err, MN_NOMEM, "tokenizer: out of memory");
    }
    memset(t->str_slots, 0xff, (t->str_mask + 1) * sizeof *t->str_slots);
    gguf_array_strings(toks, strs);
    int16_t cp_to_byte[324];
    build_cp_map(cp_to_byte);
    for (int b = 0; b < 256; b++)
        t->byte_id[b] = -1;
    s = MN_OK;
    for (uint32_t i = 0; i < t->n_vocab && s == MN_OK; i++) {
        int32_t ty = TOKEN_NORMAL;
        if (types)
            memcpy(&ty, types->arr_data + 4 * i, 4);
        t->type[i] = (uint8_t)(ty >= 0 && ty <= 6 ? ty : TOKEN_NORMAL);
        if (strs[i].len > 4096) {
            s = mn_fail(err, MN_INVALID, "tokenizer: token %u is %llu bytes long", i, (unsigned long long)strs[i].len);
            break;
        }
        if (!(t->piece[i] = mn_malloc(strs[i].len + 1))) {
            s = mn_fail(err, MN_NOMEM, "tokenizer: out of memory");
            break;
        }
        long n = t->type[i] == TOKEN_CONTROL ? -1 : bytelevel_decode(cp_to_byte, strs[i].ptr, strs[i].len, t->piece[i]);
        if (n < 0) { /* control tokens and literal strings keep their text */
            memcpy(t->piece[i], strs[i].ptr, strs[i].len);
            n = (long)strs[i].len;
        }
        t->piece_len[i] = (uint32_t)n;
        if (t->type[i] == TOKEN_NORMAL || t->type[i] == TOKEN_BYTE) { /* the pieces encode() emits */
            str_insert(t, (int32_t)i);
            t->max_piece = (uint32_t)n > t->max_piece ? (uint32_t)n : t->max_piece;
            if (n == 1 && t->byte_id[(uint8_t)t->piece[i][0]] < 0)
                t->byte_id[(uint8_t)t->piece[i][0]] = (int32_t)i;
        }
    }
    mn_free(strs);
    if (s == MN_OK)
        s = index_control(t, err);
    t->lossless = true;
    for (int b = 0; b < 256; b++)
        t->lossless = t->lossless && t->byte_id[b] >= 0;
    return s;
}

static mn_status load_merges(mn_tokenizer *t, const gguf_file *f, mn_err *err)
{
    const gguf_kv *mk;
    mn_status s = gguf_get_array(f, "tokenizer.ggml.merges", GGUF_STRING, &mk, err);
    if (s != MN_OK)
        return s;
    if (mk->arr_n > (1u << 24))
        return mn_fail(err, MN_INVALID, "tokenizer: %llu merges is absurd", (unsigned long long)mk->arr_n);
    gguf_str *ms = mn_malloc((mk->arr_n ? mk->arr_n : 1) * sizeof *ms);
    t->merge_mask = pow2_at_least(mk->arr_n * 2) - 1;
    t->merges = mn_calloc(t->merge_mask + 1, sizeof *t->merges);
    char *buf = mn_malloc(8192);
    if (!ms || !t->merges || !buf) {
        mn_free(ms);
        mn_free(buf);
        return mn_fail(err, MN_NOMEM, "tokenizer: out of memory");
    }
    gguf_array_strings(mk, ms);
    int16_t cp_to_byte[324];
    build_cp_map(cp_to_byte);
    s = MN_OK;
    for (uint32_t r = 0; r < mk->arr_n; r++) {
        const char *sp = ms[r].len ? memchr(ms[r].ptr + 1, ' ', ms[r].len - 1) : NULL;
        if (!sp || ms[r].len > 4096) {
            s = mn_fail(err, MN_INVALID, "tokenizer: merge %u is not 'left right'", r);
            break;
        }
        size_t ln = (size_t)(sp - ms[r].ptr), rn = ms[r].len - ln - 1;
        long la = bytelevel_decode(cp_to_byte, ms[r].ptr, ln, buf);
        long lb = la < 0 ? -1 : bytelevel_decode(cp_to_byte, sp + 1, rn, buf + la);
        if (la <= 0 || lb <= 0)
            continue; /* a merge of pieces that are not byte-level strings can never apply */
        int32_t a = str_lookup(t, buf, (size_t)la), b = str_lookup(t, buf + la, (size_t)lb);
        int32_t m = str_lookup(t, buf, (size_t)(la + lb));
        if (a < 0 || b < 0 || m < 0)
            continue; /* refers to tokens the vocabulary lacks: never applicable */
        uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
        size_t i = mix64(key) & t->merge_mask;
        while (t->merges[i].key && t->merges[i].key != key)
            i = (i + 1) & t->merge_mask;
        if (t->merges[i].key == 0) /* the first (lowest) rank of a repeated pair wins */
            t->merges[i] = (merge_slot){key, r, m};
    }
    mn_free(ms);
    mn_free(buf);
    return s;
}

/* An optional token id: -1 when the key is absent or not a token (a negative number); one past the
 * vocabulary is refused (an end of text no token can be would never end a generation). */
static mn_status optional_id(const gguf_file *f, const char *key, uint32_t n_vocab, int32_t *out, mn_err *err)
{
    uint64_t v;
    *out = -1;
    if (gguf_get_uint(f, key, &v, NULL) != MN_OK)
        return MN_OK;
    if (v >= n_vocab)
        return mn_fail(err, MN_INVALID, "tokenizer: %s = %llu is not a token (the vocabulary has %u)", key,
                       (unsigned long long)v, n_vocab);
    *out = (int32_t)v;
    return MN_OK;
}

/* The texts of control tokens that end a generation whatever the model's eos says, as llama.cpp
 * reads them (its "end of generation" set): SmolLM2-Instruct's eos is <|im_end|>, yet a completion
 * that writes <|endoftext|> has ended its document. */
static const char *const eog_texts[] = {"<|endoftext|>",   "<|im_end|>", "<|eot_id|>",
                                        "<|eom_id|>",      "<|end|>",    "<end_of_turn>",
                                        "<|end_of_text|>", "<EOT>",      "<end_of_utterance>"};

static void add_eog(mn_tokenizer *t, int32_t id)
{
    if (id < 0 || t->n_eog == MN_TOK_MAX_EOG)
        return;
    for (uint32_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return;
    t->eog[t->n_eog++] = id;
}

/* eos, the file's end-of-turn and end-of-message tokens where it names them, and the control tokens
 * of eog_texts. */
static mn_status find_eog(mn_tokenizer *t, const gguf_file *f, mn_err *err)
{
    int32_t eot, eom;
    mn_status s;
    if ((s = optional_id(f, "tokenizer.ggml.eot_token_id", t->n_vocab, &eot, err)) ||
        (s = optional_id(f, "tokenizer.ggml.eom_token_id", t->n_vocab, &eom, err)))
        return s;
    add_eog(t, t->eos);
    add_eog(t, eot);
    add_eog(t, eom);
    for (size_t i = 0; i < sizeof eog_texts / sizeof *eog_texts; i++)
        add_eog(t, mn_tok_control(t, eog_texts[i], strlen(eog_texts[i])));
    return MN_OK;
}

mn_status mn_tok_load(const gguf_file *f, uint32_t n_vocab, mn_tokenizer **out, mn_err *err)
{
    gguf_str model, pre;
    mn_status s = gguf_get_string(f, "tokenizer.ggml.model", &model, err);
    if (s != MN_OK)
        return s == MN_NOTFOUND ? mn_fail(err, MN_INVALID, "tokenizer: tokenizer.ggml.model is missing") : s;
    if (!gguf_str_eq(model, "gpt2"))
        return mn_fail(err, MN_UNSUPPORTED, "tokenizer: model '%.*s' is not supported (gpt2 is)",
                       (int)(model.len > 32 ? 32 : model.len), model.ptr);
    mn_tokenizer *t = mn_calloc(1, sizeof *t);
    if (!t)
        return mn_fail(err, MN_NOMEM, "tokenizer: out of memory");
    t->n_vocab = n_vocab;
    t->pre = PRE_GPT2;
    if (gguf_get_string(f, "tokenizer.ggml.pre", &pre, NULL) == MN_OK) {
        /* Other engines read "default" as their own default split (llama.cpp: punctuation runs and
         * digit triples apart), so our files say "gpt-2"; the old spellings still load as GPT-2. */
        if (gguf_str_eq(pre, "smollm"))
            t->pre = PRE_SMOLLM;
        else if (!gguf_str_eq(pre, "gpt-2") && !gguf_str_eq(pre, "default") && !gguf_str_eq(pre, "gpt2")) {
            s = mn_fail(err, MN_UNSUPPORTED,
                        "tokenizer: pre-tokenizer '%.*s' is not supported (gpt-2, default, gpt2, smollm are)",
                        (int)(pre.len > 32 ? 32 : pre.len), pre.ptr);
            goto fail;
        }
    }
    if ((s = load_vocab(t, f, err)) || (s = load_merges(t, f, err)) ||
        (s = optional_id(f, "tokenizer.ggml.bos_token_id", n_vocab, &t->bos, err)) ||
        (s = optional_id(f, "tokenizer.ggml.eos_token_id", n_vocab, &t->eos, err)) || (s = find_eog(t, f, err)))
        goto fail;
    if (gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &t->add_bos, NULL) != MN_OK)
        t->add_bos = false;
    *out = t;
    return MN_OK;
fail:
    mn_tok_free(t);
    return s;
}

void mn_tok_free(mn_tokenizer *t)
{
    if (!t)
        return;
    if (t->piece)
        for (uint32_t i = 0; i < t->n_vocab; i++)
            mn_free(t->piece[i]);
    mn_free(t->piece);
    mn_free(t->piece_len);
    mn_free(t->type);
    mn_free(t->str_slots);
    mn_free(t->merges);
    mn_free(t->ctrl);
    mn_free(t);
}

/* ---- pre-tokenizer ----------------------------------------------------------------------------- */

enum cls { C_SPACE, C_LETTER, C_NUMBER, C_OTHER };

typedef struct cp_t {
    int32_t cp;      /* code point, or -1 for a byte that is not valid UTF-8 */
    uint32_t off;    /* byte offset in the text */
    uint8_t len;     /* bytes */
    uint8_t cls;     /* enum cls */
} cp_t;

/* \s is Unicode White_Space: \t..\r, U+0085 and the Z categories. */
static uint8_t classify(int32_t cp)
{
    if (cp < 0)
        return C_OTHER;
    if ((cp >= 9 && cp <= 13) || cp == 0x85)
        return C_SPACE;
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_ZS: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP:
        return C_SPACE;
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
        return C_LETTER;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        return C_NUMBER;
    default:
        return C_OTHER;
    }
}

/* Length (in code points) of a contraction 's 't 're 've 'm 'll 'd at i (before e), or 0. */
static size_t contraction(const cp_t *c, size_t i, size_t e)
{
    if (c[i].cp != '\'' || i + 1 >= e)
        return 0;
    int32_t a = c[i + 1].cp, b = i + 2 < e ? c[i + 2].cp : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return 3;
    return 0;
}

/* The end of GPT-2's match starting at code point i, within [i, e). */
static size_t gpt2_match(const cp_t *c, size_t i, size_t e)
{
    size_t k = contraction(c, i, e);
    if (k)
        return i + k;
    size_t p = (c[i].cp == ' ' && i + 1 < e) ? i + 1 : i; /* ` ?` */
    uint8_t cl = c[p].cls;
    size_t j = p;
    if (cl != C_SPACE) { /* ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+` */
        while (j < e && c[j].cls == cl)
            j++;
        return j;
    }
    /* \s+(?!\S) keeps the last whitespace char for the next match when a non-space follows; a
     * single whitespace char before a non-space is matched by the final \s+ alone. */
    j = i;
    while (j < e && c[j].cls == C_SPACE)
        j++;
    if (j < e && j - i >= 2)
        j--;
    return j;
}

/* ---- BPE on one piece -------------------------------------------------------------------------- */

typedef struct sym {
    int32_t id;
    int32_t prev, next; /* -1 at the ends */
    uint32_t len;       /* bytes; 0 once merged into its left neighbour */
} sym;

typedef struct cand {
    uint32_t rank;
    int32_t left;       /* symbol index */
    int32_t a, b;       /* ids when queued: stale entries no longer match */
    int32_t merged;
} cand;

static int cand_less(const cand *x, const cand *y)
{
    return x->rank < y->rank || (x->rank == y->rank && x->left < y->left);
}

static void heap_push(cand *h, size_t *n, cand c)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static cand heap_pop(cand *h, size_t *n)
{
    cand top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const cand *best = &last;
        if (l < *n && cand_less(&h[l], best)) {
            m = l;
            best = &h[l];
        }
        if (r < *n && cand_less(&h[r], best))
            m = r;
        if (m == i)
            break;
        h[i] = h[m];
        i = m;
    }
    if (*n)
        h[i] = last;
    return top;
}

static void queue_pair(const mn_tokenizer *t, const sym *sy, int32_t left, cand *h, size_t *nh)
{
    if (left < 0 || sy[left].next < 0 || sy[left].id < 0 || sy[sy[left].next].id < 0)
        return;
    const merge_slot *m = merge_lookup(t, sy[left].id, sy[sy[left].next].id);
    if (m)
        heap_push(h, nh, (cand){m->rank, left, sy[left].id, sy[sy[left].next].id, m->merged});
}

/* Scratch for one encode call, grown as pieces demand. */
typedef struct scratch {
    sym *sy;
    cand *heap;
    size_t cap;
} scratch;

static mn_status bpe_piece(const mn_tokenizer *t, scratch *sc, const char *s, size_t n, mn_tokens *out)
{
    if (n > sc->cap) {
        size_t cap = n * 2;
        sym *sy = mn_realloc(sc->sy, cap * sizeof *sy);
        if (!sy)
            return MN_NOMEM;
        sc->sy = sy;
        cand *h = mn_realloc(sc->heap, 3 * cap * sizeof *h); /* n-1 pairs + 2 per merge */
        if (!h)
            return MN_NOMEM;
        sc->heap = h;
        sc->cap = cap;
    }
    sym *sy = sc->sy;
    for (size_t i = 0; i < n; i++)
        sy[i] = (sym){t->byte_id[(uint8_t)s[i]], (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1, 1};
    size_t nh = 0;
    for (size_t i = 0; i + 1 < n; i++)
        queue_pair(t, sy, (int32_t)i, sc->heap, &nh);
    while (nh) {
        cand c = heap_pop(sc->heap, &nh);
        sym *l = &sy[c.left];
        if (l->len == 0 || l->id != c.a || l->next < 0 || sy[l->next].id != c.b)
            continue; /* stale */
        sym *r = &sy[l->next];
        l->id = c.merged;
        l->len += r->len;
        l->next = r->next;
        if (r->next >= 0)
            sy[r->next].prev = c.left;
        r->len = 0;
        queue_pair(t, sy, l->prev, sc->heap, &nh);
        queue_pair(t, sy, c.left, sc->heap, &nh);
    }
    for (int32_t i = 0; i >= 0; i = sy[i].next) {
        /* A byte the vocabulary has no token for never merges and is dropped, as the reference
         * tokenizers do; only vocabularies without all 256 bytes (mn_tok_is_lossless) have them. */
        mn_status st = sy[i].id >= 0 ? mn_tokens_push(out, sy[i].id) : MN_OK;
        if (st != MN_OK)
            return st;
    }
    return MN_OK;
}

mn_status mn_tok_encode(const mn_tokenizer *t, const char *text, size_t len, bool add_bos, mn_tokens *out)
{
    mn_status s = MN_OK;
    if (add_bos && t->add_bos && t->bos >= 0 && (s = mn_tokens_push(out, t->bos)) != MN_OK)
        return s;
    if (len == 0)
        return MN_OK;
    if (len > UINT32_MAX)
        return MN_INVALID;
    cp_t *c = mn_malloc(len * sizeof *c);
    if (!c)
        return MN_NOMEM;
    size_t n = 0;
    for (size_t off = 0; off < len; n++) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const uint8_t *)text + off, (utf8proc_ssize_t)(len - off), &cp);
        if (k <= 0) { /* not valid UTF-8: one byte of class "other" */
            cp = -1;
            k = 1;
        }
        c[n] = (cp_t){cp, (uint32_t)off, (uint8_t)k, classify(cp)};
        off += (size_t)k;
    }
    scratch sc = {0};
    size_t i = 0;
    while (i < n && s == MN_OK) {
        size_t seg_end = n;
        if (t->pre == PRE_SMOLLM) {
            if (c[i].cls == C_NUMBER) { /* \p{N}: one code point, its own piece */
                s = bpe_piece(t, &sc, text + c[i].off, c[i].len, out);
                i++;
                continue;
            }
            seg_end = i;
            while (seg_end < n && c[seg_end].cls != C_NUMBER)
                seg_end++;
        }
        while (i < seg_end && s == MN_OK) {
            size_t j = gpt2_match(c, i, seg_end);
            s = bpe_piece(t, &sc, text + c[i].off, c[j - 1].off + c[j - 1].len - c[i].off, out);
            i = j;
        }
    }
    mn_free(sc.sy);
    mn_free(sc.heap);
    mn_free(c);
    return s;
}

/* The control token whose text starts text[0..len), longest first; -1 when none does. */
int32_t mn_tok_control(const mn_tokenizer *t, const char *text, size_t len)
{
    if (!len)
        return -1;
    uint8_t b = (uint8_t)text[0];
    for (uint32_t k = t->ctrl_at[b]; k < t->ctrl_at[b + 1]; k++) {
        int32_t id = t->ctrl[k];
        if (t->piece_len[id] == len && !memcmp(text, t->piece[id], len))
            return id;
    }
    return -1;
}

static int32_t control_at(const mn_tokenizer *t, const char *text, size_t len)
{
    uint8_t b = (uint8_t)text[0];
    for (uint32_t k = t->ctrl_at[b]; k < t->ctrl_at[b + 1]; k++) {
        int32_t id = t->ctrl[k];
        if (t->piece_len[id] <= len && !memcmp(text, t->piece[id], t->piece_len[id]))
            return id;
    }
    return -1;
}

mn_status mn_tok_encode_special(const mn_tokenizer *t, const char *text, size_t len, bool add_bos, mn_tokens *out)
{
    mn_status s = MN_OK;
    if (add_bos && t->add_bos && t->bos >= 0 && (s = mn_tokens_push(out, t->bos)) != MN_OK)
        return s;
    size_t plain = 0; /* start of the text not yet encoded */
    for (size_t i = 0; i < len && s == MN_OK;) {
        int32_t id = control_at(t, text + i, len - i);
        if (id < 0) {
            i++;
            continue;
        }
        if ((s = mn_tok_encode(t, text + plain, i - plain, false, out)) == MN_OK)
            s = mn_tokens_push(out, id);
        i += t->piece_len[id];
        plain = i;
    }
    return s == MN_OK ? mn_tok_encode(t, text + plain, len - plain, false, out) : s;
}

const char *mn_tok_text(const mn_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || (uint32_t)id >= t->n_vocab) {
        *len = 0;
        return "";
    }
    *len = t->piece_len[id];
    return t->piece[id];
}

const char *mn_tok_piece(const mn_tokenizer *t, int32_t id, size_t *len)
{
    if (mn_tok_is_control(t, id)) {
        *len = 0;
        return "";
    }
    return mn_tok_text(t, id, len);
}

int32_t mn_tok_bos(const mn_tokenizer *t) { return t->bos; }
int32_t mn_tok_eos(const mn_tokenizer *t) { return t->eos; }
bool mn_tok_is_eog(const mn_tokenizer *t, int32_t id)
{
    for (uint32_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return true;
    return false;
}
uint32_t mn_tok_n_vocab(const mn_tokenizer *t) { return t->n_vocab; }
bool mn_tok_is_control(const mn_tokenizer *t, int32_t id)
{
    return id >= 0 && (uint32_t)id < t->n_vocab && t->type[id] == TOKEN_CONTROL;
}
bool mn_tok_is_lossless(const mn_tokenizer *t) { return t->lossless; }

size_t mn_tok_min_tokens(const mn_tokenizer *t, const char *text, size_t len, bool add_bos, bool special)
{
    uint32_t most = special && t->max_ctrl > t->max_piece ? t->max_ctrl : t->max_piece; /* bytes a token */
    if (!most)
        return 0;
    size_t counted = len; /* bytes that end up in some token */
    for (size_t i = 0; !t->lossless && i < len; i++)
        counted -= t->byte_id[(uint8_t)text[i]] < 0;
    return (add_bos && t->add_bos && t->bos >= 0) + (counted + most - 1) / most;
}
