/* ctx.c: what every verb on a context needs: calls on the context's socket
 * (one at a time, under the context lock), the table of objects an event can
 * name, and waiting for events to be acknowledged. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "context.h"
#include "proto.h"

/* sr_ctx_callx: see context.h. */
int sr_ctx_callx(struct ibv_context *ctx, uint32_t op, const void *body, uint32_t len,
		 const int *fds, int nfds, void *out, uint32_t outlen,
		 uint32_t *got, int *fd_out)
{
	struct sr_context *c = to_sr(ctx);
	int err;

	pthread_mutex_lock(&c->lock);
	err = sr_call(ctx->cmd_fd, op, body, len, fds, nfds, out, outlen, got, fd_out);
	if (err == EPIPE && !c->dead) {
		uint64_t one = 1;
		ssize_t n;

		/* The device is gone: wake ibv_get_async_event, which then
		 * reports IBV_EVENT_DEVICE_FATAL, as the kernel does when a
		 * device is removed. */
		c->dead = 1;
		n = write(ctx->async_fd, &one, sizeof(one));
		(void)n;
	}
	pthread_mutex_unlock(&c->lock);
	return err;
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
