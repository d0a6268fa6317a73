/* backoff.c - pausing listeners while out of descriptors (see backoff.h). */
#include "net/backoff.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "util/alloc.h"
#include "util/log.h"

#define BACKOFF_MIN_MS 100 /* first retry after running out of descriptors */
#define BACKOFF_MAX_MS 1600
#define MAX_LISTENERS 4

struct mn_backoff {
    const char *who;
    struct evconnlistener *ls[MAX_LISTENERS];
    int n;
    struct event *timer;  /* re-enables the listeners */
    unsigned ms;          /* the current retry delay; 0: accepting normally */
    uint64_t pauses;
    bool stopped;
};

/* Which backoff watches a listener: libevent hands the error callback the listener's own argument
 * (the owner's accept state, or evhttp's), so the backoff is looked up here. Errors are rare; the
 * lock makes loops on other threads (several servers in one process) safe. */
static struct {
    pthread_mutex_t lock;
    struct {
        struct evconnlistener *l;
        mn_backoff *b;
    } at[16];
} g_watch = {.lock = PTHREAD_MUTEX_INITIALIZER};

static mn_backoff *watcher_of(struct evconnlistener *l)
{
    mn_backoff *b = NULL;
    pthread_mutex_lock(&g_watch.lock);
    for (size_t i = 0; i < sizeof g_watch.at / sizeof g_watch.at[0] && !b; i++)
        if (g_watch.at[i].l == l)
            b = g_watch.at[i].b;
    pthread_mutex_unlock(&g_watch.lock);
    return b;
}

/* Record that b watches l; false when every slot is taken. */
static bool watch_add(struct evconnlistener *l, mn_backoff *b)
{
    bool added = false;
    pthread_mutex_lock(&g_watch.lock);
    for (size_t i = 0; i < sizeof g_watch.at / sizeof g_watch.at[0] && !added; i++)
        if (!g_watch.at[i].l) {
            g_watch.at[i].l = l, g_watch.at[i].b = b;
            added = true;
        }
    pthread_mutex_unlock(&g_watch.lock);
    return added;
}

/* Forget every listener b watches. */
static void watch_forget(mn_backoff *b)
{
    pthread_mutex_lock(&g_watch.lock);
    for (size_t i = 0; i < sizeof g_watch.at / sizeof g_watch.at[0]; i++)
        if (g_watch.at[i].b == b)
            g_watch.at[i].l = NULL, g_watch.at[i].b = NULL;
    pthread_mutex_unlock(&g_watch.lock);
}

static void enable_all(mn_backoff *b, bool on)
{
    for (int i = 0; i < b->n; i++)
        (void)(on ? evconnlistener_enable(b->ls[i]) : evconnlistener_disable(b->ls[i]));
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    mn_backoff *b = arg;
    (void)fd, (void)what;
    if (!b->stopped)
        enable_all(b, true); /* still out of descriptors: the failure comes straight back to on_error */
}

static void on_error(struct evconnlistener *l, void *arg)
{
    (void)arg; /* the listener's owner's, not ours */
    int err = EVUTIL_SOCKET_ERROR();
    mn_backoff *b = watcher_of(l);
    if (!b)
        return;
    if (err != EMFILE && err != ENFILE && err != ENOBUFS && err != ENOMEM) {
        mn_log(MN_LOG_DEBUG, "%s: accept: %s", b->who, evutil_socket_error_to_string(err));
        return; /* a connection aborted before we took it, and the like: nothing to wait for */
    }
    if (!b->ms) {
        b->pauses++;
        mn_log(MN_LOG_WARN, "%s: accept: %s; pausing new connections until descriptors free up", b->who,
               evutil_socket_error_to_string(err));
        b->ms = BACKOFF_MIN_MS;
    } else if (b->ms < BACKOFF_MAX_MS) {
        b->ms *= 2;
    }
    enable_all(b, false);
    struct timeval tv = {b->ms / 1000, (b->ms % 1000) * 1000};
    if (evtimer_add(b->timer, &tv) != 0) {
        mn_log(MN_LOG_ERROR, "%s: cannot arm the accept retry timer; accepting again at once", b->who);
        enable_all(b, true);
    }
}

mn_backoff *mn_backoff_new(struct event_base *base, const char *who)
{
    mn_backoff *b = mn_calloc(1, sizeof *b);
    if (!b || !(b->timer = evtimer_new(base, on_timer, b))) {
        mn_free(b);
        return NULL;
    }
    b->who = who;
    return b;
}

void mn_backoff_free(mn_backoff *b)
{
    if (!b)
        return;
    watch_forget(b);
    event_free(b->timer);
    mn_free(b);
}

bool mn_backoff_watch(mn_backoff *b, struct evconnlistener *l)
{
    if (b->n == MAX_LISTENERS || !watch_add(l, b))
        return false;
    b->ls[b->n++] = l;
    evconnlistener_set_error_cb(l, on_error);
    return true;
}

void mn_backoff_accepted(mn_backoff *b)
{
    if (b->ms) {
        mn_log(MN_LOG_WARN, "%s: accepting connections again", b->who);
        b->ms = 0;
    }
}

void mn_backoff_stop(mn_backoff *b)
{
    if (!b)
        return;
    b->stopped = true;
    evtimer_del(b->timer);
    watch_forget(b);
    b->n = 0;
}

uint64_t mn_backoff_pauses(const mn_backoff *b) { return b->pauses; }
