/* socket.c: the life of an interposed TCP socket: socket, bind, listen,
 * accept(4), connect, shutdown, close, names, options, fcntl, ioctl, dup. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <rdma/rsocket.h>

#include "preload.h"

static int intercepted(int domain, int type, int protocol)
{
	int kind = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);

	return (domain == AF_INET || domain == AF_INET6) && kind == SOCK_STREAM &&
	       (!protocol || protocol == IPPROTO_TCP) && !getenv("SOFTROCE_RSOCKET_OFF");
}

PUBLIC int socket(int domain, int type, int protocol)
{
	struct rsref *r;
	int rs, fd;

	preload_init();
	if (!intercepted(domain, type, protocol))
		return real.socket(domain, type, protocol);
	rs = rsocket(domain, type, protocol);
	if (rs < 0)
		return real.socket(domain, type, protocol); /* no device: plain TCP */
	r = calloc(1, sizeof(*r));
	if (!r) {
		rclose(rs);
		errno = ENOMEM;
		return -1;
	}
	r->rs = rs;
	r->family = domain;
	r->port = -1;
	fd = fd_new(r, type & SOCK_CLOEXEC);
	if (fd < 0) {
		rclose(rs);
		free(r);
	}
	return fd;
}

static int any_port(const struct sockaddr *sa, socklen_t len, int *port)
{
	if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *s = (const void *)sa;

		*port = ntohs(s->sin_port);
		return s->sin_addr.s_addr == htonl(INADDR_ANY);
	}
	if (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *s = (const void *)sa;

		*port = ntohs(s->sin6_port);
		return !memcmp(&s->sin6_addr, &in6addr_any, sizeof(in6addr_any));
	}
	*port = -1;
	return 0;
}

/* bind: the device keeps one rdma_cm port table for both address
 * families, so a dual-stack server's second any-address listener on a
 * port (IPv6-only beside IPv4, as Redis binds "* -::*") finds the port
 * taken. The first one already receives both families' connections: the
 * second becomes an alias that binds and listens and never has a
 * connection to accept. */
PUBLIC int bind(int fd, const struct sockaddr *sa, socklen_t len)
{
	struct rsref *r, *other;
	int port, any, err;

	preload_init();
	r = fd_ref(fd);
	if (!r)
		return real.bind(fd, sa, len);
	if (!sa)
		return errno = EINVAL, -1;
	any = any_port(sa, len, &port);
	if (!rbind(r->rs, sa, len)) {
		r->port = port;
		r->any = any;
		return 0;
	}
	err = errno;
	if (err == EADDRINUSE && any && port > 0) {
		other = fd_find_port(sa->sa_family == AF_INET ? AF_INET6 : AF_INET, port, r);
		if (other && other->any && (r->v6only || other->v6only)) {
			r->alias = 1;
			r->port = port;
			r->any = 1;
			return 0;
		}
	}
	errno = err;
	return -1;
}

PUBLIC int listen(int fd, int backlog)
{
	struct rsref *r;

	preload_init();
	r = fd_ref(fd);
	if (!r)
		return real.listen(fd, backlog);
	return r->alias ? 0 : rlisten(r->rs, backlog);
}

static int accept_rs(struct rsref *l, struct sockaddr *sa, socklen_t *len, int flags)
{
	struct rsref *r;
	int rs, fd;

	if (l->alias) {
		/* Never a connection: wait as a listener with none would. */
		if (rfcntl(l->rs, F_GETFL) & O_NONBLOCK)
			return errno = EAGAIN, -1;
		for (;;)
			pause();
	}
	rs = raccept(l->rs, sa, len);
	if (rs < 0)
		return -1;
	r = calloc(1, sizeof(*r));
	if (!r) {
		rclose(rs);
		return errno = ENOMEM, -1;
	}
	r->rs = rs;
	r->family = l->family;
	r->port = -1;
	if (flags & SOCK_NONBLOCK)
		rfcntl(rs, F_SETFL, rfcntl(rs, F_GETFL) | O_NONBLOCK);
	else
		rfcntl(rs, F_SETFL, rfcntl(rs, F_GETFL) & ~O_NONBLOCK);
	fd = fd_new(r, flags & SOCK_CLOEXEC);
	if (fd < 0) {
		rclose(rs);
		free(r);
	}
	return fd;
}

PUBLIC int accept(int fd, struct sockaddr *sa, socklen_t *len)
{
	struct rsref *r;

	preload_init();
	r = fd_ref(fd);
	return r ? accept_rs(r, sa, len, 0) : real.accept(fd, sa, len);
}

PUBLIC int accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
	struct rsref *r;

	preload_init();
	r = fd_ref(fd);
	return r ? accept_rs(r, sa, len, flags) : real.accept4(fd, sa, len, flags);
}

PUBLIC int connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	struct rsref *r;

	preload_init();
	r = fd_ref(fd);
	return r ? rconnect(r->rs, sa, len) : real.connect(fd, sa, len);
}

PUBLIC int shutdown(int fd, int how)
{
	struct rsref *r;

	preload_init();
	r = fd_ref(fd);
	return r ? rshutdown(r->rs, how) : real.shutdown(fd, how);
}

PUBLIC int close(int fd)
{
	struct rsref *r;

	preload_init();
	r = fd_detach(fd);
	if (r)
		fd_release(r);
	else
		epoll_closed(fd);
	return real.close(fd);
}

