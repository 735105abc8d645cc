/* poll.c: poll and select over the program's fds: when one stands for an
 * rsocket, the whole set goes to rpoll (which waits on the rsockets' and
 * the other fds together), else straight to libc. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/rsocket.h>

#include "preload.h"

/* to_rpoll rewrites fds for rpoll in a buffer of this thread's; 0 when no
 * fd is an rsocket's (then libc serves the call). */
static struct pollfd *to_rpoll(const struct pollfd *fds, nfds_t n)
{
	static __thread struct pollfd *buf;
	static __thread nfds_t cap;
	int ours = 0;
	nfds_t i;

	for (i = 0; i < n && !ours; i++)
		ours = fd_ref(fds[i].fd) != NULL;
	if (!ours)
		return NULL;
	if (n > cap) {
		struct pollfd *b = realloc(buf, n * sizeof(*b));

		if (!b)
			return NULL;
		buf = b;
		cap = n;
	}
	for (i = 0; i < n; i++) {
		struct rsref *r = fd_ref(fds[i].fd);

		buf[i] = fds[i];
		buf[i].revents = 0;
		if (r)
			buf[i].fd = r->alias ? -1 : r->rs;
	}
	return buf;
}

PUBLIC int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	struct pollfd *p;
	nfds_t i;
	int ret;

	preload_init();
	p = to_rpoll(fds, n);
	if (!p)
		return real.poll(fds, n, timeout);
	ret = rpoll(p, n, timeout);
	for (i = 0; i < n; i++)
		fds[i].revents = p[i].revents;
	return ret;
}

PUBLIC int select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv)
{
	struct pollfd *fds;
	int fd, n = 0, ret, i, cnt = 0, ours = 0;

	preload_init();
	for (fd = 0; fd < nfds && !ours; fd++)
		if ((rd && FD_ISSET(fd, rd)) || (wr && FD_ISSET(fd, wr)) || (ex && FD_ISSET(fd, ex)))
			ours = fd_ref(fd) != NULL;
	if (!ours)
		return real.select(nfds, rd, wr, ex, tv);
	fds = calloc(nfds, sizeof(*fds));
	if (!fds)
		return errno = ENOMEM, -1;
	for (fd = 0; fd < nfds; fd++) {
		short ev = 0;

		if (rd && FD_ISSET(fd, rd))
			ev |= POLLIN;
		if (wr && FD_ISSET(fd, wr))
			ev |= POLLOUT;
		if (ev || (ex && FD_ISSET(fd, ex))) {
			fds[n].fd = fd;
			fds[n].events = ev;
			n++;
		}
	}
	ret = poll(fds, n, tv ? (int)(tv->tv_sec * 1000 + (tv->tv_usec + 999) / 1000) : -1);
	if (ret >= 0) {
		if (rd)
			FD_ZERO(rd);
		if (wr)
			FD_ZERO(wr);
		if (ex)
			FD_ZERO(ex);
		for (i = 0; i < n; i++) {
			short rev = fds[i].revents;

			if (rd && (fds[i].events & POLLIN) && (rev & (POLLIN | POLLHUP | POLLERR))) {
				FD_SET(fds[i].fd, rd);
				cnt++;
			}
			if (wr && (fds[i].events & POLLOUT) && (rev & (POLLOUT | POLLERR))) {
				FD_SET(fds[i].fd, wr);
				cnt++;
			}
			if (ex && (rev & POLLPRI)) {
				FD_SET(fds[i].fd, ex);
				cnt++;
			}
		}
		ret = cnt;
	}
	free(fds);
	return ret;
}
