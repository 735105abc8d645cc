/* cq.c: completion queues, polled from the ring the daemon shares with the
 * library (struct sr_cq_ring in proto.h) without a system call, both as
 * ibv_poll_cq and as the ibv_cq_ex start_poll/next_poll/end_poll family. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "context.h"

/* The wc_flags an extended CQ can report; others are EOPNOTSUPP, as rxe. */
#define SUPPORTED_WC_FLAGS (IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | \
			    IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP | \
			    IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | \
			    IBV_WC_EX_WITH_DLID_PATH_BITS)

/* wc_from_wire sets every field of wc (no memset: this is the data path). */
static void wc_from_wire(struct ibv_wc *wc, const struct sr_wc *w)
{
	wc->wr_id = w->wr_id;
	wc->status = w->status;
	wc->opcode = w->opcode;
	wc->vendor_err = w->vendor_err;
	wc->byte_len = w->byte_len;
	if (w->wc_flags & IBV_WC_WITH_INV)
		wc->invalidated_rkey = w->imm_data;
	else
		wc->imm_data = w->imm_data;
	wc->qp_num = w->qp_num;
	wc->src_qp = w->src_qp;
	wc->wc_flags = w->wc_flags;
	wc->pkey_index = w->pkey_index;
	wc->slid = w->slid;
	wc->sl = w->sl;
	wc->dlid_path_bits = w->dlid_path_bits;
}

/* ring_take moves up to max completions from the ring to out, oldest
 * first, and returns how many: the daemon publishes prod after the entry's
 * bytes, and gets the slots back when cons moves past them. */
static int ring_take(struct srl_cq *cq, struct sr_wc *out, uint32_t max)
{
	struct sr_cq_ring *r = cq->ring;
	uint32_t avail = __atomic_load_n(&r->prod, __ATOMIC_ACQUIRE) - cq->cons;
	uint32_t i, k = cq->cons % cq->entries;

	if (avail > max)
		avail = max;
	for (i = 0; i < avail; i++) {
		memcpy(&out[i], &r->wc[k], sizeof(out[i]));
		if (++k == cq->entries)
			k = 0;
	}
	if (avail) {
		cq->cons += avail;
		__atomic_store_n(&r->cons, cq->cons, __ATOMIC_RELEASE);
	}
	return avail;
}

/* empty_result is what a poll that found nothing returns: 0, or -1 with
 * errno EOVERFLOW once an overflowed CQ is empty (completions were lost),
 * or EPIPE once the daemon is gone (nothing more will come). */
static int empty_result(struct srl_cq *cq)
{
	if (__atomic_load_n(&cq->ring->flags, __ATOMIC_RELAXED) & SR_CQ_RING_OVERFLOW)
		return errno = EOVERFLOW, -1;
	if (!sr_ctx_alive(cq->cq.context))
		return errno = EPIPE, -1;
	return 0;
}

/* The wire's completion is as big as struct ibv_wc (a fixed ABI), so
 * sr_poll_cq copies the ring's straight into the caller's array and
 * decodes each in place. */
_Static_assert(sizeof(struct sr_wc) == sizeof(struct ibv_wc),
	       "struct sr_wc and struct ibv_wc differ in size");

/* sr_poll_cq is ibv_poll_cq: completions in the cache first, then the
 * ring's. Returns the number, or -1 (errno set). */
int sr_poll_cq(struct ibv_cq *ibcq, int num_entries, struct ibv_wc *wc)
{
	struct srl_cq *cq = to_lcq(ibcq);
	int done = 0, n, i;

	if (num_entries <= 0)
		return 0;
	pthread_mutex_lock(&cq->poll_lock);
	while (done < num_entries && cq->n > 0) {
		wc_from_wire(&wc[done++], &cq->cache[cq->head]);
		cq->head = (cq->head + 1) % cq->cap;
		cq->n--;
	}
	n = ring_take(cq, (struct sr_wc *)&wc[done], num_entries - done);
	for (i = 0; i < n; i++, done++) {
		struct sr_wc w;

		memcpy(&w, &wc[done], sizeof(w));
		wc_from_wire(&wc[done], &w);
	}
	if (!done)
		done = empty_result(cq);
	pthread_mutex_unlock(&cq->poll_lock);
	return done;
}

