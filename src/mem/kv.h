/* kv.h - paged KV cache: a pool of fixed-size blocks per model and a block table per sequence.
 *
 * Storage: block by block. A block holds, for every layer in turn, its K rows and then its V rows,
 * block_size rows of kv_dim elements of the pool's type each (floats, or half floats: MN_KV_F16,
 * half the memory and half the bytes attention reads a token, what bounds decoding after long
 * contexts; the rows are rounded to nearest), each layer's K and V starting on a cache line. So
 * layer l's K is an array of n_blocks blocks of block_size rows, block_stride bytes apart, from
 * k[l]. A sequence's position p lives in block table[p / block_size], slot p % block_size. Blocks come from one free
 * list; mn_kv_reserve grows a table, mn_kv_truncate shrinks a sequence (rollback of rejected drafts)
 * and returns whole blocks past the new length, mn_kv_seq_release returns all of them. Accounting
 * (mn_kv_used) is exact: it is zero again when every sequence is released.
 *
 * Memory: one mapping from mn_alloc_pages (2 MiB pages, as the CPU backend's weights: attention
 * reads rows scattered over many blocks, and 16 sequences' rows in 4 KiB pages cost a TLB miss for
 * nearly every block; decode of 16 sequences of the bundled target ran 1.09-1.26x faster in 2 MiB
 * pages, docs/runtime.md). Pages are committed when first written, and a fresh pool hands out its
 * lowest blocks first, so a pool costs what its busiest moment used, rounded up to one 2 MiB page:
 * a block's layers lie together, so a short request touches a page or two, where an array per layer
 * and K/V touched one page each (SmolLM2: 60 pages, 120 MB, zeroed in a server's first request).
 *
 * The prefix cache (mn_kv_prefix_enable): a block whose positions all hold known tokens outlives
 * the sequence that computed it. mn_kv_seq_release_prefix files each full block of a sequence
 * under its tokens and the block before it, and a block no table holds stays in the cache (idle)
 * until a reservation needs its room (the least recently idle first, the deepest of a sequence
 * before its parents). mn_kv_adopt starts an empty sequence with the longest chain of cached
 * blocks matching its first tokens, so those positions are not computed again: the forward pass is
 * batch-invariant, so their K/V are the bits the sequence would have computed itself. Tokens are
 * compared whole (the hash only finds candidates), and a shared block is never written: a holder
 * appends past it and truncates no lower than what it adopted. Blocks are counted by the tables
 * holding them (ref), so mn_kv_used counts held blocks only: idle cached ones are as good as free.
 *
 * Thread: not thread-safe. One owner (the kvmem actor in the server, the caller in tools) changes
 * tables; the compute backend only reads tables and writes K/V rows of positions the owner reserved.
 */
#ifndef MN_KV_H
#define MN_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

/* The element type of a pool's K and V rows. */
typedef enum mn_kv_type {
    MN_KV_F32, /* float: the rows as the pass computed them */
    MN_KV_F16, /* IEEE half float, rounded to nearest even (cpu/matmul.h's mn_to_f16) */
} mn_kv_type;

typedef struct mn_kv_pool {
    uint32_t n_layers;
    uint32_t kv_dim;       /* n_kv_heads * head_dim */
    uint32_t block_size;   /* tokens per block */
    uint32_t n_blocks;
    mn_kv_type type;       /* the rows' elements */
    size_t row_bytes;      /* kv_dim elements of that type */
    size_t block_stride;   /* bytes from a block to the next in every layer's K and V (0: a pool of tables) */
    void **k;              /* [n_layers] -> block 0's K rows of the layer, block b's b * block_stride on */
    void **v;              /* the same for V */
    void *store;           /* the one mapping every layer's K and V lie in (NULL: a pool of tables) */
    size_t store_bytes;
    uint32_t *free_list;   /* stack of free block ids */
    uint32_t n_free;
    uint32_t *ref;         /* [n_blocks] tables holding each block */
    struct mn_kv_prefix *prefix; /* the prefix cache, or NULL */
    uint32_t n_idle;       /* cached blocks no table holds */
} mn_kv_pool;

typedef struct mn_kv_seq {
    uint32_t len;          /* positions [0, len) hold valid K/V */
    uint32_t n_blocks;     /* blocks owned */
    uint32_t cap;          /* capacity of blocks[] */
    uint32_t *blocks;      /* block table */
} mn_kv_seq;

