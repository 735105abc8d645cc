/* rs_poll.c: rpoll and rselect over rsockets and ordinary descriptors
 * alike. An rsocket is ready by its state (data queued, credits and a
 * target to send into, a connection request waiting, a connection done
 * or failed); to block, rpoll arms each rsocket's CQ and polls the fds
 * that would change that: its completion channel and its rdma_cm channel.
 * A blocked rpoll looks again every RS_WAKE_MS, for another thread may
 * have taken the event that concerned it. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>

#include "rs.h"

static int rs_any(struct rsock *rs)
{
	return 1;
}

/* rs_revents says what is ready on rs, taking its completions first. */
static short rs_revents(struct rsock *rs, short events)
{
	short rev = 0;

	if (rs->type == SOCK_DGRAM)
		return ds_revents(rs, events);
	if (rs->state & RS_OPENING) {
		if (rs_do_connect(rs) && errno == EINPROGRESS)
			return 0;
	}
	if (rs->state & (RS_CONNECTED | RS_DISCONNECTED | RS_ERROR)) {
		rs_cm_events_now_and_then(rs);
		rs_process(rs, 1, rs_any);
		if ((events & POLLIN) && rs_conn_have_rdata(rs))
			rev |= POLLIN;
		if ((events & POLLOUT) && rs_can_send(rs) && (rs->state & RS_WRITABLE))
			rev |= POLLOUT;
		/* Hung up once what the peer sent before it left is read (as
		 * TCP's POLLHUP after the FIN's data; librdmacm says it at
		 * once, and rstream -T a then fails its last read). */
		if (rs->state == RS_DISCONNECTED && !rs_have_rdata(rs))
			rev |= POLLHUP;
		else if (!(rs->state & (RS_CONNECTED | RS_DISCONNECTED)))
			rev |= POLLERR;
		return rev;
	}
	if (rs->state == RS_CONNECT_ERROR)
		return (events & (POLLIN | POLLOUT)) | POLLERR;
	return 0;
}

/* rs_check fills in what is ready now: rsockets by their state, every
 * other fd (and listening rsockets' channels) in one poll call. */
static int rs_check(struct pollfd *fds, nfds_t nfds)
{
	static __thread struct pollfd *q;
	static __thread nfds_t *qi, cap;
	nfds_t i, m = 0;
	int cnt = 0;

	if (nfds > cap) {
		struct pollfd *nq = realloc(q, nfds * sizeof(*nq));
		nfds_t *ni = realloc(qi, nfds * sizeof(*ni));

		if (nq)
			q = nq;
		if (ni)
			qi = ni;
		if (!nq || !ni)
			return rs_err(ENOMEM);
		cap = nfds;
	}
	for (i = 0; i < nfds; i++) {
		struct rsock *rs = rs_get(fds[i].fd);

		fds[i].revents = 0;
		if (rs && (rs->type == SOCK_DGRAM || rs->state != RS_LISTENING)) {
			fds[i].revents = rs_revents(rs, fds[i].events);
			continue;
		}
		q[m] = fds[i];
		if (rs) {
			q[m].fd = rs->id->channel->fd;
			q[m].events = POLLIN;
		}
		q[m].revents = 0;
		qi[m++] = i;
	}
	if (m && poll(q, m, 0) < 0)
		return -1;
	for (i = 0; i < m; i++) {
		struct pollfd *f = &fds[qi[i]];

		f->revents = rs_get(f->fd) ? (q[i].revents & POLLIN ? f->events & POLLIN : 0) : q[i].revents;
	}
	for (i = 0; i < nfds; i++)
		if (fds[i].revents)
			cnt++;
	return cnt;
}

/* rs_arm prepares rs to wake a blocked poll and names the fds to poll. */
static void rs_arm(struct rsock *rs, struct pollfd *p)
{
	if (rs->type == SOCK_DGRAM) {
		ds_arm(rs, p);
		return;
	}
	p[0].fd = p[1].fd = -1;
	p[0].events = p[1].events = POLLIN;
	p[0].revents = p[1].revents = 0;
	if (rs->state & (RS_CONNECTED | RS_DISCONNECTED | RS_ERROR)) {
		pthread_mutex_lock(&rs->lock);
		if (!rs->cq_armed) {
			ibv_req_notify_cq(rs->id->recv_cq, 0);
			rs->cq_armed = 1;
		}
		pthread_mutex_unlock(&rs->lock);
		p[0].fd = rs->id->recv_cq_channel->fd;
	}
	p[1].fd = rs->id->channel->fd;
}

