/* kv.c - paged KV block pool, and its prefix cache.
 *
 * The prefix cache's index: each cached block under the hash of its tokens and of the block before
 * it in its sequence (its parent, NONE for a sequence's first), in chained buckets; the idle ones
 * (ref 0) also on a list, oldest first, from which reservations take. A released sequence's blocks
 * join the list deepest first, and a chain is adopted from its first block, so parents are newer
 * than their children and outlive them. Should a parent still go first and its id be filed again
 * for other tokens, its old children must not match the new block: a block's generation counts its
 * filings and a child holds its parent's (the hash alone would only make a false match unlikely). */
#include "mem/kv.h"

#include <string.h>

#include "util/alloc.h"

#define NONE UINT32_MAX

typedef struct mn_kv_prefix {
    int32_t *tokens;      /* [n_blocks][block_size]: a cached block's tokens */
    uint32_t *parent;     /* [n_blocks] */
    uint32_t *gen;        /* [n_blocks] filings of each block */
    uint32_t *parent_gen; /* [n_blocks] the parent's generation when this block was filed */
    uint64_t *hash;       /* [n_blocks]: of parent's hash and tokens */
    uint8_t *cached;      /* [n_blocks] in the index */
    uint32_t *bucket;     /* [n_buckets] first block of each chain, or NONE */
    uint32_t *chain;      /* [n_blocks] next block in its bucket */
    uint32_t n_buckets;   /* a power of two */
    uint32_t *older, *newer; /* [n_blocks] the idle list's links */
    uint32_t oldest, newest;
    uint32_t *dup;        /* [n_blocks] mn_kv_seq_release_prefix's scratch */
} mn_kv_prefix;

int mn_kv_type_parse(const char *name)
{
    return !strcmp(name, "f32") ? MN_KV_F32 : !strcmp(name, "f16") ? MN_KV_F16 : -1;
}

const char *mn_kv_type_name(mn_kv_type t) { return t == MN_KV_F16 ? "f16" : "f32"; }

