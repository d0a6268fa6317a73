/* log.c - leveled logging to stderr. */
#include "util/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

static atomic_int g_level = MN_LOG_WARN;
static const char *const g_names[] = {"error", "warn", "info", "debug"};

void mn_log_set_level(mn_log_level level) { atomic_store(&g_level, (int)level); }
mn_log_level mn_log_get_level(void) { return (mn_log_level)atomic_load(&g_level); }
const char *mn_log_level_name(mn_log_level level) { return g_names[level]; }

int mn_log_parse_level(const char *name)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(name, g_names[i]) == 0)
            return i;
    return -1;
}

void mn_log(mn_log_level level, const char *fmt, ...)
{
    if ((int)level > atomic_load(&g_level))
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "minions %s: %s\n", g_names[level], line);
}
