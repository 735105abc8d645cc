/* epoll.c: epoll sets holding rsockets. The kernel cannot watch an
 * rsocket (its readiness is credits and queued messages in user space),
 * so the set keeps its rsockets here and its other fds in the kernel's
 * epoll; epoll_wait hands both to rpoll: the rsockets, and the kernel's
 * epoll fd itself, readable while its own fds have events. Level- and
 * edge-triggered (reported when the readiness changes) and EPOLLONESHOT. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <rdma/rsocket.h>

#include "preload.h"

struct entry {
	int fd;
	struct rsref *r;
	uint32_t events;
	epoll_data_t data;
	uint32_t last; /* readiness last reported (EPOLLET) */
	int off;       /* EPOLLONESHOT fired; off until EPOLL_CTL_MOD */
	struct entry *next;
};

struct eset {
	int epfd;
	struct entry *list;
	struct eset *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct eset *sets;

static struct eset *find(int epfd, int create)
{
	struct eset *s;

	for (s = sets; s; s = s->next)
		if (s->epfd == epfd)
			return s;
	if (!create)
		return NULL;
	s = calloc(1, sizeof(*s));
	if (s) {
		s->epfd = epfd;
		s->next = sets;
		sets = s;
	}
	return s;
}

static struct entry **find_entry(struct eset *s, int fd)
{
	struct entry **pe;

	for (pe = &s->list; *pe; pe = &(*pe)->next)
		if ((*pe)->fd == fd)
			return pe;
	return NULL;
}

PUBLIC int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	struct entry **pe, *e;
	struct eset *s;
	struct rsref *r;
	int ret = 0;

	preload_init();
	r = fd_ref(fd);
	if (!r)
		return real.epoll_ctl(epfd, op, fd, ev);
	if (op != EPOLL_CTL_DEL && !ev)
		return errno = EFAULT, -1;
	pthread_mutex_lock(&lock);
	s = find(epfd, op == EPOLL_CTL_ADD);
	pe = s ? find_entry(s, fd) : NULL;
	switch (op) {
	case EPOLL_CTL_ADD:
		if (!s) {
			ret = ENOMEM;
		} else if (pe) {
			ret = EEXIST;
		} else if (!(e = calloc(1, sizeof(*e)))) {
			ret = ENOMEM;
		} else {
			e->fd = fd;
			e->r = r;
			e->events = ev->events;
			e->data = ev->data;
			e->next = s->list;
			s->list = e;
		}
		break;
	case EPOLL_CTL_MOD:
		if (!pe) {
			ret = ENOENT;
		} else {
			(*pe)->events = ev->events;
			(*pe)->data = ev->data;
			(*pe)->last = 0;
			(*pe)->off = 0;
		}
		break;
	case EPOLL_CTL_DEL:
		if (!pe) {
			ret = ENOENT;
		} else {
			e = *pe;
			*pe = e->next;
			free(e);
		}
		break;
	default:
		ret = EINVAL;
	}
	pthread_mutex_unlock(&lock);
	return ret ? (errno = ret, -1) : 0;
}

/* epoll_forget drops a closing rsocket from every set, as the kernel
 * drops a file's last close from its epoll sets. */
void epoll_forget(struct rsref *r)
{
	struct entry **pe, *e;
	struct eset *s;

	pthread_mutex_lock(&lock);
	for (s = sets; s; s = s->next) {
		for (pe = &s->list; (e = *pe);) {
			if (e->r == r) {
				*pe = e->next;
				free(e);
			} else {
				pe = &e->next;
			}
		}
	}
	pthread_mutex_unlock(&lock);
}

/* epoll_wait_rs waits on s's rsockets and kernel fds together. */
static int epoll_wait_rs(struct eset *s, int epfd, struct epoll_event *out, int max, int timeout)
{
	static __thread struct pollfd *p;
	static __thread int *fdof;
	static __thread int cap;
	struct timespec t0, t1;
	struct entry *e, **pe;
	int n, i, k, ret, left = timeout;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		pthread_mutex_lock(&lock);
		n = 1;
		for (e = s->list; e; e = e->next)
			n++;
		if (n > cap) {
			struct pollfd *np = realloc(p, n * sizeof(*np));
			int *nf = realloc(fdof, n * sizeof(*nf));

			if (np)
				p = np;
			if (nf)
				fdof = nf;
			if (!np || !nf) {
				pthread_mutex_unlock(&lock);
				return errno = ENOMEM, -1;
			}
			cap = n;
		}
		p[0].fd = epfd;
		p[0].events = POLLIN;
		p[0].revents = 0;
		for (k = 1, e = s->list; e; e = e->next, k++) {
			p[k].fd = e->off || e->r->alias ? -1 : e->r->rs;
			p[k].events = e->events & (POLLIN | POLLOUT | POLLPRI);
			p[k].revents = 0;
			fdof[k] = e->fd;
		}
		pthread_mutex_unlock(&lock);

		ret = rpoll(p, n, left);
		if (ret < 0)
			return ret;
		k = 0;
		pthread_mutex_lock(&lock);
		for (i = 1; i < n && k < max; i++) {
			uint32_t ev, report;

			if (!p[i].revents || !(pe = find_entry(s, fdof[i])))
				continue;
			e = *pe;
			ev = p[i].revents & (e->events | EPOLLERR | EPOLLHUP);
			report = (e->events & EPOLLET) ? ev & ~e->last : ev;
			e->last = ev;
			if (!report)
				continue;
			out[k].events = report;
			out[k].data = e->data;
			k++;
			if (e->events & EPOLLONESHOT)
				e->off = 1;
		}
		pthread_mutex_unlock(&lock);
		if ((p[0].revents & POLLIN) && k < max) {
			ret = real.epoll_wait(epfd, out + k, max - k, 0);
			if (ret > 0)
				k += ret;
		}
		if (k || !timeout)
			return k;
		if (timeout > 0) {
			clock_gettime(CLOCK_MONOTONIC, &t1);
			left = timeout - (int)((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000);
			if (left <= 0)
				return 0;
		}
	}
}

/* ours is the set epfd names when it holds rsockets, else NULL (libc
 * serves the call). */
static struct eset *ours(int epfd)
{
	struct eset *s;

	preload_init();
	pthread_mutex_lock(&lock);
	s = find(epfd, 0);
	if (s && !s->list)
		s = NULL;
	pthread_mutex_unlock(&lock);
	return s;
}

PUBLIC int epoll_wait(int epfd, struct epoll_event *events, int max, int timeout)
{
	struct eset *s = ours(epfd);

	if (!s)
		return real.epoll_wait(epfd, events, max, timeout);
	if (max <= 0)
		return errno = EINVAL, -1;
	return epoll_wait_rs(s, epfd, events, max, timeout);
}

PUBLIC int epoll_pwait(int epfd, struct epoll_event *events, int max, int timeout, const sigset_t *mask)
{
	if (!ours(epfd))
		return real.epoll_pwait(epfd, events, max, timeout, mask);
	return epoll_wait(epfd, events, max, timeout); /* the mask is not applied */
}

/* epoll_closed forgets a closed epoll fd's set. */
void epoll_closed(int fd)
{
	struct eset **ps, *s;
	struct entry *e, *next;

	pthread_mutex_lock(&lock);
	for (ps = &sets; (s = *ps); ps = &s->next) {
		if (s->epfd == fd) {
			*ps = s->next;
			for (e = s->list; e; e = next) {
				next = e->next;
				free(e);
			}
			free(s);
			break;
		}
	}
	pthread_mutex_unlock(&lock);
}
