/* stats.h - one mn_stats gathered from every actor, for the admin's `stats` and http's /metrics.
 *
 * The asker owns an mn_stats_query and calls mn_stats_ask: every actor that exists gets its part
 * (MN_MSG_STATS), fills its own section and posts the part back (MN_MSG_STATS_BACK, mn_stats_reply).
 * The asker hands each part that comes back to mn_stats_back, which says when the last one is in.
 * Several queries may be out at once; a query must stay put until it is complete.
 * Thread: the engine's loop.
 */
#ifndef MN_STATS_H
#define MN_STATS_H

#include "actors/msg.h"

typedef struct mn_stats_query {
    mn_stats stats;              /* first: a part finds its query through stats */
    mn_stats_part parts[MN_WHO_N];
    unsigned pending;            /* parts not yet back */
    const mn_addr *addr;
} mn_stats_query;

/* Ask every actor in a (the voter and tuner only with drafters, http only with --http). */
void mn_stats_ask(mn_stats_query *q, const mn_addr *a, mn_mailbox *reply_to);
/* A part came back (m: MN_MSG_STATS_BACK). Its query when that was the last part (the mailbox depths
 * are read then), else NULL. */
mn_stats_query *mn_stats_back(mn_msg *m);

#endif
