/* test_sockpath.c - claiming socket paths (live, stale, not a socket), the private runtime directory,
 * the default admin address, socket modes. Every test works in its own mkdtemp directory under /tmp,
 * removed afterwards; Criterion runs each test in its own process, so setenv and umask stay local. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "net/sockpath.h"

static char tmp[64];

static void setup(void)
{
    strcpy(tmp, "/tmp/mn-sockpath-XXXXXX");
    cr_assert(mkdtemp(tmp), "mkdtemp: %s", strerror(errno));
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    chmod(path, 0700); /* a test may have left a directory unreadable */
    return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

static void teardown(void)
{
    if (tmp[0])
        nftw(tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(sockpath, .init = setup, .fini = teardown);

/* tmp/NAME, in one of a few rotating buffers. */
static const char *at(const char *name)
{
    static char buf[4][512];
    static int next;
    char *b = buf[next++ % 4];
    snprintf(b, sizeof buf[0], "%s/%s", tmp, name);
    return b;
}

static struct sockaddr_un addr_of(const char *path)
{
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    cr_assert_lt(strlen(path), sizeof un.sun_path);
    strcpy(un.sun_path, path);
    return un;
}

/* A socket of TYPE bound at PATH; listening (backlog) when it is a stream socket. */
static int bound(const char *path, int type, int backlog)
{
    int fd = socket(AF_UNIX, type, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_un un = addr_of(path);
    cr_assert_eq(bind(fd, (struct sockaddr *)&un, sizeof un), 0, "bind %s: %s", path, strerror(errno));
    if (type == SOCK_STREAM)
        cr_assert_eq(listen(fd, backlog), 0);
    return fd;
}

static int try_connect(const char *path, int flags)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | flags, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_un un = addr_of(path);
    if (connect(fd, (struct sockaddr *)&un, sizeof un) < 0) {
        int en = errno;
        close(fd);
        errno = en;
        return -1;
    }
    return fd;
}

static mode_t lmode(const char *path)
{
    struct stat st;
    cr_assert_eq(lstat(path, &st), 0, "lstat %s: %s", path, strerror(errno));
    return st.st_mode;
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs(text, f);
    fclose(f);
}

static void assert_file_text(const char *path, const char *text)
{
    char buf[128] = {0};
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s is gone", path);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    cr_assert_eq(n, strlen(text));
    cr_assert_str_eq(buf, text);
}

/* ---- mn_sockpath_claim ---- */

Test(sockpath, claim_nothing_there)
{
    mn_err err;
    cr_assert_eq(mn_sockpath_claim(at("a.sock"), &err), MN_OK, "%s", err.msg);
    cr_assert(!exists(at("a.sock")));
}

Test(sockpath, claim_live_socket_is_busy_and_untouched)
{
    const char *p = at("live.sock");
    int lfd = bound(p, SOCK_STREAM, 8);
    mn_err err;
    cr_assert_eq(mn_sockpath_claim(p, &err), MN_BUSY);
    cr_assert(strstr(err.msg, "live process"), "%s", err.msg);
    cr_assert(S_ISSOCK(lmode(p)));
    /* Still the same live socket: a new client connects and is accepted. */
    int c = try_connect(p, 0);
    cr_assert_geq(c, 0, "connect after claim: %s", strerror(errno));
    int a = accept(lfd, NULL, NULL); /* the probe's connection, already closed by its side */
    cr_assert_geq(a, 0);
    char byte;
    cr_assert_eq(read(a, &byte, 1), 0, "the probe sent nothing and closed");
    close(a);
    a = accept(lfd, NULL, NULL);
    cr_assert_geq(a, 0);
    cr_assert_eq(write(c, "x", 1), 1);
    cr_assert_eq(read(a, &byte, 1), 1);
    cr_assert_eq(byte, 'x');
    close(a);
    close(c);
    close(lfd);
}

/* A live server whose backlog is full answers the probe with EAGAIN: still live. */
Test(sockpath, claim_live_socket_with_full_backlog_is_busy)
{
    const char *p = at("full.sock");
    int lfd = bound(p, SOCK_STREAM, 0);
    int held[64], n = 0;
    while (n < 64 && (held[n] = try_connect(p, SOCK_NONBLOCK)) >= 0)
        n++;
    cr_assert_lt(n, 64, "the backlog never filled");
    cr_assert_eq(errno, EAGAIN, "%s", strerror(errno));
    mn_err err;
    cr_assert_eq(mn_sockpath_claim(p, &err), MN_BUSY, "%s", err.msg);
    cr_assert(S_ISSOCK(lmode(p)));
    while (n > 0)
        close(held[--n]);
    close(lfd);
}

Test(sockpath, claim_stale_socket_is_removed)
{
    const char *p = at("stale.sock");
    close(bound(p, SOCK_STREAM, 8)); /* a server that died without unlinking */
    cr_assert(S_ISSOCK(lmode(p)));
    mn_err err;
    cr_assert_eq(mn_sockpath_claim(p, &err), MN_OK, "%s", err.msg);
    cr_assert(!exists(p));
    /* and the path is now bindable */
    close(bound(p, SOCK_STREAM, 8));
}

/* A bound socket's file goes when it is released, but only while it is still that file: another
 * server that bound the path after ours was removed keeps its own (a daemon's exit took it away,
 * and the new daemon could not be reached). */
Test(sockpath, a_released_socket_file_is_removed_only_while_it_is_ours)
{
    const char *p = at("ours.sock");
    int fd = bound(p, SOCK_STREAM, 8);
    mn_sockpath_bound b = {0};
    mn_err err;
    cr_assert_eq(mn_sockpath_bound_take(&b, p, &err), MN_OK, "%s", err.msg);
    mn_sockpath_bound_release(&b);
    cr_assert(!exists(p), "ours: removed");
    cr_assert_null(b.path);
    mn_sockpath_bound_release(&b); /* nothing bound: nothing happens */
    close(fd);

    fd = bound(p, SOCK_STREAM, 8);
    cr_assert_eq(mn_sockpath_bound_take(&b, p, &err), MN_OK, "%s", err.msg);
    cr_assert_eq(unlink(p), 0); /* a clean-up removes it, and another server binds the path */
    int other = bound(p, SOCK_STREAM, 8);
    mn_sockpath_bound_release(&b);
    cr_assert(exists(p), "the other server's socket file was removed");
    int c = try_connect(p, 0);
    cr_assert_geq(c, 0, "the other server is still reachable: %s", strerror(errno));
    close(c);
    close(other);
    close(fd);
}

/* A datagram socket is not ours to judge: connect says EPROTOTYPE, the claim fails, nothing is removed. */
Test(sockpath, claim_datagram_socket_is_an_error)
{
    const char *p = at("dgram.sock");
    int fd = bound(p, SOCK_DGRAM, 0);
    mn_err err;
    cr_assert_eq(mn_sockpath_claim(p, &err), MN_IO);
    cr_assert(strstr(err.msg, "probe"), "%s", err.msg);
    cr_assert(S_ISSOCK(lmode(p)));
    close(fd);
}

Test(sockpath, claim_regular_file_is_refused_and_kept)
{
    const char *p = at("precious.txt");
    write_file(p, "keep me\n");
    mn_err err;
    cr_assert_eq(mn_sockpath_claim(p, &err), MN_INVALID);
    cr_assert(strstr(err.msg, "not a socket"), "%s", err.msg);
    cr_assert(strstr(err.msg, "regular file"), "%s", err.msg);
    assert_file_text(p, "keep me\n");
}

Test(sockpath, claim_symlink_is_refused)
{
    /* to a stale socket: the link is not followed, and neither the link nor the socket goes */
    const char *target = at("stale.sock"), *link = at("link.sock");
    close(bound(target, SOCK_STREAM, 8));
    cr_assert_eq(symlink(target, link), 0);
    mn_err err;
    cr_assert_eq(mn_sockpath_claim(link, &err), MN_INVALID);
    cr_assert(strstr(err.msg, "symlink"), "%s", err.msg);
    cr_assert(S_ISLNK(lmode(link)));
    cr_assert(S_ISSOCK(lmode(target)));
    /* dangling */
    const char *dangling = at("dangling.sock");
    cr_assert_eq(symlink(at("nowhere"), dangling), 0);
    cr_assert_eq(mn_sockpath_claim(dangling, &err), MN_INVALID);
    cr_assert(S_ISLNK(lmode(dangling)));
}

Test(sockpath, claim_directory_is_refused)
{
    const char *p = at("dir.sock");
    cr_assert_eq(mkdir(p, 0755), 0);
    mn_err err;
    cr_assert_eq(mn_sockpath_claim(p, &err), MN_INVALID);
    cr_assert(strstr(err.msg, "directory"), "%s", err.msg);
    cr_assert(S_ISDIR(lmode(p)));
}

Test(sockpath, claim_fifo_is_refused)
{
    const char *p = at("fifo");
    cr_assert_eq(mkfifo(p, 0600), 0);
    mn_err err;
    cr_assert_eq(mn_sockpath_claim(p, &err), MN_INVALID);
    cr_assert(S_ISFIFO(lmode(p)));
}

Test(sockpath, claim_empty_path_is_refused)
{
    mn_err err;
    cr_assert_eq(mn_sockpath_claim("", &err), MN_INVALID);
    cr_assert(strstr(err.msg, "empty"), "%s", err.msg);
    cr_assert_eq(mn_sockpath_claim(NULL, &err), MN_INVALID);
}

/* sun_path holds 107 bytes and a NUL: 107 is the longest usable path, 108 is refused. */
Test(sockpath, claim_path_length_limit)
{
    char path[MN_SOCKPATH_MAX + 8];
    snprintf(path, sizeof path, "%s/", tmp);
    while (strlen(path) < MN_SOCKPATH_MAX - 1)
        strcat(path, "x");
    cr_assert_eq(strlen(path), 107);
    mn_err err;
    cr_assert_eq(mn_sockpath_claim(path, &err), MN_OK, "%s", err.msg);
    close(bound(path, SOCK_STREAM, 1)); /* really bindable */
    cr_assert_eq(mn_sockpath_claim(path, &err), MN_OK, "%s", err.msg); /* stale now: removed */
    cr_assert(!exists(path));
    strcat(path, "x");
    cr_assert_eq(mn_sockpath_claim(path, &err), MN_INVALID);
    cr_assert(strstr(err.msg, "longer"), "%s", err.msg);
    cr_assert(!exists(path));
}

/* nanomsg's ipc transport is an AF_UNIX SOCK_STREAM listener, so the same probe sees it live. */
Test(sockpath, claim_live_nanomsg_ipc_is_busy)
{
    const char *p = at("a.admin");
    char addr[MN_SOCKPATH_ADDR_MAX];
    snprintf(addr, sizeof addr, "ipc://%s", p);
    int s = nn_socket(AF_SP, NN_REP);
    cr_assert_geq(s, 0);
    cr_assert_geq(nn_bind(s, addr), 0, "nn_bind %s: %s", addr, nn_strerror(nn_errno()));
    mn_err err;
    cr_assert_eq(mn_sockpath_claim(p, &err), MN_BUSY, "%s", err.msg);
    cr_assert(S_ISSOCK(lmode(p)));
    /* The nanomsg server survived the probe and still answers. */
    int c = nn_socket(AF_SP, NN_REQ);
    int ms = 2000;
    cr_assert_geq(c, 0);
    nn_setsockopt(c, NN_SOL_SOCKET, NN_SNDTIMEO, &ms, sizeof ms);
    nn_setsockopt(c, NN_SOL_SOCKET, NN_RCVTIMEO, &ms, sizeof ms);
    nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVTIMEO, &ms, sizeof ms);
    cr_assert_geq(nn_connect(c, addr), 0);
    cr_assert_eq(nn_send(c, "ping", 4, 0), 4, "%s", nn_strerror(nn_errno()));
    char buf[8];
    cr_assert_eq(nn_recv(s, buf, sizeof buf, 0), 4, "%s", nn_strerror(nn_errno()));
    cr_assert_eq(nn_send(s, "pong", 4, 0), 4);
    cr_assert_eq(nn_recv(c, buf, sizeof buf, 0), 4);
    cr_assert_eq(memcmp(buf, "pong", 4), 0);
    nn_close(c);
    nn_close(s);
}

/* A nanomsg server that died without nn_close leaves a stale socket file: claimed and removed. */
Test(sockpath, claim_stale_nanomsg_ipc_is_removed)
{
    const char *p = at("b.admin");
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        char addr[MN_SOCKPATH_ADDR_MAX];
        snprintf(addr, sizeof addr, "ipc://%s", p);
        int s = nn_socket(AF_SP, NN_REP);
        _exit(s >= 0 && nn_bind(s, addr) >= 0 ? 0 : 1); /* no nn_close: the file stays */
    }
    int ws;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the child could not bind");
    cr_assert(S_ISSOCK(lmode(p)));
    mn_err err;
    cr_assert_eq(mn_sockpath_claim(p, &err), MN_OK, "%s", err.msg);
    cr_assert(!exists(p));
}