PUBLIC int getpeername(int fd, struct sockaddr *sa, socklen_t *len)
{
	struct rsref *r;

	preload_init();
	r = fd_ref(fd);
	return r ? rgetpeername(r->rs, sa, len) : real.getpeername(fd, sa, len);
}

PUBLIC int getsockname(int fd, struct sockaddr *sa, socklen_t *len)
{
	struct rsref *r;

	preload_init();
	r = fd_ref(fd);
	return r ? rgetsockname(r->rs, sa, len) : real.getsockname(fd, sa, len);
}

PUBLIC int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	struct rsref *r;
	int ret;

	preload_init();
	r = fd_ref(fd);
	if (!r)
		return real.setsockopt(fd, level, name, val, len);
	ret = rsetsockopt(r->rs, level, name, val, len);
	if (!ret && level == IPPROTO_IPV6 && name == IPV6_V6ONLY && val && len >= sizeof(int))
		r->v6only = *(const int *)val;
	return ret;
}

PUBLIC int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	struct rsref *r;

	preload_init();
	r = fd_ref(fd);
	if (!r)
		return real.getsockopt(fd, level, name, val, len);
	if (level == SOL_SOCKET && name == SO_DOMAIN && val && len && *len >= sizeof(int)) {
		*(int *)val = r->family;
		*len = sizeof(int);
		return 0;
	}
	return rgetsockopt(r->rs, level, name, val, len);
}

/* dup_to makes newfd (open, ours to take) another name of r. */
static int dup_to(int newfd, struct rsref *r)
{
	struct rsref *old = fd_detach(newfd);

	if (old)
		fd_release(old);
	if (fd_attach(newfd, r)) {
		real.close(newfd);
		return errno = EMFILE, -1;
	}
	return newfd;
}

static int fcntl_rs(int fd, struct rsref *r, int cmd, long arg, int (*f)(int, int, ...))
{
	int nfd;

	switch (cmd) {
	case F_GETFL:
		return rfcntl(r->rs, F_GETFL) | O_RDWR;
	case F_SETFL:
		return rfcntl(r->rs, F_SETFL, (int)arg & O_NONBLOCK);
	case F_DUPFD:
	case F_DUPFD_CLOEXEC:
		nfd = f(fd, cmd, arg);
		return nfd < 0 ? nfd : dup_to(nfd, r);
	default:
		return f(fd, cmd, arg); /* F_GETFD, F_SETFD, locks: the placeholder's */
	}
}

/* fcntl_any is fcntl and fcntl64, which differ only in libc's function
 * (which the program chose by its _FILE_OFFSET_BITS). */
static int fcntl_any(int fd, int cmd, long arg, int (**f)(int, int, ...))
{
	struct rsref *r;

	preload_init();
	r = fd_ref(fd);
	return r ? fcntl_rs(fd, r, cmd, arg, *f) : (*f)(fd, cmd, arg);
}

PUBLIC int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	long arg;

	va_start(ap, cmd);
	arg = va_arg(ap, long);
	va_end(ap);
	return fcntl_any(fd, cmd, arg, &real.fcntl);
}

PUBLIC int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	long arg;

	va_start(ap, cmd);
	arg = va_arg(ap, long);
	va_end(ap);
	return fcntl_any(fd, cmd, arg, &real.fcntl64);
}

PUBLIC int ioctl(int fd, unsigned long req, ...)
{
	struct rsref *r;
	va_list ap;
	void *arg;

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	preload_init();
	r = fd_ref(fd);
	if (!r)
		return real.ioctl(fd, req, arg);
	switch (req) {
	case FIONBIO: {
		int fl = rfcntl(r->rs, F_GETFL);

		return rfcntl(r->rs, F_SETFL, *(int *)arg ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
	}
	case FIONREAD: {
		/* Bytes queued: what a non-blocking peek finds. */
		static __thread char scratch[65536];
		ssize_t n = rrecv(r->rs, scratch, sizeof(scratch), MSG_PEEK | MSG_DONTWAIT);

		*(int *)arg = n > 0 ? (int)n : 0;
		return 0;
	}
	}
	return errno = ENOTTY, -1;
}

PUBLIC int dup(int fd)
{
	struct rsref *r;
	int nfd;

	preload_init();
	r = fd_ref(fd);
	nfd = real.dup(fd);
	return r && nfd >= 0 ? dup_to(nfd, r) : nfd;
}

PUBLIC int dup2(int fd, int nfd)
{
	struct rsref *r;
	int ret;

	preload_init();
	r = fd_ref(fd);
	if (fd == nfd)
		return real.dup2(fd, nfd);
	ret = real.dup2(fd, nfd);
	if (ret < 0)
		return ret;
	if (r)
		return dup_to(ret, r);
	if ((r = fd_detach(ret)))
		fd_release(r); /* dup2 closed an rsocket's name */
	return ret;
}

PUBLIC int dup3(int fd, int nfd, int flags)
{
	struct rsref *r;
	int ret;

	preload_init();
	r = fd_ref(fd);
	ret = real.dup3(fd, nfd, flags);
	if (ret < 0)
		return ret;
	if (r)
		return dup_to(ret, r);
	if ((r = fd_detach(ret)))
		fd_release(r);
	return ret;
}
