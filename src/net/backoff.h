/* backoff.h - listeners that pause while the process is out of file descriptors.
 *
 * When accept() fails for want of descriptors (EMFILE, ENFILE, ENOBUFS, ENOMEM), the listening
 * socket stays readable and libevent would call back at once, for ever: a spinning loop and a log
 * line per call. A backoff watches a set of listeners (the line protocol's TCP and Unix ones, or
 * the HTTP one): on such a failure it disables all of them and retries on a timer, 100 ms doubling
 * to 1.6 s, logging one line per episode; open connections are served meanwhile. The episode ends
 * at the next accepted connection (mn_backoff_accepted, which the owner calls from its accept
 * path). Other accept errors (a connection aborted before it was taken) are logged at debug level.
 *
 * Thread: the loop thread of the event base (which listener belongs to which backoff is kept under
 * a lock, so servers on several loops may share a process). Ownership: the backoff does not own the
 * listeners; stop or free it before they are freed (it forgets them then). */
#ifndef MN_BACKOFF_H
#define MN_BACKOFF_H

#include <stdbool.h>
#include <stdint.h>

struct event_base;
struct evconnlistener;
typedef struct mn_backoff mn_backoff;

/* `who` names the listeners in the log ("net", "http"); a static string. NULL: out of memory. */
mn_backoff *mn_backoff_new(struct event_base *base, const char *who);
void mn_backoff_free(mn_backoff *b);
/* Watch l: its accept errors go to the backoff (evconnlistener_set_error_cb). False when no more
 * listeners can be watched (4 a backoff, 16 in the process): a start-up error for the owner. */
bool mn_backoff_watch(mn_backoff *b, struct evconnlistener *l);
/* A connection was accepted: an episode, if one was running, is over. */
void mn_backoff_accepted(mn_backoff *b);
/* Never enable the listeners again, and forget them (a drain); the owner disables or frees them. */
void mn_backoff_stop(mn_backoff *b);
/* Episodes so far (stats' accept_pauses). */
uint64_t mn_backoff_pauses(const mn_backoff *b);

#endif
