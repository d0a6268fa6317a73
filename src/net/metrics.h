/* metrics.h - the engine's figures in Prometheus's text format (GET /metrics).
 *
 * A pure function of one gathered mn_stats (actors/stats.h). Every name starts with `minions_`;
 * counters end in `_total`, histograms in `_seconds`. The speculative ones follow vLLM's (drafts,
 * draft tokens, accepted tokens, acceptance per position), per drafter where the voter knows it.
 * docs/server.md lists them all.
 *
 * Thread: any; nothing is shared.
 */
#ifndef MN_METRICS_H
#define MN_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "actors/msg.h"

typedef struct mn_metrics_info {
    const char *model;                 /* the served model's name (a label of minions_info) */
    const char *backend;               /* "cpu" or "cuda" */
    uint32_t n_drafters;
    const char *const *drafter_names;  /* [n_drafters] */
} mn_metrics_info;

/* The exposition text, newly allocated (mn_free); *len gets its length. NULL only on OOM. */
char *mn_metrics_render(const mn_stats *s, const mn_metrics_info *info, size_t *len);

#endif
