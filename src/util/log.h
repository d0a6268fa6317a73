/* log.h - leveled logging to stderr. Thread-safe (one fprintf per line). */
#ifndef MN_LOG_H
#define MN_LOG_H

typedef enum mn_log_level {
    MN_LOG_ERROR = 0, /* something failed */
    MN_LOG_WARN,      /* something degraded (e.g. GPU absent, CPU fallback) */
    MN_LOG_INFO,      /* start-up facts and summaries */
    MN_LOG_DEBUG,     /* per-request detail */
} mn_log_level;

void mn_log_set_level(mn_log_level level);
mn_log_level mn_log_get_level(void);
/* The level's name: "error", "warn", "info" or "debug". */
const char *mn_log_level_name(mn_log_level level);
/* Parse "error"/"warn"/"info"/"debug"; returns -1 when unknown. */
int mn_log_parse_level(const char *name);
void mn_log(mn_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