/* The daemon's sequence for the admin socket: claim, bind under umask 077, set the mode. */
Test(sockpath, nanomsg_bind_then_set_mode)
{
    const char *p = at("c.admin");
    char addr[MN_SOCKPATH_ADDR_MAX];
    snprintf(addr, sizeof addr, "ipc://%s", p);
    mn_err err;
    cr_assert_eq(mn_sockpath_claim(p, &err), MN_OK, "%s", err.msg);
    int s = nn_socket(AF_SP, NN_REP);
    mode_t old = umask(077);
    int ep = nn_bind(s, addr);
    umask(old);
    cr_assert_geq(ep, 0, "%s", nn_strerror(nn_errno()));
    cr_assert_eq(lmode(p) & 077, 0, "bound under umask 077: no group or other bits");
    cr_assert_eq(mn_sockpath_set_mode(p, MN_SOCKPATH_DEFAULT_MODE, &err), MN_OK, "%s", err.msg);
    cr_assert_eq(lmode(p) & 07777, 0600);
    nn_close(s);
}

/* ---- mn_sockpath_set_mode, mn_sockpath_parse_mode ---- */

Test(sockpath, set_mode)
{
    const char *p = at("m.sock");
    mode_t old = umask(077);
    int fd = bound(p, SOCK_STREAM, 1);
    umask(old);
    mn_err err;
    cr_assert_eq(mn_sockpath_set_mode(p, 0600, &err), MN_OK, "%s", err.msg);
    cr_assert_eq(lmode(p) & 07777, 0600);
    cr_assert_eq(mn_sockpath_set_mode(p, 0660, &err), MN_OK, "%s", err.msg);
    cr_assert_eq(lmode(p) & 07777, 0660);
    cr_assert_eq(mn_sockpath_set_mode(p, 01600, &err), MN_INVALID);
    cr_assert_eq(lmode(p) & 07777, 0660, "an invalid mode changes nothing");
    cr_assert_eq(mn_sockpath_set_mode(at("missing.sock"), 0600, &err), MN_IO);
    cr_assert(strstr(err.msg, "missing.sock"), "%s", err.msg);
    close(fd);
}

