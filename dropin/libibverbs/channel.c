/* channel.c: completion channels. channel->fd is the daemon's eventfd, so
 * poll()/select() on it work as on the kernel's; the daemon adds one to it
 * per queued event and GET_CQ_EVENT says which CQ the event is for. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "context.h"

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx)
{
	struct srl_chan *c;
	struct sr_handle h;
	int fd, err;

	c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	err = sr_ctx_callx(ctx, SR_OP_CREATE_COMP_CHANNEL, NULL, 0, NULL, 0,
			   &h, sizeof(h), NULL, &fd);
	if (!err && fd < 0)
		err = EPROTO;
	if (err) {
		free(c);
		errno = err;
		return NULL;
	}
	c->ch.context = ctx;
	c->ch.fd = fd;
	c->ch.refcnt = 0;
	c->handle = h.handle;
	sr_chan_link(ctx, c);
	return &c->ch;
}

/* ibv_destroy_comp_channel fails with EBUSY while a CQ uses the channel;
 * once the daemon is gone it only frees the channel. */
int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct srl_chan *c = (struct srl_chan *)channel;
	struct ibv_context *ctx = channel->context;
	struct sr_handle h = { c->handle };
	int err;

	pthread_mutex_lock(&ctx->mutex);
	if (channel->refcnt) {
		pthread_mutex_unlock(&ctx->mutex);
		return errno = EBUSY, EBUSY;
	}
	err = sr_ctx_call(ctx, SR_OP_DESTROY_COMP_CHANNEL, &h, sizeof(h), NULL, 0);
	pthread_mutex_unlock(&ctx->mutex);
	if (err && !sr_ctx_gone(ctx, err))
		return errno = err, err;
	sr_chan_unlink(ctx, c);
	close(channel->fd);
	free(c);
	return 0;
}

/* sr_take_event waits for (or, on a non-blocking fd, checks for) one event
 * on a daemon eventfd. The daemon's eventfds are EFD_SEMAPHORE ones, so one
 * read takes exactly one event. Returns 0 or -1 with errno set (EAGAIN when
 * the fd is non-blocking and empty). */
int sr_take_event(int fd)
{
	uint64_t v;
	ssize_t n;

	do
		n = read(fd, &v, sizeof(v));
	while (n < 0 && errno == EINTR);
	if (n != sizeof(v)) {
		if (n >= 0)
			errno = EIO;
		return -1;
	}
	return 0;
}

/* ibv_get_cq_event blocks on the eventfd without holding any lock, then asks
 * the daemon which CQ fired. When the daemon is gone (ctx.c wakes every
 * channel then) it fails, and leaves the fd readable so that every later
 * call, and poll(), also see the end at once, as with a removed device. */
int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	struct srl_chan *c = (struct srl_chan *)channel;
	struct sr_handle req = { c->handle }, resp;
	struct ibv_cq *found;
	int err;

	for (;;) {
		if (sr_take_event(channel->fd))
			return -1;
		err = sr_ctx_call(channel->context, SR_OP_GET_CQ_EVENT, &req, sizeof(req),
				  &resp, sizeof(resp));
		if (err == EAGAIN)
			continue; /* counted but not queued yet: wait again */
		if (err) {
			if (sr_ctx_gone(channel->context, err)) {
				uint64_t one = 1;
				ssize_t n = write(channel->fd, &one, sizeof(one));

				(void)n;
			}
			errno = err;
			return -1;
		}
		found = sr_obj_find(channel->context, SR_ELEM_CQ, resp.handle);
		if (found)
			break;
		/* An event for a CQ already destroyed: nobody can ack it. */
	}
	*cq = found;
	if (cq_context)
		*cq_context = found->cq_context;
	return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_broadcast(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}
