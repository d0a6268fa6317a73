/* graph_cache.c - which pass shapes keep a CUDA graph (see graph_cache.h). */
#include "gpu/graph_cache.h"

/* The entry of shape (T, n_out) among e[0..n), else the empty or least recently used one; *hit says
 * which. */
static int find(const mn_graph_shape *e, int n, uint32_t T, uint32_t n_out, bool *hit)
{
    int victim = 0;
    for (int i = 0; i < n; i++) {
        if (e[i].used && e[i].T == T && e[i].n_out == n_out) {
            *hit = true;
            return i;
        }
        if (e[i].used < e[victim].used)
            victim = i;
    }
    *hit = false;
    return victim;
}

mn_graph_verdict mn_graph_cache_pass(mn_graph_cache *c, uint32_t T, uint32_t n_out, int *slot, bool *evict)
{
    bool hit;
    uint64_t now = ++c->clock;
    int i = find(c->slot, MN_GRAPH_SLOTS, T, n_out, &hit);
    if (hit) {
        c->slot[i].used = now;
        *slot = i;
        return MN_GRAPH_REPLAY;
    }
    int j = find(c->seen, MN_GRAPH_SEEN, T, n_out, &hit);
    if (!hit) { /* its first pass (or the first since MN_GRAPH_SEEN other new shapes) */
        c->seen[j].T = T;
        c->seen[j].n_out = n_out;
        c->seen[j].used = now;
        return MN_GRAPH_PLAIN;
    }
    c->seen[j].used = 0; /* it has a graph now */
    *evict = c->slot[i].used != 0;
    c->slot[i].T = T;
    c->slot[i].n_out = n_out;
    c->slot[i].used = now;
    *slot = i;
    return MN_GRAPH_CAPTURE;
}

void mn_graph_cache_clear(mn_graph_cache *c)
{
    for (int i = 0; i < MN_GRAPH_SLOTS; i++)
        if (c->slot[i].used) {
            bool hit;
            int j = find(c->seen, MN_GRAPH_SEEN, c->slot[i].T, c->slot[i].n_out, &hit);
            c->seen[j] = c->slot[i];
            c->slot[i].used = 0;
        }
}

void mn_graph_cache_drop(mn_graph_cache *c, int i)
{
    if (i >= 0 && i < MN_GRAPH_SLOTS)
        c->slot[i].used = 0;
}

int mn_graph_cache_count(const mn_graph_cache *c)
{
    int n = 0;
    for (int i = 0; i < MN_GRAPH_SLOTS; i++)
        n += c->slot[i].used != 0;
    return n;
}