int sr_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	struct sr_req_notify req = { cq->handle, !!solicited_only };

	return sr_ctx_call(cq->context, SR_OP_REQ_NOTIFY_CQ, &req, sizeof(req), NULL, 0);
}

/* The extended API: cur is the completion the read_* callbacks report. */
static int ex_next(struct ibv_cq_ex *ex)
{
	struct srl_cq *cq = (struct srl_cq *)ex;

	if (cq->n > 0) {
		cq->cur = cq->cache[cq->head];
		cq->head = (cq->head + 1) % cq->cap;
		cq->n--;
	} else if (!ring_take(cq, &cq->cur, 1)) {
		return empty_result(cq) ? errno : ENOENT;
	}
	ex->wr_id = cq->cur.wr_id;
	ex->status = cq->cur.status;
	return 0;
}

/* cache_push appends w to the cache ring, doubling it when full. */
static int cache_push(struct srl_cq *cq, const struct sr_wc *w)
{
	if (cq->n == cq->cap) {
		struct sr_wc *c = malloc(2 * cq->cap * sizeof(*c));
		int i;

		if (!c)
			return ENOMEM;
		for (i = 0; i < cq->n; i++)
			c[i] = cq->cache[(cq->head + i) % cq->cap];
		free(cq->cache);
		cq->cache = c;
		cq->head = 0;
		cq->cap *= 2;
	}
	cq->cache[(cq->head + cq->n++) % cq->cap] = *w;
	return 0;
}

/* drain_ring moves everything in the ring to the cache, less QP qpn's
 * completions when qpn is not SR_NONE (0 or an errno value). */
static int drain_ring(struct srl_cq *cq, uint32_t qpn)
{
	struct sr_wc buf[64];
	int i, n, err = 0;

	do {
		n = ring_take(cq, buf, sizeof(buf) / sizeof(buf[0]));
		for (i = 0; i < n && !err; i++)
			if (qpn == SR_NONE || buf[i].qp_num != qpn)
				err = cache_push(cq, &buf[i]);
	} while (!err && n == (int)(sizeof(buf) / sizeof(buf[0])));
	return err;
}

/* sr_cq_clean removes QP qpn's completions from the CQ, as rdma-core's
 * mlx4/mlx5 providers do when a QP goes to RESET: a QP brought back from
 * ERR must not find its old flushed WRs ahead of its new completions. The
 * ring's slots belong to the daemon once consumed, so everything in it
 * moves to the cache, less qpn's; the other QPs' completions keep their
 * order. */
int sr_cq_clean(struct ibv_cq *ibcq, uint32_t qpn)
{
	struct srl_cq *cq = to_lcq(ibcq);
	int i, kept = 0, err;

	pthread_mutex_lock(&cq->poll_lock);
	for (i = 0; i < cq->n; i++) {
		struct sr_wc w = cq->cache[(cq->head + i) % cq->cap];

		if (w.qp_num != qpn)
			cq->cache[(cq->head + kept++) % cq->cap] = w;
	}
	cq->n = kept;
	err = drain_ring(cq, qpn);
	pthread_mutex_unlock(&cq->poll_lock);
	return err;
}

/* map_ring maps the ring of entries completions the daemon sent as fd
 * (closing fd), or returns NULL with errno set. */
static struct sr_cq_ring *map_ring(int fd, uint32_t entries, size_t *bytes)
{
	size_t size = SR_CQ_RING_HEADER + (size_t)entries * sizeof(struct sr_wc);
	struct stat st;
	void *p;

	if (fd < 0 || fstat(fd, &st) || (uint64_t)st.st_size < size) {
		if (fd >= 0)
			close(fd);
		errno = EPROTO;
		return NULL;
	}
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return NULL;
	/* A child forked after ibv_fork_init must not share the parent's
	 * consumer count, as rdma-core keeps a provider's queues from it. */
	if (sr_fork_enabled())
		madvise(p, size, MADV_DONTFORK);
	*bytes = size;
	return p;
}

static int ex_start_poll(struct ibv_cq_ex *ex, struct ibv_poll_cq_attr *attr)
{
	struct srl_cq *cq = (struct srl_cq *)ex;
	int err;

	if (attr->comp_mask)
		return EINVAL;
	pthread_mutex_lock(&cq->poll_lock);
	err = ex_next(ex);
	if (err)
		pthread_mutex_unlock(&cq->poll_lock);
	return err;
}

