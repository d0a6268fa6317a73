/* stats.c - gathering stats from the actors (see stats.h). */
#include "actors/stats.h"

#include <string.h>

void mn_stats_ask(mn_stats_query *q, const mn_addr *a, mn_mailbox *reply_to)
{
    mn_mailbox *to[MN_WHO_N] = {
        [MN_WHO_CLIENT] = a->client, [MN_WHO_INTAKE] = a->intake, [MN_WHO_KVMEM] = a->kvmem,
        [MN_WHO_VERIFIER] = a->verifier, [MN_WHO_VOTER] = a->voter, [MN_WHO_TUNER] = a->tuner,
        [MN_WHO_HTTP] = a->http, [MN_WHO_NGRAM] = a->ngram,
    };
    memset(&q->stats, 0, sizeof q->stats);
    q->addr = a;
    q->pending = 0;
    for (int i = 0; i < MN_WHO_N; i++)
        q->pending += to[i] != NULL;
    for (int i = 0; i < MN_WHO_N; i++) {
        if (!to[i])
            continue;
        q->parts[i] = (mn_stats_part){.msg.type = MN_MSG_STATS, .stats = &q->stats, .reply_to = reply_to};
        mn_mailbox_post(to[i], &q->parts[i].msg);
    }
}

mn_stats_query *mn_stats_back(mn_msg *m)
{
    mn_stats_query *q = (mn_stats_query *)((mn_stats_part *)m)->stats;
    if (--q->pending)
        return NULL;
    mn_mailbox *mbs[4] = {q->addr->client, q->addr->intake, q->addr->kvmem, q->addr->verifier};
    for (int i = 0; i < 4; i++)
        q->stats.depth[i] = mn_mailbox_depth(mbs[i]);
    return q;
}