Test(sockpath, parse_mode)
{
    static const struct {
        const char *s;
        mn_status want;
        unsigned mode;
    } cases[] = {
        {"0600", MN_OK, 0600}, {"600", MN_OK, 0600}, {"660", MN_OK, 0660}, {"0660", MN_OK, 0660},
        {"0", MN_OK, 0},       {"777", MN_OK, 0777}, {"0777", MN_OK, 0777}, {"000000600", MN_OK, 0600},
        {"", MN_INVALID, 0},   {"800", MN_INVALID, 0}, {"1777", MN_INVALID, 0}, {"4600", MN_INVALID, 0},
        {"0x180", MN_INVALID, 0}, {"0o600", MN_INVALID, 0}, {"-600", MN_INVALID, 0}, {"+600", MN_INVALID, 0},
        {" 600", MN_INVALID, 0}, {"600 ", MN_INVALID, 0}, {"6a0", MN_INVALID, 0}, {"99999999999999999999", MN_INVALID, 0},
        {"rw-------", MN_INVALID, 0}, {"608", MN_INVALID, 0}, {"9", MN_INVALID, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        unsigned mode = 12345;
        mn_err err;
        mn_status s = mn_sockpath_parse_mode(cases[i].s, &mode, &err);
        cr_assert_eq(s, cases[i].want, "\"%s\": %s", cases[i].s, mn_strstatus(s));
        if (s == MN_OK)
            cr_assert_eq(mode, cases[i].mode, "\"%s\" -> %o", cases[i].s, mode);
        else
            cr_assert_eq(mode, 12345, "\"%s\": *mode written on failure", cases[i].s);
    }
    unsigned mode;
    cr_assert_eq(mn_sockpath_parse_mode(NULL, &mode, NULL), MN_INVALID);
}

/* ---- mn_sockpath_private_dir ---- */

Test(sockpath, private_dir_is_created_0700)
{
    char buf[256], want[256];
    snprintf(want, sizeof want, "%s/minionsd-%u", tmp, (unsigned)getuid());
    umask(022);
    mn_err err;
    cr_assert_eq(mn_sockpath_private_dir(tmp, buf, sizeof buf, &err), MN_OK, "%s", err.msg);
    cr_assert_str_eq(buf, want);
    mode_t m = lmode(want);
    cr_assert(S_ISDIR(m));
    cr_assert_eq(m & 07777, 0700);
    /* again: the existing private directory is accepted */
    cr_assert_eq(mn_sockpath_private_dir(tmp, buf, sizeof buf, &err), MN_OK, "%s", err.msg);
    cr_assert_str_eq(buf, want);
}

/* A umask narrower than 077 would leave the new directory 0500; it is ours, so it is made 0700. */
Test(sockpath, private_dir_created_under_narrow_umask_is_0700)
{
    char buf[256];
    umask(0377);
    mn_err err;
    cr_assert_eq(mn_sockpath_private_dir(tmp, buf, sizeof buf, &err), MN_OK, "%s", err.msg);
    cr_assert_eq(lmode(buf) & 07777, 0700);
}

Test(sockpath, private_dir_with_wrong_mode_is_refused_and_left_alone)
{
    char name[64];
    snprintf(name, sizeof name, "minionsd-%u", (unsigned)getuid());
    const char *p = at(name);
    cr_assert_eq(mkdir(p, 0700), 0);
    cr_assert_eq(chmod(p, 0755), 0);
    char buf[256] = "untouched";
    mn_err err;
    cr_assert_eq(mn_sockpath_private_dir(tmp, buf, sizeof buf, &err), MN_INVALID);
    cr_assert(strstr(err.msg, "0755"), "%s", err.msg);
    cr_assert_str_eq(buf, "untouched");
    cr_assert_eq(lmode(p) & 07777, 0755, "never chmod a directory we did not create");
}

Test(sockpath, private_dir_symlink_is_refused)
{
    char name[64];
    snprintf(name, sizeof name, "minionsd-%u", (unsigned)getuid());
    const char *real = at("elsewhere"), *p = at(name);
    cr_assert_eq(mkdir(real, 0700), 0); /* even a perfect target: the link is not followed */
    cr_assert_eq(symlink(real, p), 0);
    char buf[256];
    mn_err err;
    cr_assert_eq(mn_sockpath_private_dir(tmp, buf, sizeof buf, &err), MN_INVALID);
    cr_assert(strstr(err.msg, "symlink"), "%s", err.msg);
    cr_assert(S_ISLNK(lmode(p)));
    /* dangling: mkdir fails with EEXIST and nothing is created through the link */
    cr_assert_eq(unlink(p), 0);
    cr_assert_eq(symlink(at("nowhere"), p), 0);
    cr_assert_eq(mn_sockpath_private_dir(tmp, buf, sizeof buf, &err), MN_INVALID);
    cr_assert(!exists(at("nowhere")));
}

Test(sockpath, private_dir_regular_file_is_refused)
{
    char name[64];
    snprintf(name, sizeof name, "minionsd-%u", (unsigned)getuid());
    write_file(at(name), "x");
    char buf[256];
    mn_err err;
    cr_assert_eq(mn_sockpath_private_dir(tmp, buf, sizeof buf, &err), MN_INVALID);
    cr_assert(strstr(err.msg, "regular file"), "%s", err.msg);
    assert_file_text(at(name), "x");
}

Test(sockpath, private_dir_owned_by_another_user_is_refused)
{
    if (geteuid() != 0) {
        teardown(); /* Criterion 2.4 does not run .fini after a skip */
        cr_skip_test("needs root to make a directory owned by another user");
    }
    char name[64];
    snprintf(name, sizeof name, "minionsd-%u", (unsigned)getuid());
    const char *p = at(name);
    cr_assert_eq(mkdir(p, 0700), 0);
    cr_assert_eq(chown(p, 65534, 65534), 0, "%s", strerror(errno));
    char buf[256];
    mn_err err;
    cr_assert_eq(mn_sockpath_private_dir(tmp, buf, sizeof buf, &err), MN_INVALID);
    cr_assert(strstr(err.msg, "owned by uid 65534"), "%s", err.msg);
}

Test(sockpath, private_dir_base_checks)
{
    char buf[256];
    mn_err err;
    /* world-writable and not sticky: refused; sticky (as /tmp): accepted */
    const char *base = at("base");
    cr_assert_eq(mkdir(base, 0700), 0);
    cr_assert_eq(chmod(base, 0777), 0);
    cr_assert_eq(mn_sockpath_private_dir(base, buf, sizeof buf, &err), MN_INVALID);
    cr_assert(strstr(err.msg, "sticky"), "%s", err.msg);
    cr_assert_eq(chmod(base, 01777), 0);
    cr_assert_eq(mn_sockpath_private_dir(base, buf, sizeof buf, &err), MN_OK, "%s", err.msg);
    /* missing base, empty base */
    cr_assert_eq(mn_sockpath_private_dir(at("missing"), buf, sizeof buf, &err), MN_IO);
    cr_assert_eq(mn_sockpath_private_dir("", buf, sizeof buf, &err), MN_INVALID);
    /* a buffer too small for the path */
    char small[8] = "same";
    cr_assert_eq(mn_sockpath_private_dir(tmp, small, sizeof small, &err), MN_INVALID);
    cr_assert_str_eq(small, "same");
}

/* ---- mn_sockpath_runtime_dir, mn_sockpath_default_admin ---- */

Test(sockpath, runtime_dir_uses_xdg)
{
    cr_assert_eq(setenv("XDG_RUNTIME_DIR", tmp, 1), 0); /* mkdtemp made it 0700 */
    char buf[256];
    mn_err err;
    cr_assert_eq(mn_sockpath_runtime_dir(buf, sizeof buf, &err), MN_OK, "%s", err.msg);
    cr_assert_str_eq(buf, tmp);
    char addr[MN_SOCKPATH_ADDR_MAX], want[MN_SOCKPATH_ADDR_MAX];
    snprintf(want, sizeof want, "ipc://%s/minionsd.admin", tmp);
    cr_assert_eq(mn_sockpath_default_admin(addr, sizeof addr, &err), MN_OK, "%s", err.msg);
    cr_assert_str_eq(addr, want);
    char small[16];
    cr_assert_eq(mn_sockpath_default_admin(small, sizeof small, &err), MN_INVALID);
}

Test(sockpath, runtime_dir_refuses_a_bad_xdg)
{
    char buf[256];
    mn_err err;
    const char *open_dir = at("open");
    cr_assert_eq(mkdir(open_dir, 0700), 0);
    cr_assert_eq(chmod(open_dir, 0755), 0);
    setenv("XDG_RUNTIME_DIR", open_dir, 1);
    cr_assert_eq(mn_sockpath_runtime_dir(buf, sizeof buf, &err), MN_INVALID);
    cr_assert(strstr(err.msg, "0755"), "%s", err.msg);

    write_file(at("file"), "x");
    setenv("XDG_RUNTIME_DIR", at("file"), 1);
    cr_assert_eq(mn_sockpath_runtime_dir(buf, sizeof buf, &err), MN_INVALID);
    cr_assert(strstr(err.msg, "not a directory"), "%s", err.msg);

    setenv("XDG_RUNTIME_DIR", at("missing"), 1);
    cr_assert_eq(mn_sockpath_runtime_dir(buf, sizeof buf, &err), MN_INVALID);
    cr_assert_eq(mn_sockpath_default_admin(buf, sizeof buf, &err), MN_INVALID, "default_admin passes the failure on");

    if (geteuid() == 0) {
        const char *other = at("other");
        cr_assert_eq(mkdir(other, 0700), 0);
        cr_assert_eq(chown(other, 65534, 65534), 0);
        setenv("XDG_RUNTIME_DIR", other, 1);
        cr_assert_eq(mn_sockpath_runtime_dir(buf, sizeof buf, &err), MN_INVALID);
        cr_assert(strstr(err.msg, "owned by uid 65534"), "%s", err.msg);
    }
}

/* A runtime dir so long that dir/minionsd.admin cannot fit sun_path is refused before nanomsg sees it
 * (nanomsg 1.1.5 asserts, aborting the process, on an ipc path that long). */
Test(sockpath, default_admin_refuses_a_too_long_runtime_dir)
{
    char deep[256];
    snprintf(deep, sizeof deep, "%s/", tmp);
    while (strlen(deep) < 100)
        strcat(deep, "d");
    cr_assert_eq(mkdir(deep, 0700), 0);
    setenv("XDG_RUNTIME_DIR", deep, 1);
    char addr[512];
    mn_err err;
    cr_assert_eq(mn_sockpath_default_admin(addr, sizeof addr, &err), MN_INVALID);
    cr_assert(strstr(err.msg, "too long"), "%s", err.msg);
}

/* Unset, empty or relative XDG_RUNTIME_DIR: the private directory under the fallback (/tmp for the
 * daemon; the test's own directory here, so that no run touches a real /tmp/minionsd-<uid>). */
Test(sockpath, runtime_dir_falls_back_to_tmp)
{
    char want[128];
    snprintf(want, sizeof want, "%s/minionsd-%u", tmp, (unsigned)getuid());
    static const char *values[] = {NULL, "", "relative/dir"};
    for (size_t i = 0; i < 3; i++) {
        if (values[i])
            setenv("XDG_RUNTIME_DIR", values[i], 1);
        else
            unsetenv("XDG_RUNTIME_DIR");
        char buf[256];
        mn_err err;
        mn_status s = mn_sockpath_runtime_dir_or(tmp, buf, sizeof buf, &err);
        cr_assert_eq(s, MN_OK, "%s", err.msg);
        cr_assert_str_eq(buf, want);
    }
    cr_assert_eq(lmode(want) & 07777, 0700);
}
