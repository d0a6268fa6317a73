/* kv.c - paged KV block pool. */
#include "mem/kv.h"

#include "util/alloc.h"

/* The bytes of one layer's K (or V): checked against overflow when the pool was made. */
static size_t layer_bytes(const mn_kv_pool *p)
{
    return (size_t)p->n_blocks * p->block_size * p->kv_dim * sizeof(float);
}

static mn_status pool_new(uint32_t n_layers, uint32_t kv_dim, uint32_t block_size, uint32_t n_blocks, int storage,
                          mn_kv_pool **out, mn_err *err)
{
    if (!n_layers || !kv_dim || !block_size || !n_blocks)
        return mn_fail(err, MN_INVALID, "kv: layers, kv_dim, block_size and n_blocks must be positive");
    size_t per_layer;
    if (!mn_mul_ok((size_t)n_blocks * block_size, (size_t)kv_dim * sizeof(float), &per_layer))
        return mn_fail(err, MN_INVALID, "kv: pool size overflows");
    mn_kv_pool *p = mn_calloc(1, sizeof *p);
    if (!p)
        return mn_fail(err, MN_NOMEM, "kv: out of memory");
    p->n_layers = n_layers;
    p->kv_dim = kv_dim;
    p->block_size = block_size;
    p->n_blocks = n_blocks;
    p->free_list = mn_malloc((size_t)n_blocks * sizeof *p->free_list);
    if (!p->free_list)
        goto nomem;
    if (storage) {
        p->k = mn_calloc(n_layers, sizeof *p->k);
        p->v = mn_calloc(n_layers, sizeof *p->v);
        if (!p->k || !p->v)
            goto nomem;
        for (uint32_t l = 0; l < n_layers; l++) {
            p->k[l] = mn_alloc_pages(per_layer);
            p->v[l] = mn_alloc_pages(per_layer);
            if (!p->k[l] || !p->v[l])
                goto nomem;
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

mn_status mn_kv_pool_new(uint32_t n_layers, uint32_t kv_dim, uint32_t block_size, uint32_t n_blocks,
                         mn_kv_pool **out, mn_err *err)
{
    return pool_new(n_layers, kv_dim, block_size, n_blocks, 1, out, err);
}

mn_status mn_kv_pool_new_tables(uint32_t n_layers, uint32_t kv_dim, uint32_t block_size, uint32_t n_blocks,
                                mn_kv_pool **out, mn_err *err)
{
    return pool_new(n_layers, kv_dim, block_size, n_blocks, 0, out, err);
}

void mn_kv_pool_free(mn_kv_pool *p)
{
    if (!p)
        return;
    for (uint32_t l = 0; l < p->n_layers; l++) {
        if (p->k)
            mn_free_pages(p->k[l], layer_bytes(p));
        if (p->v)
            mn_free_pages(p->v[l], layer_bytes(p));
    }
    mn_free(p->k);
    mn_free(p->v);
    mn_free(p->free_list);
    mn_free(p);
}

mn_status mn_kv_reserve(mn_kv_pool *p, mn_kv_seq *s, uint32_t n)
{
    uint32_t need = mn_kv_blocks_for(p, n);
    if (need <= s->n_blocks)
        return MN_OK;
    if (need - s->n_blocks > p->n_free)
        return MN_BUSY;
    if (need > s->cap) {
        uint32_t cap = s->cap ? s->cap : 4;
        while (cap < need)
            cap *= 2;
        uint32_t *b = mn_realloc(s->blocks, (size_t)cap * sizeof *b);
        if (!b)
            return MN_NOMEM;
        s->blocks = b;
        s->cap = cap;
    }
    while (s->n_blocks < need)
        s->blocks[s->n_blocks++] = p->free_list[--p->n_free];
    return MN_OK;
}

void mn_kv_truncate(mn_kv_pool *p, mn_kv_seq *s, uint32_t n)
{
    if (n < s->len)
        s->len = n;
    uint32_t keep = mn_kv_blocks_for(p, s->len);
    while (s->n_blocks > keep)
        p->free_list[p->n_free++] = s->blocks[--s->n_blocks];
}

void mn_kv_seq_release(mn_kv_pool *p, mn_kv_seq *s)
{
    mn_kv_truncate(p, s, 0);
    mn_free(s->blocks);
    s->blocks = NULL;
    s->cap = 0;
}