static int ex_next_poll(struct ibv_cq_ex *ex)
{
	return ex_next(ex);
}

static void ex_end_poll(struct ibv_cq_ex *ex)
{
	pthread_mutex_unlock(&((struct srl_cq *)ex)->poll_lock);
}

static inline struct sr_wc *cur(struct ibv_cq_ex *ex)
{
	return &((struct srl_cq *)ex)->cur;
}

static enum ibv_wc_opcode ex_read_opcode(struct ibv_cq_ex *ex)
{
	return cur(ex)->opcode;
}

static uint32_t ex_read_vendor_err(struct ibv_cq_ex *ex)
{
	return cur(ex)->vendor_err;
}

static uint32_t ex_read_byte_len(struct ibv_cq_ex *ex)
{
	return cur(ex)->byte_len;
}

static __be32 ex_read_imm_data(struct ibv_cq_ex *ex)
{
	return cur(ex)->imm_data;
}

static uint32_t ex_read_qp_num(struct ibv_cq_ex *ex)
{
	return cur(ex)->qp_num;
}

static uint32_t ex_read_src_qp(struct ibv_cq_ex *ex)
{
	return cur(ex)->src_qp;
}

static unsigned int ex_read_wc_flags(struct ibv_cq_ex *ex)
{
	return cur(ex)->wc_flags;
}

static uint32_t ex_read_slid(struct ibv_cq_ex *ex)
{
	return cur(ex)->slid;
}

static uint8_t ex_read_sl(struct ibv_cq_ex *ex)
{
	return cur(ex)->sl;
}

static uint8_t ex_read_dlid_path_bits(struct ibv_cq_ex *ex)
{
	return cur(ex)->dlid_path_bits;
}

static struct srl_cq *create_cq(struct ibv_context *ctx, uint32_t cqe, void *cq_context,
				struct ibv_comp_channel *channel, uint32_t comp_vector)
{
	struct sr_create_cq req = { cqe, SR_NONE, comp_vector };
	struct ibv_cq_ex *ex;
	struct srl_cq *cq;
	struct sr_cq resp;
	int err, fd = -1;

	if (comp_vector >= (uint32_t)ctx->num_comp_vectors) {
		errno = EINVAL;
		return NULL;
	}
	cq = calloc(1, sizeof(*cq));
	if (cq)
		cq->cache = calloc(SRL_CQ_BATCH, sizeof(*cq->cache));
	if (!cq || !cq->cache) {
		free(cq);
		errno = ENOMEM;
		return NULL;
	}
	cq->cap = SRL_CQ_BATCH;
	if (channel)
		req.channel = ((struct srl_chan *)channel)->handle;
	err = sr_ctx_callx(ctx, SR_OP_CREATE_CQ, &req, sizeof(req), NULL, 0,
			   &resp, sizeof(resp), NULL, &fd);
	if (!err) {
		cq->entries = resp.cqe;
		cq->ring = resp.cqe ? map_ring(fd, resp.cqe, &cq->ring_bytes) : NULL;
		if (!cq->ring)
			err = errno;
	}
	if (!err)
		err = sr_obj_add(ctx, SR_ELEM_CQ, resp.handle, cq);
	if (err) {
		/* A CQ the library could not take is still destroyed on close. */
		if (cq->ring)
			munmap(cq->ring, cq->ring_bytes);
		free(cq->cache);
		free(cq);
		errno = err;
		return NULL;
	}
	ex = &cq->cq;
	ex->context = ctx;
	ex->channel = channel;
	ex->cq_context = cq_context;
	ex->handle = resp.handle;
	ex->cqe = resp.cqe;
	pthread_mutex_init(&ex->mutex, NULL);
	pthread_cond_init(&ex->cond, NULL);
	pthread_mutex_init(&cq->poll_lock, NULL);
	ex->start_poll = ex_start_poll;
	ex->next_poll = ex_next_poll;
	ex->end_poll = ex_end_poll;
	ex->read_opcode = ex_read_opcode;
	ex->read_vendor_err = ex_read_vendor_err;
	ex->read_byte_len = ex_read_byte_len;
	ex->read_imm_data = ex_read_imm_data;
	ex->read_qp_num = ex_read_qp_num;
	ex->read_src_qp = ex_read_src_qp;
	ex->read_wc_flags = ex_read_wc_flags;
	ex->read_slid = ex_read_slid;
	ex->read_sl = ex_read_sl;
	ex->read_dlid_path_bits = ex_read_dlid_path_bits;
	if (channel) {
		pthread_mutex_lock(&ctx->mutex);
		channel->refcnt++;
		pthread_mutex_unlock(&ctx->mutex);
	}
	return cq;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
			     struct ibv_comp_channel *channel, int comp_vector)
{
	struct srl_cq *cq;