/* "f32" / "f16" (-1 for any other name), and back. */
int mn_kv_type_parse(const char *name);
const char *mn_kv_type_name(mn_kv_type t);
/* The bytes of one element of a row of `type`. */
static inline size_t mn_kv_elem_bytes(mn_kv_type type) { return type == MN_KV_F16 ? 2 : 4; }

/* A pool of n_blocks blocks of block_size tokens, rows of `type`. MN_NOMEM / MN_INVALID with a
 * message. */
mn_status mn_kv_pool_new(uint32_t n_layers, uint32_t kv_dim, uint32_t block_size, uint32_t n_blocks, mn_kv_type type,
                         mn_kv_pool **out, mn_err *err);
/* The same pool without storage (k and v are NULL; mn_kv_k / mn_kv_v must not be called): for an
 * owner that keeps K/V elsewhere, as the CUDA backend does in device memory, and uses the pool for
 * the block tables and the accounting only (type: the elements it keeps there). */
mn_status mn_kv_pool_new_tables(uint32_t n_layers, uint32_t kv_dim, uint32_t block_size, uint32_t n_blocks,
                                mn_kv_type type, mn_kv_pool **out, mn_err *err);
void mn_kv_pool_free(mn_kv_pool *p);

/* Make positions [0, n) addressable (n may exceed len: the caller will write them next), taking
 * free blocks, then idle cached ones. MN_BUSY when the pool has too few (nothing is taken then),
 * MN_NOMEM when the table cannot grow. */
mn_status mn_kv_reserve(mn_kv_pool *p, mn_kv_seq *s, uint32_t n);
/* Whether mn_kv_reserve(p, s, n) finds blocks enough (it may still fail with MN_NOMEM). Takes nothing:
 * an owner reserving in several pools asks each first, so that no pool evicts cached blocks for a
 * reservation another pool then refuses. */
bool mn_kv_fits(const mn_kv_pool *p, const mn_kv_seq *s, uint32_t n);
/* Drop positions [n, len) (n <= len) and return blocks no longer needed to the pool. */
void mn_kv_truncate(mn_kv_pool *p, mn_kv_seq *s, uint32_t n);
/* Return every block and the table itself; s is empty (reusable) afterwards. */
void mn_kv_seq_release(mn_kv_pool *p, mn_kv_seq *s);

static inline uint32_t mn_kv_used(const mn_kv_pool *p) { return p->n_blocks - p->n_free - p->n_idle; }

/* Keep released sequences' full blocks for mn_kv_adopt (above). MN_NOMEM. */
mn_status mn_kv_prefix_enable(mn_kv_pool *p);
/* Start the empty sequence s (no blocks) with the longest chain of cached blocks that hold
 * tokens[0, n) from the start, whole blocks only; returns the positions it got (s->len), 0 without
 * a prefix cache or a match. MN_NOMEM-safe: it adopts less when its table cannot grow. */
uint32_t mn_kv_adopt(mn_kv_pool *p, mn_kv_seq *s, const int32_t *tokens, uint32_t n);
/* mn_kv_seq_release, filing first the blocks wholly inside [0, s->len) in the prefix cache under
 * tokens[0, s->len) (the tokens those positions hold). Without a prefix cache: mn_kv_seq_release. */
void mn_kv_seq_release_prefix(mn_kv_pool *p, mn_kv_seq *s, const int32_t *tokens);
/* Blocks needed for n positions. */
static inline uint32_t mn_kv_blocks_for(const mn_kv_pool *p, uint32_t n)
{
    return (n + p->block_size - 1) / p->block_size;
}

/* The K (or V) row of position pos of sequence s in layer l: kv_dim elements of the pool's type. */
static inline size_t mn_kv_row_offset(const mn_kv_pool *p, const mn_kv_seq *s, uint32_t pos)
{
    return (size_t)s->blocks[pos / p->block_size] * p->block_stride + (size_t)(pos % p->block_size) * p->row_bytes;
}
static inline void *mn_kv_k(const mn_kv_pool *p, const mn_kv_seq *s, uint32_t l, uint32_t pos)
{
    return (char *)p->k[l] + mn_kv_row_offset(p, s, pos);
}
static inline void *mn_kv_v(const mn_kv_pool *p, const mn_kv_seq *s, uint32_t l, uint32_t pos)
{
    return (char *)p->v[l] + mn_kv_row_offset(p, s, pos);
}

#endif
