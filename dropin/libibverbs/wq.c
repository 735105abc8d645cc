/* wq.c: posting through a QP's rings (struct sr_wq_ring in proto.h), shared
 * with the daemon as a kernel provider shares its queues with the driver: a
 * post writes the WRs into slots, publishes them, and rings the doorbell
 * only when the ring says the daemon's poller must be woken (a send ring
 * while it sleeps; a receive ring while it sleeps and the QP is in the
 * error state). Only WRs that cannot fail in the QP go this way (see
 * proto.h); for anything else the caller makes a call.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "context.h"

void sr_wq_map(struct srl_qp *q, int fd, int on_srq)
{
	struct sr_wq_ring *sq, *rq = NULL;
	struct stat st;
	size_t sq_bytes, rq_off, size;
	void *p;

	if (fd < 0)
		return;
	if (fstat(fd, &st) || st.st_size < SR_WQ_RING_HEADER)
		goto out;
	size = st.st_size;
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		goto out;
	sq = p;
	sq_bytes = SR_WQ_RING_HEADER + (size_t)sq->slots * sq->slot_size;
	rq_off = (sq_bytes + 15) & ~(size_t)15;
	if (sq->slots != q->max_send_wr || sq_bytes > size)
		goto bad;
	if (!on_srq && q->max_recv_wr) {
		if (rq_off + SR_WQ_RING_HEADER > size)
			goto bad;
		rq = (struct sr_wq_ring *)((char *)p + rq_off);
		if (rq->slots != q->max_recv_wr ||
		    rq_off + SR_WQ_RING_HEADER + (size_t)rq->slots * rq->slot_size > size)
			goto bad;
	}
	/* A child forked after ibv_fork_init must not share the parent's
	 * counts, as rdma-core keeps a provider's queues from it. */
	if (sr_fork_enabled())
		madvise(p, size, MADV_DONTFORK);
	q->rings = p;
	q->rings_bytes = size;
	q->sq = sq;
	q->rq = rq;
	pthread_mutex_init(&q->sq_lock, NULL);
	pthread_mutex_init(&q->rq_lock, NULL);
	goto out;
bad:
	munmap(p, size);
out:
	close(fd);
}

void sr_wq_unmap(struct srl_qp *q)
{
	if (!q->rings)
		return;
	munmap(q->rings, q->rings_bytes);
	pthread_mutex_destroy(&q->sq_lock);
	pthread_mutex_destroy(&q->rq_lock);
	q->rings = NULL;
	q->sq = q->rq = NULL;
}

static void ring_doorbell(struct ibv_context *ctx)
{
	uint64_t one = 1;
	ssize_t n = write(to_sr(ctx)->doorbell, &one, sizeof(one));

	(void)n; /* a full eventfd is rung already */
}

/* publish makes *prod the ring's count and rings the doorbell if the ring
 * asks. Both sides store, then load the other's word, sequentially
 * consistent: either the poller sees the WRs or the library sees the ask. */
static void publish(struct ibv_context *ctx, struct sr_wq_ring *r, uint32_t prod)
{
	__atomic_store_n(&r->prod, prod, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&r->sleeping, __ATOMIC_SEQ_CST))
		ring_doorbell(ctx);
}

/* room: n more WRs fit the ring's slots and, by the daemon's count of WRs
 * finished with, the QP's depth. */
static int room(struct sr_wq_ring *r, uint32_t prod, uint32_t depth, uint32_t n)
{
	uint32_t cons = __atomic_load_n(&r->cons, __ATOMIC_ACQUIRE);
	uint32_t done = __atomic_load_n(&r->done, __ATOMIC_ACQUIRE);

	return prod - cons + n <= r->slots && prod - done + n <= depth;
}

/* send_ok: wr is one the QP takes whatever its state past RTS: an opcode
 * the QP's type has, with the attributes it needs (READ and atomics an RC
 * QP's max_rd_atomic, atomics an 8-byte local buffer and an aligned
 * target, none of them inline data), within the caps and the slot. The
 * daemon's checks (qp.checkSendWR) are the reference: a WR they refuse
 * from the ring moves the QP to the error state. */
static int send_ok(struct srl_qp *q, const struct ibv_send_wr *wr)
{
	enum ibv_qp_type t = q->qpx.qp_base.qp_type;
	int atomic = 0;
	uint64_t len = 0;
	size_t need;
	int i;

	switch (wr->opcode) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
		break;
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		if (t == IBV_QPT_UD)
			return 0;
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		if (wr->wr.atomic.remote_addr & 7)
			return 0;
		atomic = 1;
		/* fall through */
	case IBV_WR_RDMA_READ:
		if (t != IBV_QPT_RC || !q->max_rd_atomic || (wr->send_flags & IBV_SEND_INLINE))
			return 0;
		break;
	default:
		return 0;
	}
	if (t == IBV_QPT_UD && !wr->wr.ud.ah)
		return 0;
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->max_send_sge)
		return 0;
	for (i = 0; i < wr->num_sge; i++)
		len += wr->sg_list[i].length;
	if (len > (1u << 31) || (atomic && len != 8))
		return 0;
	if (wr->send_flags & IBV_SEND_INLINE) {
		if (len > q->max_inline)
			return 0;
		need = sizeof(struct sr_send_wr) + len;
	} else {
		need = sizeof(struct sr_send_wr) + wr->num_sge * sizeof(struct sr_sge);
	}
	return need <= q->sq->slot_size;
}