/* rs_take consumes the completion event that woke us, if it is ours. */
static void rs_take(struct rsock *rs, struct pollfd *p)
{
	if (rs->type == SOCK_DGRAM) {
		ds_take(rs, p);
		return;
	}
	if (p[1].revents && (rs->state & (RS_CONNECTED | RS_DISCONNECTED | RS_ERROR)))
		rs_cm_events(rs);
	if (!p[0].revents)
		return;
	pthread_mutex_lock(&rs->wait_lock);
	if (rs->cq_armed)
		rs_take_cq_event(rs);
	pthread_mutex_unlock(&rs->wait_lock);
}

int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	static __thread struct pollfd *pfds;
	static __thread nfds_t cap;
	uint64_t start = rs_now_us(), now;
	nfds_t i;
	int ret, wait;

	for (;;) {
		ret = rs_check(fds, nfds);
		if (ret || !timeout)
			return ret;
		if (rs_now_us() - start > rs_polling_us)
			break;
	}
	if (2 * nfds > cap) {
		struct pollfd *n = realloc(pfds, 2 * nfds * sizeof(*n));

		if (!n)
			return rs_err(ENOMEM);
		pfds = n;
		cap = 2 * nfds;
	}
	for (;;) {
		for (i = 0; i < nfds; i++) {
			struct rsock *rs = rs_get(fds[i].fd);

			if (rs) {
				rs_arm(rs, &pfds[2 * i]);
			} else {
				pfds[2 * i] = fds[i];
				pfds[2 * i].revents = 0;
				pfds[2 * i + 1].fd = -1;
			}
		}
		/* Armed: anything that came before the arming shows now. */
		ret = rs_check(fds, nfds);
		if (ret)
			return ret;
		wait = RS_WAKE_MS;
		if (timeout >= 0) {
			now = rs_now_us();
			if ((int64_t)(now - start) / 1000 >= timeout)
				return 0;
			if (timeout - (int)((now - start) / 1000) < wait)
				wait = timeout - (int)((now - start) / 1000);
		}
		ret = poll(pfds, 2 * nfds, wait);
		if (ret < 0)
			return ret;
		for (i = 0; i < nfds; i++) {
			struct rsock *rs = rs_get(fds[i].fd);

			if (rs)
				rs_take(rs, &pfds[2 * i]);
		}
		ret = rs_check(fds, nfds);
		if (ret)
			return ret;
	}
}

int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds, struct timeval *timeout)
{
	struct pollfd *fds;
	int fd, n = 0, ret, i, cnt = 0, ms = -1;

	if (nfds < 0 || nfds > FD_SETSIZE)
		return rs_err(EINVAL);
	fds = calloc(nfds ? nfds : 1, sizeof(*fds));
	if (!fds)
		return rs_err(ENOMEM);
	for (fd = 0; fd < nfds; fd++) {
		short ev = 0;

		if (readfds && FD_ISSET(fd, readfds))
			ev |= POLLIN;
		if (writefds && FD_ISSET(fd, writefds))
			ev |= POLLOUT;
		if (ev || (exceptfds && FD_ISSET(fd, exceptfds))) {
			fds[n].fd = fd;
			fds[n].events = ev;
			n++;
		}
	}
	if (timeout)
		ms = timeout->tv_sec * 1000 + (timeout->tv_usec + 999) / 1000;
	ret = rpoll(fds, n, ms);
	if (readfds)
		FD_ZERO(readfds);
	if (writefds)
		FD_ZERO(writefds);
	if (exceptfds)
		FD_ZERO(exceptfds);
	if (ret > 0) {
		for (i = 0; i < n; i++) {
			if (readfds && (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) && (fds[i].events & POLLIN)) {
				FD_SET(fds[i].fd, readfds);
				cnt++;
			}
			if (writefds && (fds[i].revents & (POLLOUT | POLLERR)) && (fds[i].events & POLLOUT)) {
				FD_SET(fds[i].fd, writefds);
				cnt++;
			}
			if (exceptfds && (fds[i].revents & POLLPRI)) {
				FD_SET(fds[i].fd, exceptfds);
				cnt++;
			}
		}
		ret = cnt;
	}
	free(fds);
	return ret;
}
