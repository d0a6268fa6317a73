/* sockpath.h - where the Unix and admin sockets live, and how their paths are claimed safely.
 *
 * minionsd serves clients on a Unix socket (--unix PATH) and its admin socket on nanomsg
 * ipc://PATH, which is a plain AF_UNIX SOCK_STREAM listener underneath. Before either binds, the
 * daemon claims the path with mn_sockpath_claim: a live server's socket is never unlinked, a file
 * that is not a socket is never replaced, and only a stale socket file (nobody listening) is removed.
 * Claim before nn_bind, not only before bind(): nanomsg 1.1.5 on its own unlinks a regular file at
 * the path, aborts the process on a directory there or on a path too long for sun_path, and binds
 * "ipc://" (empty path) in the abstract namespace, which any local user can reach.
 *
 * The default admin address is ipc://<runtime dir>/minionsd.admin, where the runtime dir is
 * $XDG_RUNTIME_DIR or else /tmp/minionsd-<uid>, a directory only its owner can enter. Together with
 * a 0600 socket (bound under umask 077, then mn_sockpath_set_mode) this keeps other users away from
 * nanomsg's ipc transport, which aborts the process on a few crafted bytes from a peer.
 * minions-cli uses the same default, so it must call mn_sockpath_default_admin too.
 *
 * Thread: start-up (blocking system calls; the runtime dir reads the environment). Nothing is kept
 * between calls; every buffer is the caller's.
 */
#ifndef MN_SOCKPATH_H
#define MN_SOCKPATH_H

#include <stddef.h>
#include <sys/types.h>

#include "util/status.h"

#define MN_SOCKPATH_MAX 108                   /* sizeof sun_path: a path holds at most 107 bytes */
#define MN_SOCKPATH_ADDR_MAX (6 + MN_SOCKPATH_MAX) /* "ipc://" + path + NUL */
#define MN_SOCKPATH_DEFAULT_MODE 0600u        /* both sockets, unless --socket-mode says otherwise */
#define MN_SOCKPATH_ADMIN_NAME "minionsd.admin" /* file name of the default admin socket */

/* Make PATH ready for bind() of a Unix or nanomsg ipc socket, without ever taking a live server's
 * socket or a file that is not a socket:
 *   - empty, or too long for sun_path (>= MN_SOCKPATH_MAX bytes): MN_INVALID;
 *   - nothing there: MN_OK;
 *   - something other than a socket (regular file, directory, symlink - lstat, not followed):
 *     MN_INVALID "exists and is not a socket; refusing to replace it"; the file is left alone;
 *   - a socket: a non-blocking SOCK_STREAM connect() probes it. Accepted, or backlog full (EAGAIN):
 *     MN_BUSY "is served by a live process", the socket is left alone (the live server sees one
 *     connection that closes at once, with no bytes sent). Refused (ECONNREFUSED: stale): it is
 *     unlinked, if it is still the same inode, and MN_OK. Another error (EACCES on another user's
 *     socket, EPROTOTYPE on a datagram socket ...): MN_IO with strerror.
 * A bind right after MN_OK can still fail with EADDRINUSE when another process won the race; that
 * is safe (nothing was unlinked that was live, except a server caught between its bind() and its
 * listen(), which nanomsg's own probe shares). Ownership: PATH stays the caller's.
 * Thread: any, at start-up (blocking system calls). */
mn_status mn_sockpath_claim(const char *path, mn_err *err);

/* A socket file this process bound: its path and the file's identity then. Released, the path is
 * unlinked only while it still names that file: another instance may have bound the path since
 * this one's file was removed (a clean-up of /tmp, a deploy script), and this one's exit must not
 * take its socket away. */
typedef struct mn_sockpath_bound {
    char *path; /* NULL: nothing bound */
    dev_t dev;
    ino_t ino;
} mn_sockpath_bound;

