/* client.c: connecting to the softroce daemon and making calls (proto.h):
 * framing, and the file descriptors that travel with a call as SCM_RIGHTS. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "proto.h"

/* socket_path: $SOFTROCE_SOCKET, else $XDG_RUNTIME_DIR/softroce.sock, else
 * /tmp/softroce-UID/softroce.sock, in a directory of the user's own (the
 * daemon uses the same rule and makes the directory). */
void sr_socket_path(char *buf, size_t len)
{
	const char *s = getenv("SOFTROCE_SOCKET");
	const char *rt = getenv("XDG_RUNTIME_DIR");

	if (s && *s)
		snprintf(buf, len, "%s", s);
	else if (rt && *rt)
		snprintf(buf, len, "%s/softroce.sock", rt);
	else
		snprintf(buf, len, "/tmp/softroce-%u/softroce.sock", (unsigned)getuid());
}

/* peer_trusted: the daemon must run as this user or as root. Another user
 * may hold the socket path (a $SOFTROCE_SOCKET in a shared place), and the
 * daemon sees the program's memory and moves its data: a socket of another
 * user is refused. */
static int peer_trusted(int fd, const char *path)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 || len != sizeof(cr)) {
		if (getenv("SOFTROCE_DEBUG"))
			fprintf(stderr, "softroce libibverbs: %s: no peer credentials: %s\n",
				path, strerror(errno));
		return 0;
	}
	if (cr.uid == getuid() || cr.uid == 0)
		return 1;
	if (getenv("SOFTROCE_DEBUG"))
		fprintf(stderr, "softroce libibverbs: %s: the daemon runs as uid %u, "
			"not as this user (%u) or root: refused\n",
			path, (unsigned)cr.uid, (unsigned)getuid());
	return 0;
}

/* dir_squatted: the default socket's directory exists but is not this
 * user's own private directory. Said on stderr whatever SOFTROCE_DEBUG,
 * once: it is why every call fails, and "connection refused" would not tell. */
