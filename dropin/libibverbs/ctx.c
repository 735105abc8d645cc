/* ctx.c: what every verb on a context needs: calls on the context's socket
 * (one at a time, under the context lock), the table of objects an event can
 * name, and waiting for events to be acknowledged. */
#define _GNU_SOURCE /* POLLRDHUP */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "context.h"
#include "proto.h"

/* wake makes an eventfd readable once more. */
static void wake(int fd)
{
	uint64_t one = 1;
	ssize_t n = write(fd, &one, sizeof(one));

	(void)n;
}

/* shut_down: the socket reads EOF, which after EPROTO means sr_call found
 * the stream misaligned and shut it down (or the daemon went away). */
static int shut_down(int fd)
{
	char b;

	return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* mark_dead, under the context lock: the device is gone. Wake
 * ibv_get_async_event, which then reports IBV_EVENT_DEVICE_FATAL, as the
 * kernel does when a device is removed, and every thread blocked in
 * ibv_get_cq_event, whose GET_CQ_EVENT then fails. */
static void mark_dead(struct ibv_context *ctx)
{
	struct sr_context *c = to_sr(ctx);
	struct srl_chan *ch;

	__atomic_store_n(&c->dead, 1, __ATOMIC_RELAXED);
	wake(ctx->async_fd);
	for (ch = c->chans; ch; ch = ch->next)
		wake(ch->ch.fd);
}

/* sr_ctx_callx: see context.h. */
int sr_ctx_callx(struct ibv_context *ctx, uint32_t op, const void *body, uint32_t len,
		 const int *fds, int nfds, void *out, uint32_t outlen,
		 uint32_t *got, int *fd_out)
{
	struct sr_context *c = to_sr(ctx);
	int err;

	pthread_mutex_lock(&c->lock);
	err = sr_call(ctx->cmd_fd, op, body, len, fds, nfds, out, outlen, got, fd_out);
	if (!c->dead && (err == EPIPE || (err == EPROTO && shut_down(ctx->cmd_fd))))
		mark_dead(ctx);
	pthread_mutex_unlock(&c->lock);
	return err;
}

int sr_ctx_alive(struct ibv_context *ctx)
{
	struct sr_context *c = to_sr(ctx);
	struct pollfd p = { .fd = ctx->cmd_fd, .events = POLLRDHUP };
	struct timespec ts;
	int64_t now;
	int dead;

	if (__atomic_load_n(&c->dead, __ATOMIC_RELAXED))
		return 0;
	/* CLOCK_MONOTONIC_COARSE is read in the vDSO: no system call. */
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	now = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	if (now - __atomic_load_n(&c->checked_ns, __ATOMIC_RELAXED) < 100000000)
		return 1;
	__atomic_store_n(&c->checked_ns, now, __ATOMIC_RELAXED);
	if (poll(&p, 1, 0) != 1 || !(p.revents & (POLLHUP | POLLRDHUP | POLLERR)))
		return 1;
	pthread_mutex_lock(&c->lock);
	if (!c->dead)
		mark_dead(ctx);
	dead = c->dead;
	pthread_mutex_unlock(&c->lock);
	return !dead;
}

int sr_ctx_gone(struct ibv_context *ctx, int err)
{
	struct sr_context *c = to_sr(ctx);
	int dead;

	if (err != EPIPE && err != EPROTO)
		return 0;
	pthread_mutex_lock(&c->lock);
	dead = c->dead;
	pthread_mutex_unlock(&c->lock);
	return dead;
}

void sr_chan_link(struct ibv_context *ctx, struct srl_chan *ch)
{
	struct sr_context *c = to_sr(ctx);

	pthread_mutex_lock(&c->lock);
	ch->next = c->chans;
	c->chans = ch;
	/* Dead since the channel was made: its waiters must not block. */
	if (c->dead)
		wake(ch->ch.fd);
	pthread_mutex_unlock(&c->lock);
}

void sr_chan_unlink(struct ibv_context *ctx, struct srl_chan *ch)
{
	struct sr_context *c = to_sr(ctx);
	struct srl_chan **pp;

	pthread_mutex_lock(&c->lock);
	for (pp = &c->chans; *pp; pp = &(*pp)->next)
		if (*pp == ch) {
			*pp = ch->next;
			break;
		}
	pthread_mutex_unlock(&c->lock);
}

int sr_ctx_call(struct ibv_context *ctx, uint32_t op, const void *body, uint32_t len,
		void *out, uint32_t outlen)
{
	return sr_ctx_callx(ctx, op, body, len, NULL, 0, out, outlen, NULL, NULL);
}

int sr_ctx_query(struct ibv_context *ctx, uint32_t op, uint32_t port,
		 uint32_t index, void *out, uint32_t outlen)
{
	struct sr_query q = { to_sr(ctx)->index, port, index };

	return sr_ctx_call(ctx, op, &q, sizeof(q), out, outlen);
}

/* The object table is small and searched only when an event names an
 * object, never on the data path. */
int sr_obj_add(struct ibv_context *ctx, uint32_t kind, uint32_t handle, void *ptr)
{
	struct sr_context *c = to_sr(ctx);
	int err = 0;

	pthread_mutex_lock(&c->objs_lock);
	if (c->nobjs == c->capobjs) {
		int cap = c->capobjs ? 2 * c->capobjs : 16;
		struct sr_obj *o = realloc(c->objs, cap * sizeof(*o));

		if (!o) {
			err = ENOMEM;
			goto out;
		}
		c->objs = o;
		c->capobjs = cap;
	}
	c->objs[c->nobjs++] = (struct sr_obj){ kind, handle, ptr };
out:
	pthread_mutex_unlock(&c->objs_lock);
	return err;
}

void sr_obj_del(struct ibv_context *ctx, uint32_t kind, uint32_t handle)
{
	struct sr_context *c = to_sr(ctx);
	int i;

	pthread_mutex_lock(&c->objs_lock);
	for (i = 0; i < c->nobjs; i++)
		if (c->objs[i].kind == kind && c->objs[i].handle == handle) {
			c->objs[i] = c->objs[--c->nobjs];
			break;
		}
	pthread_mutex_unlock(&c->objs_lock);
}

void *sr_obj_find(struct ibv_context *ctx, uint32_t kind, uint32_t handle)
{
	struct sr_context *c = to_sr(ctx);
	void *p = NULL;
	int i;

	pthread_mutex_lock(&c->objs_lock);
	for (i = 0; i < c->nobjs; i++)
		if (c->objs[i].kind == kind && c->objs[i].handle == handle) {
			p = c->objs[i].ptr;
			break;
		}
	pthread_mutex_unlock(&c->objs_lock);
	return p;
}

void sr_wait_events(pthread_mutex_t *mutex, pthread_cond_t *cond,
		    const uint32_t *completed, uint32_t reported)
{
	pthread_mutex_lock(mutex);
	while (*completed != reported)
		pthread_cond_wait(cond, mutex);
	pthread_mutex_unlock(mutex);
}