/* Record PATH, just bound by this process (lstat now). MN_NOMEM, or MN_IO when lstat fails. */
mn_status mn_sockpath_bound_take(mn_sockpath_bound *b, const char *path, mn_err *err);
/* Unlink b's path if it is still b's file, and forget it (b may be empty). */
void mn_sockpath_bound_release(mn_sockpath_bound *b);

/* The directory for this user's runtime sockets, written NUL-terminated into buf (n bytes):
 *   - $XDG_RUNTIME_DIR when it is set to an absolute path (a relative one is ignored, as the XDG
 *     spec says). It must be a directory (symlinks followed: the user chose it) owned by getuid()
 *     with no group or other permission bits, else MN_INVALID naming what is wrong (MN_IO when
 *     stat fails for another reason than ENOENT/ENOTDIR);
 *   - otherwise mn_sockpath_private_dir("/tmp", ...) : /tmp/minionsd-<uid>, made 0700 if missing.
 * MN_INVALID when buf is too small. buf is the caller's; it holds the path only on MN_OK.
 * Thread: start-up (getenv; not safe against a concurrent setenv). */
mn_status mn_sockpath_runtime_dir(char *buf, size_t n, mn_err *err);
/* The same with `fallback` in place of /tmp (tests give a directory of their own). */
mn_status mn_sockpath_runtime_dir_or(const char *fallback, char *buf, size_t n, mn_err *err);

/* BASE/minionsd-<uid> as a private directory, written into buf (n bytes). Race-aware: mkdir(0700)
 * first, then open it with O_PATH|O_NOFOLLOW|O_DIRECTORY and check the opened directory with fstat,
 * so a symlink or a file planted at the name is refused, never followed. It must be a real directory
 * owned by getuid() with mode (& 0777) exactly 0700. A directory this call created is chmod'ed to
 * 0700 (the umask may have narrowed it); one it did not create is never chmod'ed: a wrong mode or
 * owner is MN_INVALID with a message saying what to fix. BASE itself must be a directory, and when
 * others may write to it, it must be sticky (as /tmp is), else another user could rename the
 * private directory away: MN_INVALID. MN_IO when a system call fails (BASE missing: mkdir ENOENT).
 * Exposed so that tests can use a temporary BASE; the daemon reaches it through
 * mn_sockpath_runtime_dir. buf holds the path only on MN_OK.
 * Thread: any, at start-up (blocking system calls). */
mn_status mn_sockpath_private_dir(const char *base, char *buf, size_t n, mn_err *err);

/* The default admin address "ipc://<runtime dir>/" MN_SOCKPATH_ADMIN_NAME, written into buf (n
 * bytes; MN_SOCKPATH_ADDR_MAX always suffices). Creates the runtime dir when it falls back to /tmp
 * (see mn_sockpath_runtime_dir, whose failures it returns). MN_INVALID when the socket path would not
 * fit sun_path or buf is too small. The daemon and minions-cli both call it, so they agree.
 * Thread: start-up (getenv). */
mn_status mn_sockpath_default_admin(char *buf, size_t n, mn_err *err);

/* chmod PATH (a socket the caller has just bound) to MODE. Call it after bind() and listen(); bind
 * under umask(077) so the socket is never more open than intended in between (chmod on the bound
 * fd does not change a Unix socket's file mode on Linux, hence the path). MN_INVALID when MODE has
 * bits outside 0777, MN_IO when chmod fails. Thread: any, at start-up. */
mn_status mn_sockpath_set_mode(const char *path, unsigned mode, mn_err *err);

/* Parse a --socket-mode value: octal digits only ("0600", "660", "0"), value 0..0777 (no sign,
 * space, "0x"/"0o" prefix, setuid/setgid/sticky bit). *mode is written only on MN_OK; MN_INVALID
 * otherwise. Thread: any (pure). */
mn_status mn_sockpath_parse_mode(const char *s, unsigned *mode, mn_err *err);

#endif