	if (cqe < 1 || comp_vector < 0) {
		errno = EINVAL;
		return NULL;
	}
	cq = create_cq(ctx, cqe, cq_context, channel, comp_vector);
	return cq ? ibv_cq_ex_to_cq(&cq->cq) : NULL;
}

struct ibv_cq_ex *sr_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr)
{
	struct srl_cq *cq;

	if (attr->comp_mask & ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD) ||
	    attr->wc_flags & ~(uint64_t)SUPPORTED_WC_FLAGS) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
	    attr->flags & ~(uint32_t)IBV_CREATE_CQ_ATTR_SINGLE_THREADED) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (attr->cqe < 1) {
		errno = EINVAL;
		return NULL;
	}
	cq = create_cq(ctx, attr->cqe, attr->cq_context, attr->channel, attr->comp_vector);
	return cq ? &cq->cq : NULL;
}

/* ibv_resize_cq: the daemon makes a new ring and writes only there once it
 * answers. What the old ring held moves to the cache, before the call (to
 * know that the new depth holds it) and after (what came meanwhile). */
int ibv_resize_cq(struct ibv_cq *ibcq, int cqe)
{
	struct srl_cq *cq = to_lcq(ibcq);
	struct sr_resize_cq req = { ibcq->handle, cqe };
	struct sr_cq_ring *ring;
	struct sr_cq resp;
	size_t bytes;
	int err, fd = -1;

	if (cqe < 1)
		return errno = EINVAL, EINVAL;
	pthread_mutex_lock(&cq->poll_lock);
	err = drain_ring(cq, SR_NONE);
	if (!err && cq->n > cqe)
		err = EINVAL;
	if (!err)
		err = sr_ctx_callx(ibcq->context, SR_OP_RESIZE_CQ, &req, sizeof(req), NULL, 0,
				   &resp, sizeof(resp), NULL, &fd);
	if (!err && !resp.cqe)
		err = EPROTO;
	if (!err) {
		ring = map_ring(fd, resp.cqe, &bytes);
		if (!ring)
			err = errno;
	}
	if (!err) {
		err = drain_ring(cq, SR_NONE);
		munmap(cq->ring, cq->ring_bytes);
		cq->ring = ring;
		cq->ring_bytes = bytes;
		cq->entries = resp.cqe;
		cq->cons = 0;
		ibcq->cqe = resp.cqe;
	}
	pthread_mutex_unlock(&cq->poll_lock);
	if (err)
		errno = err;
	return err;
}

/* ibv_destroy_cq waits, as rdma-core does, until every event the daemon
 * delivered for the CQ has been acknowledged. */
int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct srl_cq *lcq = to_lcq(cq);
	struct ibv_context *ctx = cq->context;
	struct ibv_comp_channel *channel = cq->channel;
	struct sr_handle h = { cq->handle };
	struct sr_destroy_cq_resp resp;
	int err;

	err = sr_ctx_call(ctx, SR_OP_DESTROY_CQ, &h, sizeof(h), &resp, sizeof(resp));
	if (err && !sr_ctx_gone(ctx, err))
		return errno = err, err;
	/* A dead daemon reports no counts: nothing more will come. */
	if (!err) {
		sr_wait_events(&cq->mutex, &cq->cond, &cq->comp_events_completed,
			       resp.comp_events);
		sr_wait_events(&cq->mutex, &cq->cond, &cq->async_events_completed,
			       resp.async_events);
	}
	sr_obj_del(ctx, SR_ELEM_CQ, cq->handle);
	if (channel) {
		pthread_mutex_lock(&ctx->mutex);
		channel->refcnt--;
		pthread_mutex_unlock(&ctx->mutex);
	}
	pthread_mutex_destroy(&lcq->poll_lock);
	munmap(lcq->ring, lcq->ring_bytes);
	free(lcq->cache);
	free(lcq);
	return 0;
}
