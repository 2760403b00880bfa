#pragma once
/*
 * Per-thread error message: setup paths leave one sentence here so that the
 * server (or an embedder, through tc_errmsg()) can print one clear line.
 * Functions still return 0 or a negative errno; the message only explains.
 */

/* Record a message for the calling thread (truncated to 255 bytes). */
void err_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The calling thread's last message, "" if none. Valid until the next
 * err_set() on this thread. */
const char *err_msg(void);

void err_clear(void);
