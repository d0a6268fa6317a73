/* sockpath.c - claiming socket paths and the private runtime directory (see sockpath.h).
 *
 * Invariants: nothing here unlinks a file that is not a socket, or a socket that accepted (or
 * queued) our probe; nothing chmods a directory it did not create; a path is checked through an
 * fd opened with O_NOFOLLOW, so a symlink swapped in after a check is refused rather than followed.
 */
#include "net/sockpath.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "util/alloc.h"

_Static_assert(MN_SOCKPATH_MAX == sizeof(((struct sockaddr_un *)0)->sun_path), "MN_SOCKPATH_MAX is sun_path's size");

/* A word for what lstat found, for messages. */
static const char *file_kind(mode_t m)
{
    if (S_ISREG(m))
        return "a regular file";
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISLNK(m))
        return "a symlink";
    if (S_ISFIFO(m))
        return "a fifo";
    if (S_ISCHR(m) || S_ISBLK(m))
        return "a device";
    if (S_ISSOCK(m))
        return "a socket";
    return "an unknown kind of file";
}

mn_status mn_sockpath_claim(const char *path, mn_err *err)
{
    if (!path || !*path)
        return mn_fail(err, MN_INVALID, "empty socket path");
    size_t len = strlen(path);
    if (len >= MN_SOCKPATH_MAX)
        return mn_fail(err, MN_INVALID, "socket path %s: %zu bytes, longer than the %d a Unix socket allows", path, len,
                       MN_SOCKPATH_MAX - 1);
    struct stat st;
    if (lstat(path, &st) < 0) {
        if (errno == ENOENT)
            return MN_OK;
        return mn_fail(err, MN_IO, "socket path %s: %s", path, strerror(errno));
    }
    if (!S_ISSOCK(st.st_mode))
        return mn_fail(err, MN_INVALID, "socket path %s exists and is not a socket (%s); refusing to replace it", path,
                       file_kind(st.st_mode));

    /* Non-blocking, so a live listener with a full backlog answers EAGAIN instead of stalling us. */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return mn_fail(err, MN_IO, "socket path %s: cannot probe: socket: %s", path, strerror(errno));
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    memcpy(un.sun_path, path, len + 1);
    int rc = connect(fd, (struct sockaddr *)&un, sizeof un);
    int en = errno;
    close(fd);
    if (rc == 0 || en == EAGAIN || en == EINPROGRESS)
        return mn_fail(err, MN_BUSY, "socket path %s is served by a live process; refusing to take it over", path);
    if (en == ENOENT)
        return MN_OK; /* gone since lstat: nothing to remove */
    if (en != ECONNREFUSED)
        return mn_fail(err, MN_IO, "socket path %s: cannot probe: connect: %s", path, strerror(en));

    /* Stale. Remove it only if it is still the socket we probed, not one a new server bound since. */
    struct stat again;
    if (lstat(path, &again) < 0) {
        if (errno == ENOENT)
            return MN_OK;
        return mn_fail(err, MN_IO, "socket path %s: %s", path, strerror(errno));
    }
    if (again.st_dev != st.st_dev || again.st_ino != st.st_ino)
        return mn_fail(err, MN_BUSY, "socket path %s was replaced while being probed (another server starting?)", path);
    if (unlink(path) < 0 && errno != ENOENT)
        return mn_fail(err, MN_IO, "socket path %s: cannot remove the stale socket: %s", path, strerror(errno));
    return MN_OK;
}

mn_status mn_sockpath_bound_take(mn_sockpath_bound *b, const char *path, mn_err *err)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return mn_fail(err, MN_IO, "socket path %s: %s", path, strerror(errno));
    if (!(b->path = mn_strndup(path, strlen(path))))
        return mn_fail(err, MN_NOMEM, "socket path %s: out of memory", path);
    b->dev = st.st_dev;
    b->ino = st.st_ino;
    return MN_OK;
}

void mn_sockpath_bound_release(mn_sockpath_bound *b)
{
    struct stat st;
    if (b->path && lstat(b->path, &st) == 0 && st.st_dev == b->dev && st.st_ino == b->ino)
        unlink(b->path);
    mn_free(b->path);
    b->path = NULL;
}

/* Copy s into buf (n bytes) or fail without writing a truncated path. */
static mn_status copy_path(char *buf, size_t n, const char *s, const char *what, mn_err *err)
{
    size_t len = strlen(s);
    if (len >= n)
        return mn_fail(err, MN_INVALID, "%s %s: longer than the %zu-byte buffer", what, s, n);
    memcpy(buf, s, len + 1);
    return MN_OK;
}

mn_status mn_sockpath_runtime_dir(char *buf, size_t n, mn_err *err)
{
    return mn_sockpath_runtime_dir_or("/tmp", buf, n, err);
}

mn_status mn_sockpath_runtime_dir_or(const char *fallback, char *buf, size_t n, mn_err *err)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    if (!xdg || xdg[0] != '/') /* unset, empty or relative: the XDG spec says to ignore it */
        return mn_sockpath_private_dir(fallback, buf, n, err);
    struct stat st;
    if (stat(xdg, &st) < 0) {
        int en = errno;
        return mn_fail(err, en == ENOENT || en == ENOTDIR ? MN_INVALID : MN_IO, "XDG_RUNTIME_DIR %s: %s", xdg,
                       strerror(en));
    }
    if (!S_ISDIR(st.st_mode))
        return mn_fail(err, MN_INVALID, "XDG_RUNTIME_DIR %s is %s, not a directory", xdg, file_kind(st.st_mode));
    if (st.st_uid != getuid())
        return mn_fail(err, MN_INVALID, "XDG_RUNTIME_DIR %s is owned by uid %u, not by this user (uid %u)", xdg,
                       (unsigned)st.st_uid, (unsigned)getuid());
    if (st.st_mode & 077)
        return mn_fail(err, MN_INVALID, "XDG_RUNTIME_DIR %s has mode %04o; it must be 0700 (owner only)", xdg,
                       (unsigned)(st.st_mode & 07777));
    return copy_path(buf, n, xdg, "XDG_RUNTIME_DIR", err);
}