static int dir_squatted(const char *sock)
{
	static int said;
	char dir[128];
	struct stat st;

	snprintf(dir, sizeof(dir), "/tmp/softroce-%u", (unsigned)getuid());
	if (strncmp(sock, dir, strlen(dir)) || sock[strlen(dir)] != '/' || lstat(dir, &st) < 0)
		return 0;
	if (S_ISDIR(st.st_mode) && st.st_uid == getuid() && !(st.st_mode & 077))
		return 0;
	if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
		fprintf(stderr, "softroce libibverbs: %s is not your own private directory (owner uid %u, mode %04o): "
			"another user created it first; have it removed, or set XDG_RUNTIME_DIR or SOFTROCE_SOCKET\n",
			dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
	return 1;
}

/* sr_connect returns a connected socket, or -1 with errno set
 * (ECONNREFUSED for a daemon of another user, EACCES for a socket
 * directory of another user's). */
int sr_connect(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, err;

	sr_socket_path(sa.sun_path, sizeof(sa.sun_path));
	if (dir_squatted(sa.sun_path)) {
		errno = EACCES;
		return -1;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		err = errno;
		if (getenv("SOFTROCE_DEBUG"))
			fprintf(stderr, "softroce libibverbs: connect %s: %s\n",
				sa.sun_path, strerror(err));
		close(fd);
		errno = err;
		return -1;
	}
	if (!peer_trusted(fd, sa.sun_path)) {
		close(fd);
		errno = ECONNREFUSED;
		return -1;
	}
	return fd;
}

/* io_errno maps a failed or short socket transfer to the call's error: a
 * peer that went away (EOF, reset, broken pipe) is EPIPE. */
static int io_errno(ssize_t n)
{
	if (n == 0 || errno == ECONNRESET || errno == EPIPE)
		return EPIPE;
	return errno;
}

/* send_request writes the header and body; the fds ride on the first byte.
 * MSG_NOSIGNAL: a dead daemon must be EPIPE, not a SIGPIPE in the program. */
static int send_request(int fd, uint32_t op, const void *body, uint32_t len,
			const int *fds, int nfds)
{
	struct sr_hdr h = { op, len };
	char cbuf[CMSG_SPACE(sizeof(int) * SR_MAX_MR_PIECES)];
	struct iovec iov[2] = {
		{ &h, sizeof(h) },
		{ (void *)body, len },
	};
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = len ? 2 : 1 };
	ssize_t n;

	if (nfds < 0 || nfds > SR_MAX_MR_PIECES)
		return EINVAL;
	if (nfds > 0) {
		struct cmsghdr *c;

		memset(cbuf, 0, sizeof(cbuf));
		m.msg_control = cbuf;
		m.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	for (;;) {
		n = sendmsg(fd, &m, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return io_errno(n);
		/* The fds went with the first byte: never send them again. */
		m.msg_control = NULL;
		m.msg_controllen = 0;
		while (m.msg_iovlen > 0 && (size_t)n >= m.msg_iov[0].iov_len) {
			n -= m.msg_iov[0].iov_len;
			m.msg_iov++;
			m.msg_iovlen--;
		}
		if (m.msg_iovlen == 0)
			return 0;
		m.msg_iov[0].iov_base = (char *)m.msg_iov[0].iov_base + n;
		m.msg_iov[0].iov_len -= n;
	}
}

/* take_fds keeps the first fd passed in a control message in *got_fd (if it
 * is still -1) and closes every other one. */
static void take_fds(struct msghdr *m, int *got_fd)
{
	struct cmsghdr *c;

	for (c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
		int *p = (int *)CMSG_DATA(c);
		size_t i, n;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (i = 0; i < n; i++) {
			int f;

			memcpy(&f, p + i, sizeof(f));
			if (*got_fd < 0)
				*got_fd = f;
			else
				close(f);
		}
	}
}

/* recv_full reads exactly len bytes, collecting any fds that come along. */
static int recv_full(int fd, void *buf, size_t len, int *got_fd)
{
	char cbuf[CMSG_SPACE(sizeof(int) * 4)];
	char *p = buf;

	while (len > 0) {
		struct iovec iov = { p, len };
		struct msghdr m = {
			.msg_iov = &iov,
			.msg_iovlen = 1,
			.msg_control = cbuf,
			.msg_controllen = sizeof(cbuf),
		};
		ssize_t n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return io_errno(n);
		take_fds(&m, got_fd);
		p += n;
		len -= n;
	}
	return 0;
}

/* discard reads and drops len bytes, keeping the stream in step after a
 * body we cannot accept. */
static int discard(int fd, size_t len, int *got_fd)
{
	char buf[4096];
	int err;

	while (len > 0) {
		size_t n = len < sizeof(buf) ? len : sizeof(buf);

		err = recv_full(fd, buf, n, got_fd);
		if (err)
			return err;
		len -= n;
	}
	return 0;
}

/* sr_call: see proto.h. */
int sr_call(int fd, uint32_t op, const void *body, uint32_t len,
	    const int *fds, int nfds, void *out, uint32_t outlen,
	    uint32_t *got, int *fd_out)
{
	struct sr_hdr h;
	int rfd = -1, err;
	int ok;

	if (got)
		*got = 0;
	if (fd_out)
		*fd_out = -1;
	if (nfds < 0 || nfds > SR_MAX_MR_PIECES)
		return EINVAL; /* before a byte is sent: the stream stays whole */
	err = send_request(fd, op, body, len, fds, nfds);
	if (!err)
		err = recv_full(fd, &h, sizeof(h), &rfd);
	if (err)
		goto broken;
	if (h.op_or_status && (h.len & SR_REASON)) {
		char why[SR_MAX_REASON + 1];
		uint32_t n = h.len & ~SR_REASON;

		if (n > SR_MAX_REASON) {
			err = EPROTO;
			goto broken;
		}
		err = recv_full(fd, why, n, &rfd);
		if (err)
			goto broken;
		why[n] = 0;
		if (getenv("SOFTROCE_DEBUG"))
			fprintf(stderr, "softroce libibverbs: op %u failed: %s: %s\n",
				op, strerror((int)h.op_or_status), why);
		err = h.op_or_status;
		goto out;
	}
	if (h.len > SR_MAX_BODY) {
		if (getenv("SOFTROCE_DEBUG"))
			fprintf(stderr, "softroce libibverbs: an answer of %u bytes (op %u): "
				"the stream is lost\n", h.len, op);
		err = EPROTO;
		goto broken;
	}
	if (got)
		ok = h.len <= outlen;
	else
		ok = h.len == outlen || (h.op_or_status && h.len == 0);
	if (!ok) {
		err = discard(fd, h.len, &rfd);
		if (err)
			goto broken;
		err = EPROTO;
		goto out;
	}
	err = recv_full(fd, out, h.len, &rfd);
	if (err)
		goto broken;
	if (got)
		*got = h.len;
	err = h.op_or_status;
	goto out;
broken:
	/* A transfer cut short leaves the stream out of step: what follows
	 * would be read as the wrong answer. Shut the socket down, so that
	 * every later call is EPIPE and the context reports the device dead. */
	shutdown(fd, SHUT_RDWR);
out:
	if (rfd >= 0) {
		if (fd_out && !err)
			*fd_out = rfd;
		else
			close(rfd);
	}
	return err;
}

/* sr_call_list fetches the device list into a malloc'd array. */
int sr_call_list(int fd, struct sr_dev_entry **out, int *n)
{
	const uint32_t max = 64;
	struct sr_hello hello = { SR_PROTO_VERSION };
	uint32_t got;
	int err;

	*out = malloc(max * sizeof(**out));
	if (!*out)
		return ENOMEM;
	err = sr_call(fd, SR_OP_LIST, &hello, sizeof(hello), NULL, 0, *out, max * sizeof(**out), &got, NULL);
	if (err == EPROTONOSUPPORT)
		fprintf(stderr, "softroce libibverbs: the daemon speaks another protocol version "
			"than this library (%u): run a softroce and a libibverbs.so.1 built together\n",
			SR_PROTO_VERSION);
	if (!err && got % sizeof(**out))
		err = EPROTO;
	if (err) {
		free(*out);
		*out = NULL;
		return err;
	}
	*n = got / sizeof(**out);
	return 0;
}