static uint8_t *slot_at(struct sr_wq_ring *r, uint32_t k)
{
	return r->slot + (size_t)(k % r->slots) * r->slot_size;
}

int sr_wq_post_send(struct srl_qp *q, struct ibv_send_wr *wr)
{
	struct ibv_qp *qp = &q->qpx.qp_base;
	struct sr_wq_ring *r = q->sq;
	struct ibv_send_wr *w;
	uint32_t n = 0;

	if (!r || qp->state != IBV_QPS_RTS)
		return -1;
	for (w = wr; w; w = w->next, n++)
		if (!send_ok(q, w))
			return -1;
	pthread_mutex_lock(&q->sq_lock);
	if (!room(r, q->sq_prod, q->max_send_wr, n)) {
		pthread_mutex_unlock(&q->sq_lock);
		return -1;
	}
	for (w = wr; w; w = w->next)
		sr_send_wr_to_wire(slot_at(r, q->sq_prod++), w, qp->qp_type);
	publish(qp->context, r, q->sq_prod);
	pthread_mutex_unlock(&q->sq_lock);
	return 0;
}

/* post_recv_ring posts a receive list through ring r (a QP's receive ring
 * or an SRQ's) of depth WRs of up to max_sge SGEs, whose count the caller
 * keeps in *prod under lock. */
static int post_recv_ring(struct ibv_context *ctx, struct sr_wq_ring *r, pthread_mutex_t *lock,
			  uint32_t *prod, uint32_t depth, uint32_t max_sge, struct ibv_recv_wr *wr)
{
	struct ibv_recv_wr *w;
	uint32_t n = 0;

	for (w = wr; w; w = w->next, n++)
		if (w->num_sge < 0 || (uint32_t)w->num_sge > max_sge ||
		    sizeof(struct sr_recv_wr) + w->num_sge * sizeof(struct sr_sge) > r->slot_size)
			return -1;
	pthread_mutex_lock(lock);
	if (!room(r, *prod, depth, n)) {
		pthread_mutex_unlock(lock);
		return -1;
	}
	for (w = wr; w; w = w->next)
		sr_recv_wr_to_wire(slot_at(r, (*prod)++), w);
	publish(ctx, r, *prod);
	pthread_mutex_unlock(lock);
	return 0;
}

int sr_wq_post_recv(struct srl_qp *q, struct ibv_recv_wr *wr)
{
	struct ibv_qp *qp = &q->qpx.qp_base;

	if (!q->rq || qp->state == IBV_QPS_RESET)
		return -1;
	return post_recv_ring(qp->context, q->rq, &q->rq_lock, &q->rq_prod, q->max_recv_wr,
			      q->max_recv_sge, wr);
}

/* An SRQ's ring: the device takes from it whenever a QP takes a WQE from
 * the SRQ, so no doorbell is ever asked for (the daemon leaves sleeping
 * clear). */
void sr_srq_map(struct srl_srq *s, int fd)
{
	struct stat st;
	void *p;

	if (fd < 0)
		return;
	if (fstat(fd, &st) || st.st_size < SR_WQ_RING_HEADER)
		goto out;
	p = mmap(NULL, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		goto out;
	s->ring = p;
	if (s->ring->slots != s->max_wr ||
	    SR_WQ_RING_HEADER + (size_t)s->ring->slots * s->ring->slot_size > (size_t)st.st_size) {
		munmap(p, st.st_size);
		s->ring = NULL;
		goto out;
	}
	if (sr_fork_enabled())
		madvise(p, st.st_size, MADV_DONTFORK);
	s->ring_bytes = st.st_size;
	pthread_mutex_init(&s->lock, NULL);
out:
	close(fd);
}

void sr_srq_unmap(struct srl_srq *s)
{
	if (!s->ring)
		return;
	munmap(s->ring, s->ring_bytes);
	pthread_mutex_destroy(&s->lock);
	s->ring = NULL;
}

int sr_wq_post_srq_recv(struct srl_srq *s, struct ibv_recv_wr *wr)
{
	if (!s->ring)
		return -1;
	return post_recv_ring(s->srq.context, s->ring, &s->lock, &s->prod, s->max_wr, s->max_sge, wr);
}