mn_status mn_sockpath_private_dir(const char *base, char *buf, size_t n, mn_err *err)
{
    if (!base || !*base)
        return mn_fail(err, MN_INVALID, "empty base directory");
    char path[4096];
    int k = snprintf(path, sizeof path, "%s/minionsd-%u", base, (unsigned)getuid());
    if (k < 0 || (size_t)k >= sizeof path)
        return mn_fail(err, MN_INVALID, "base directory %s: path too long", base);

    struct stat bst;
    if (stat(base, &bst) < 0)
        return mn_fail(err, MN_IO, "base directory %s: %s", base, strerror(errno));
    if (!S_ISDIR(bst.st_mode))
        return mn_fail(err, MN_INVALID, "base directory %s is %s, not a directory", base, file_kind(bst.st_mode));
    if ((bst.st_mode & S_IWOTH) && !(bst.st_mode & S_ISVTX))
        return mn_fail(err, MN_INVALID, "base directory %s is writable by everyone and not sticky; a private directory there could be renamed away", base);

    bool created = mkdir(path, 0700) == 0;
    if (!created && errno != EEXIST)
        return mn_fail(err, MN_IO, "cannot create %s: %s", path, strerror(errno));
    /* O_PATH: fstat works without read permission, so another user's 0700 directory is reported by
     * owner rather than as EACCES; O_NOFOLLOW: a symlink planted at the name is refused, not followed. */
    int fd = open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int en = errno;
        struct stat st;
        if ((en == ELOOP || en == ENOTDIR) && lstat(path, &st) == 0)
            return mn_fail(err, MN_INVALID, "%s is %s, not a directory; refusing to use it (remove it)", path,
                           file_kind(st.st_mode));
        return mn_fail(err, MN_IO, "cannot open %s: %s", path, strerror(en));
    }
    mn_status s = MN_OK;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        s = mn_fail(err, MN_IO, "cannot stat %s: %s", path, strerror(errno));
        goto out;
    }
    if (st.st_uid != getuid()) {
        s = mn_fail(err, MN_INVALID, "%s is owned by uid %u, not by this user (uid %u); refusing to use it", path,
                    (unsigned)st.st_uid, (unsigned)getuid());
        goto out;
    }
    if ((st.st_mode & 0777) != 0700) {
        if (!created) {
            s = mn_fail(err, MN_INVALID, "%s has mode %04o, not 0700; refusing to use it (chmod 700 it or remove it)",
                        path, (unsigned)(st.st_mode & 07777));
            goto out;
        }
        /* Ours, narrowed by the umask. An O_PATH fd cannot be fchmod'ed; chmod the name without following
         * a symlink, then check through the fd that the directory we opened is the one now 0700. */
        if (fchmodat(AT_FDCWD, path, 0700, AT_SYMLINK_NOFOLLOW) < 0 || fstat(fd, &st) < 0) {
            s = mn_fail(err, MN_IO, "cannot chmod %s to 0700: %s", path, strerror(errno));
            goto out;
        }
        if ((st.st_mode & 0777) != 0700) {
            s = mn_fail(err, MN_INVALID, "%s changed while being made private; refusing to use it", path);
            goto out;
        }
    }
    s = copy_path(buf, n, path, "private directory", err);
out:
    close(fd);
    return s;
}

mn_status mn_sockpath_default_admin(char *buf, size_t n, mn_err *err)
{
    char dir[4096];
    mn_status s = mn_sockpath_runtime_dir(dir, sizeof dir, err);
    if (s != MN_OK)
        return s;
    size_t len = strlen(dir) + 1 + strlen(MN_SOCKPATH_ADMIN_NAME);
    if (len >= MN_SOCKPATH_MAX)
        return mn_fail(err, MN_INVALID, "runtime directory %s: too long for the admin socket path (%zu bytes, limit %d)",
                       dir, len, MN_SOCKPATH_MAX - 1);
    int k = snprintf(buf, n, "ipc://%s/%s", dir, MN_SOCKPATH_ADMIN_NAME);
    if (k < 0 || (size_t)k >= n)
        return mn_fail(err, MN_INVALID, "admin address ipc://%s/%s: longer than the %zu-byte buffer", dir,
                       MN_SOCKPATH_ADMIN_NAME, n);
    return MN_OK;
}

mn_status mn_sockpath_set_mode(const char *path, unsigned mode, mn_err *err)
{
    if (mode > 0777)
        return mn_fail(err, MN_INVALID, "socket mode %o: only permission bits (0..0777) are allowed", mode);
    if (chmod(path, (mode_t)mode) < 0)
        return mn_fail(err, MN_IO, "cannot chmod %s to %04o: %s", path, mode, strerror(errno));
    return MN_OK;
}

mn_status mn_sockpath_parse_mode(const char *s, unsigned *mode, mn_err *err)
{
    if (!s || !*s)
        return mn_fail(err, MN_INVALID, "--socket-mode: empty; use octal such as 0600");
    unsigned v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '7')
            return mn_fail(err, MN_INVALID, "--socket-mode %s: not an octal mode such as 0600", s);
        v = v * 8 + (unsigned)(*p - '0');
        if (v > 0777) /* checked per digit, so a long string cannot overflow */
            return mn_fail(err, MN_INVALID, "--socket-mode %s: only permission bits (0..0777) are allowed", s);
    }
    *mode = v;
    return MN_OK;
}
