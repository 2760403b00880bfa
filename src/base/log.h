#pragma once
/*
 * Logging to stderr with a global verbosity (memcached's -v / -vv map to
 * LOG_INFO / LOG_DEBUG). Thread-safe: one fprintf per message.
 */

enum log_level {
    LOG_ERROR = 0,
    LOG_WARN = 1,
    LOG_INFO = 2,
    LOG_DEBUG = 3,
};

/* Default LOG_WARN. */
void log_set_level(int level);
int log_get_level(void);

void log_msg(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