static mn_status pool_new(uint32_t n_layers, uint32_t kv_dim, uint32_t block_size, uint32_t n_blocks,
                          mn_kv_type type, int storage, mn_kv_pool **out, mn_err *err)
{
    if (!n_layers || !kv_dim || !block_size || !n_blocks)
        return mn_fail(err, MN_INVALID, "kv: layers, kv_dim, block_size and n_blocks must be positive");
    if (type != MN_KV_F32 && type != MN_KV_F16)
        return mn_fail(err, MN_INVALID, "kv: unknown element type %d", (int)type);
    /* a block: every layer's K rows, then its V rows, each on a cache line of its own */
    size_t row_bytes = (size_t)kv_dim * mn_kv_elem_bytes(type), rows_bytes, block_stride, store_bytes;
    if (!mn_mul_ok(block_size, row_bytes, &rows_bytes) || rows_bytes > SIZE_MAX - 63 ||
        !mn_mul_ok((rows_bytes + 63) / 64 * 64, 2 * (size_t)n_layers, &block_stride) ||
        !mn_mul_ok(block_stride, n_blocks, &store_bytes))
        return mn_fail(err, MN_INVALID, "kv: pool size overflows");
    rows_bytes = (rows_bytes + 63) / 64 * 64;
    mn_kv_pool *p = mn_calloc(1, sizeof *p);
    if (!p)
        return mn_fail(err, MN_NOMEM, "kv: out of memory");
    p->n_layers = n_layers;
    p->kv_dim = kv_dim;
    p->block_size = block_size;
    p->n_blocks = n_blocks;
    p->type = type;
    p->row_bytes = row_bytes;
    p->free_list = mn_malloc((size_t)n_blocks * sizeof *p->free_list);
    p->ref = mn_calloc(n_blocks, sizeof *p->ref);
    if (!p->free_list || !p->ref)
        goto nomem;
    if (storage) {
        p->k = mn_calloc(n_layers, sizeof *p->k);
        p->v = mn_calloc(n_layers, sizeof *p->v);
        if (!p->k || !p->v)
            goto nomem;
        /* One mapping, block by block (kv.h): a mapping per array rounded each up to a 2 MiB page,
         * so a small pool (minions-generate's, a test's) took 2 MiB per array, and its first pass
         * zeroed them all (SmolLM2's 60 arrays: 120 MB, 11-300 ms of a 3-token prompt on these VMs);
         * one mapping of arrays, a layer's blocks together, still had a request's first blocks in
         * one page per array. */
        p->block_stride = block_stride;
        p->store_bytes = store_bytes;
        if (!(p->store = mn_alloc_pages(p->store_bytes)))
            goto nomem;
        for (uint32_t l = 0; l < n_layers; l++) {
            p->k[l] = (char *)p->store + (2 * (size_t)l) * rows_bytes;
            p->v[l] = (char *)p->store + (2 * (size_t)l + 1) * rows_bytes;
        }
    }
    /* Lowest ids on top of the stack, so a fresh pool hands out blocks 0, 1, 2, ... */
    for (uint32_t i = 0; i < n_blocks; i++)
        p->free_list[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    *out = p;
    return MN_OK;
nomem:
    mn_kv_pool_free(p);
    return mn_fail(err, MN_NOMEM, "kv: cannot allocate %u blocks of %u tokens x %u layers", n_blocks,
                   block_size, n_layers);
}

mn_status mn_kv_pool_new(uint32_t n_layers, uint32_t kv_dim, uint32_t block_size, uint32_t n_blocks, mn_kv_type type,
                         mn_kv_pool **out, mn_err *err)
{
    return pool_new(n_layers, kv_dim, block_size, n_blocks, type, 1, out, err);
}

mn_status mn_kv_pool_new_tables(uint32_t n_layers, uint32_t kv_dim, uint32_t block_size, uint32_t n_blocks,
                                mn_kv_type type, mn_kv_pool **out, mn_err *err)
{
    return pool_new(n_layers, kv_dim, block_size, n_blocks, type, 0, out, err);
}

void mn_kv_pool_free(mn_kv_pool *p)
{
    if (!p)
        return;
    mn_free_pages(p->store, p->store_bytes);
    mn_free(p->k);
    mn_free(p->v);
    mn_free(p->free_list);
    mn_free(p->ref);
    mn_kv_prefix *c = p->prefix;
    if (c) {
        void *bufs[] = {c->tokens, c->parent, c->gen, c->parent_gen, c->hash, c->cached, c->bucket, c->chain,
                        c->older, c->newer, c->dup};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
            mn_free(bufs[i]);
        mn_free(c);
    }
    mn_free(p);
}

/* ---- the prefix cache ------------------------------------------------------------------------ */

mn_status mn_kv_prefix_enable(mn_kv_pool *p)
{
    if (p->prefix)
        return MN_OK;
    mn_kv_prefix *c = mn_calloc(1, sizeof *c);
    if (!c)
        return MN_NOMEM;
    size_t n = p->n_blocks;
    c->n_buckets = 1;
    while (c->n_buckets < n)
        c->n_buckets *= 2;
    c->tokens = mn_malloc(n * p->block_size * sizeof *c->tokens);
    c->parent = mn_malloc(n * sizeof *c->parent);
    c->gen = mn_calloc(n, sizeof *c->gen);
    c->parent_gen = mn_malloc(n * sizeof *c->parent_gen);
    c->hash = mn_malloc(n * sizeof *c->hash);
    c->cached = mn_calloc(n, 1);
    c->bucket = mn_malloc(c->n_buckets * sizeof *c->bucket);
    c->chain = mn_malloc(n * sizeof *c->chain);
    c->older = mn_malloc(n * sizeof *c->older);
    c->newer = mn_malloc(n * sizeof *c->newer);
    c->dup = mn_malloc(n * sizeof *c->dup);
    p->prefix = c; /* freed with the pool, even when incomplete */
    if (!c->tokens || !c->parent || !c->gen || !c->parent_gen || !c->hash || !c->cached || !c->bucket || !c->chain ||
        !c->older || !c->newer || !c->dup)
        return MN_NOMEM;
    memset(c->bucket, 0xff, c->n_buckets * sizeof *c->bucket);
    c->oldest = c->newest = NONE;
    return MN_OK;
}

/* FNV-1a over the parent's hash and a block's tokens. */
static uint64_t block_hash(uint64_t parent, const int32_t *t, uint32_t n)
{
    uint64_t h = 1469598103934665603ull ^ parent;
    for (uint32_t i = 0; i < n; i++)
        for (int b = 0; b < 4; b++)
            h = (h ^ (((uint32_t)t[i] >> (8 * b)) & 0xff)) * 1099511628211ull;
    return h;
}

/* The cached block holding tokens t after block `parent` (hash h), or NONE. */
static uint32_t find(const mn_kv_pool *p, uint64_t h, uint32_t parent, const int32_t *t)
{
    const mn_kv_prefix *c = p->prefix;
    for (uint32_t b = c->bucket[h & (c->n_buckets - 1)]; b != NONE; b = c->chain[b])
        if (c->hash[b] == h && c->parent[b] == parent && (parent == NONE || c->parent_gen[b] == c->gen[parent]) &&
            !memcmp(c->tokens + (size_t)b * p->block_size, t, p->block_size * sizeof *t))
            return b;
    return NONE;
}

static void idle_unlink(mn_kv_prefix *c, uint32_t b)
{
    *(c->older[b] != NONE ? &c->newer[c->older[b]] : &c->oldest) = c->newer[b];
    *(c->newer[b] != NONE ? &c->older[c->newer[b]] : &c->newest) = c->older[b];
}

static void idle_push(mn_kv_prefix *c, uint32_t b)
{
    c->older[b] = c->newest;
    c->newer[b] = NONE;
    *(c->newest != NONE ? &c->newer[c->newest] : &c->oldest) = b;
    c->newest = b;
}

/* The oldest idle block out of the cache and onto the free list. */
static void evict_one(mn_kv_pool *p)
{
    mn_kv_prefix *c = p->prefix;
    uint32_t b = c->oldest, *at = &c->bucket[c->hash[b] & (c->n_buckets - 1)];
    idle_unlink(c, b);
    while (*at != b)
        at = &c->chain[*at];
    *at = c->chain[b];
    c->cached[b] = 0;
    p->n_idle--;
    p->free_list[p->n_free++] = b;
}

/* One table lets go of block b: to the idle list if it is cached, else to the free list. */
static void unref(mn_kv_pool *p, uint32_t b)
{
    if (--p->ref[b])
        return;
    if (p->prefix && p->prefix->cached[b]) {
        idle_push(p->prefix, b);
        p->n_idle++;
    } else {
        p->free_list[p->n_free++] = b;
    }
}

static mn_status grow_table(mn_kv_seq *s, uint32_t need)
{
    if (need <= s->cap)
        return MN_OK;
    uint32_t cap = s->cap ? s->cap : 4;
    while (cap < need)
        cap *= 2;
    uint32_t *b = mn_realloc(s->blocks, (size_t)cap * sizeof *b);
    if (!b)
        return MN_NOMEM;
    s->blocks = b;
    s->cap = cap;
    return MN_OK;
}

uint32_t mn_kv_adopt(mn_kv_pool *p, mn_kv_seq *s, const int32_t *tokens, uint32_t n)
{
    mn_kv_prefix *c = p->prefix;
    if (!c || s->n_blocks)
        return 0;
    uint64_t h = 0;
    uint32_t parent = NONE;
    for (uint32_t i = 0; (i + 1) * p->block_size <= n; i++) {
        const int32_t *t = tokens + (size_t)i * p->block_size;
        h = block_hash(h, t, p->block_size);
        uint32_t b = find(p, h, parent, t);
        if (b == NONE || grow_table(s, i + 1) != MN_OK)
            break;
        if (p->ref[b]++ == 0) {
            idle_unlink(c, b);
            p->n_idle--;
        }
        s->blocks[s->n_blocks++] = b;
        parent = b;
    }
    s->len = s->n_blocks * p->block_size;
    return s->len;
}

void mn_kv_seq_release_prefix(mn_kv_pool *p, mn_kv_seq *s, const int32_t *tokens)
{
    mn_kv_prefix *c = p->prefix;
    uint32_t n_full = c ? s->len / p->block_size : 0;
    /* per full block, the cached block that already held its tokens when it is not the block itself
     * (another sequence computed the same prefix meanwhile), else NONE */
    uint32_t *dup = c ? c->dup : NULL;
    uint64_t h = 0;
    for (uint32_t i = 0, parent = NONE; i < n_full; i++) {
        const int32_t *t = tokens + (size_t)i * p->block_size;
        uint32_t b = s->blocks[i];
        h = block_hash(h, t, p->block_size);
        uint32_t same = find(p, h, parent, t);
        if (same == NONE) { /* file b */
            memcpy(c->tokens + (size_t)b * p->block_size, t, p->block_size * sizeof *t);
            c->parent[b] = parent;
            c->parent_gen[b] = parent == NONE ? 0 : c->gen[parent];
            c->gen[b]++;
            c->hash[b] = h;
            c->cached[b] = 1;
            uint32_t *head = &c->bucket[h & (c->n_buckets - 1)];
            c->chain[b] = *head;
            *head = b;
            same = b;
        }
        dup[i] = same == b ? NONE : same;
        parent = same;
    }
    /* Deepest first, so that a chain's parents are newer idle blocks than its children and are
     * evicted after them; a duplicate's block is freed and the block it duplicates moved up, if
     * idle. */
    while (s->n_blocks > 0) {
        uint32_t i = --s->n_blocks;
        unref(p, s->blocks[i]);
        if (i < n_full && dup[i] != NONE && !p->ref[dup[i]]) {
            idle_unlink(c, dup[i]);
            idle_push(c, dup[i]);
        }
    }
    mn_kv_seq_release(p, s); /* the table */
}

bool mn_kv_fits(const mn_kv_pool *p, const mn_kv_seq *s, uint32_t n)
{
    uint32_t need = mn_kv_blocks_for(p, n);
    return need <= s->n_blocks || need - s->n_blocks <= p->n_free + p->n_idle;
}

mn_status mn_kv_reserve(mn_kv_pool *p, mn_kv_seq *s, uint32_t n)
{
    uint32_t need = mn_kv_blocks_for(p, n);
    if (need <= s->n_blocks)
        return MN_OK;
    if (!mn_kv_fits(p, s, n))
        return MN_BUSY;
    if (grow_table(s, need) != MN_OK)
        return MN_NOMEM;
    while (p->n_free < need - s->n_blocks)
        evict_one(p);
    while (s->n_blocks < need) {
        uint32_t b = p->free_list[--p->n_free];
        p->ref[b] = 1;
        s->blocks[s->n_blocks++] = b;
    }
    return MN_OK;
}

void mn_kv_truncate(mn_kv_pool *p, mn_kv_seq *s, uint32_t n)
{
    if (n < s->len)
        s->len = n;
    uint32_t keep = mn_kv_blocks_for(p, s->len);
    while (s->n_blocks > keep)
        unref(p, s->blocks[--s->n_blocks]);
}

void mn_kv_seq_release(mn_kv_pool *p, mn_kv_seq *s)
{
    mn_kv_truncate(p, s, 0);
    mn_free(s->blocks);
    s->blocks = NULL;
    s->cap = 0;
}
