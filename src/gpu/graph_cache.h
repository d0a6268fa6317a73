/* graph_cache.h - which pass shapes keep a CUDA graph: the CUDA backend's bounded cache, as a policy
 * without CUDA (so it is tested on any host).
 *
 * A pass's launches depend on its shape alone (T tokens, n_out logits rows: gpu/cuda_backend.cu),
 * so a captured pass replays for every later pass of that shape. A server meets many shapes once
 * (a prompt's length, a verification's total of drafts) and a few again and again (n sequences
 * decoding one token each, the common verification sizes). Capturing every new shape until the
 * cache was full, and none after, let the first one-off shapes hold it and left the recurring
 * ones to plain launches for the backend's life. Here a shape is captured when it recurs (its
 * second pass within the last MN_GRAPH_SEEN new shapes), and with the cache full the graph used
 * least recently makes room.
 *
 * Thread: the backend's driving thread. No allocation; never fails. */
#ifndef MN_GPU_GRAPH_CACHE_H
#define MN_GPU_GRAPH_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { MN_GRAPH_SLOTS = 64, MN_GRAPH_SEEN = 64 };

typedef struct mn_graph_shape {
    uint32_t T, n_out;
    uint64_t used; /* the clock at its last pass; 0: the entry is empty */
} mn_graph_shape;

typedef struct mn_graph_cache {
    mn_graph_shape slot[MN_GRAPH_SLOTS]; /* the shapes with a graph, slot i the backend's graph i */
    mn_graph_shape seen[MN_GRAPH_SEEN];  /* shapes passed once without one */
    uint64_t clock;
} mn_graph_cache;

typedef enum mn_graph_verdict {
    MN_GRAPH_REPLAY,  /* *slot holds this shape's graph */
    MN_GRAPH_CAPTURE, /* capture this pass into *slot (after destroying its graph when *evict) */
    MN_GRAPH_PLAIN,   /* the shape's first pass: plain launches */
} mn_graph_verdict;

/* A pass of shape (T, n_out) is about to run. CAPTURE counts the slot as this shape's from now on:
 * the caller stores the new graph there, or calls mn_graph_cache_drop(slot) if capture failed. */
mn_graph_verdict mn_graph_cache_pass(mn_graph_cache *c, uint32_t T, uint32_t n_out, int *slot, bool *evict);
/* Every graph is gone (the buffers they held moved): the slots empty, their shapes kept as seen
 * once, so that each is captured again at its next pass. */
void mn_graph_cache_clear(mn_graph_cache *c);
/* Empty slot i (its graph is gone). */
void mn_graph_cache_drop(mn_graph_cache *c, int i);
/* Graphs held. */
int mn_graph_cache_count(const mn_graph_cache *c);

#ifdef __cplusplus
}
#endif

#endif
