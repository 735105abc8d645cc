/* qp_ex.c: the ibv_qp_ex "new post send" callbacks (ibv_wr_*). Between
 * wr_start and wr_complete they build one POST_SEND body in the QP's buffer;
 * wr_complete sends it, wr_abort drops it. As in rdma-core, the first error
 * is remembered and returned by wr_complete, and nothing is posted then. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"

static struct srl_qp *lqp(struct ibv_qp_ex *qpx)
{
	return (struct srl_qp *)qpx;
}

/* reserve makes room for n more bytes; on failure it records the error. */
static int reserve(struct srl_qp *q, size_t n)
{
	size_t cap;
	char *p;

	if (q->wrlen <= q->wrcap && n <= q->wrcap - q->wrlen)
		return 0;
	if (n > SR_MAX_BODY - q->wrlen) {
		q->wrerr = q->wrerr ? q->wrerr : ENOMEM;
		return -1;
	}
	cap = q->wrcap ? q->wrcap : 4096;
	while (cap < q->wrlen + n)
		cap *= 2;
	p = realloc(q->wr, cap);
	if (!p) {
		q->wrerr = q->wrerr ? q->wrerr : ENOMEM;
		return -1;
	}
	q->wr = p;
	q->wrcap = cap;
	return 0;
}

static struct sr_send_wr *last_wr(struct srl_qp *q)
{
	if (!q->last) {
		q->wrerr = q->wrerr ? q->wrerr : EINVAL;
		return NULL;
	}
	return (struct sr_send_wr *)(q->wr + q->last);
}

static void reset(struct srl_qp *q)
{
	q->wrlen = sizeof(struct sr_post);
	q->last = 0;
	q->nwr = 0;
	q->wrerr = 0;
}

static void wr_start(struct ibv_qp_ex *qpx)
{
	struct srl_qp *q = lqp(qpx);

	reset(q);
	reserve(q, 0); /* the struct sr_post in front */
}

/* new_wr starts a WR of the given opcode with the QP's wr_id and wr_flags. */
static struct sr_send_wr *new_wr(struct ibv_qp_ex *qpx, enum ibv_wr_opcode op)
{
	struct srl_qp *q = lqp(qpx);
	struct sr_send_wr *w;

	if (q->wrerr || reserve(q, sizeof(*w)))
		return NULL;
	q->last = q->wrlen;
	q->wrlen += sizeof(*w);
	q->nwr++;
	w = (struct sr_send_wr *)(q->wr + q->last);
	memset(w, 0, sizeof(*w));
	w->wr_id = qpx->wr_id;
	w->opcode = op;
	w->send_flags = qpx->wr_flags;
	w->ah = SR_NONE;
	return w;
}

static void wr_rdma(struct ibv_qp_ex *qpx, enum ibv_wr_opcode op, uint32_t rkey,
		    uint64_t remote_addr, __be32 imm)
{
	struct sr_send_wr *w = new_wr(qpx, op);

	if (!w)
		return;
	w->rkey = rkey;
	w->remote_addr = remote_addr;
	w->imm_data = imm;
}

static void wr_rdma_write(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t remote_addr)
{
	wr_rdma(qpx, IBV_WR_RDMA_WRITE, rkey, remote_addr, 0);
}

static void wr_rdma_write_imm(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t remote_addr,
			      __be32 imm)
{
	wr_rdma(qpx, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, remote_addr, imm);
}

static void wr_rdma_read(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t remote_addr)
{
	wr_rdma(qpx, IBV_WR_RDMA_READ, rkey, remote_addr, 0);
}

static void wr_atomic_cmp_swp(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t remote_addr,
			      uint64_t compare, uint64_t swap)
{
	struct sr_send_wr *w = new_wr(qpx, IBV_WR_ATOMIC_CMP_AND_SWP);

	if (!w)
		return;
	w->rkey = rkey;
	w->remote_addr = remote_addr;
	w->compare_add = compare;
	w->swap = swap;
}

static void wr_atomic_fetch_add(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t remote_addr,
				uint64_t add)
{
	struct sr_send_wr *w = new_wr(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD);

	if (!w)
		return;
	w->rkey = rkey;
	w->remote_addr = remote_addr;
	w->compare_add = add;
}

static void wr_send(struct ibv_qp_ex *qpx)
{
	new_wr(qpx, IBV_WR_SEND);
}

static void wr_send_imm(struct ibv_qp_ex *qpx, __be32 imm)
{
	struct sr_send_wr *w = new_wr(qpx, IBV_WR_SEND_WITH_IMM);

	if (w)
		w->imm_data = imm;
}

static void wr_send_inv(struct ibv_qp_ex *qpx, uint32_t rkey)
{
	struct sr_send_wr *w = new_wr(qpx, IBV_WR_SEND_WITH_INV);

	if (w)
		w->invalidate_rkey = rkey;
}

static void wr_local_inv(struct ibv_qp_ex *qpx, uint32_t rkey)
{
	struct sr_send_wr *w = new_wr(qpx, IBV_WR_LOCAL_INV);

	if (w)
		w->invalidate_rkey = rkey;
}

/* wr_bind_mw builds a BIND_MW, its struct sr_bind_mw right after it. As
 * in rdma-core, the window's rkey field is not changed: for a type 2 window
 * the program keeps the rkey it chose. */
static void wr_bind_mw(struct ibv_qp_ex *qpx, struct ibv_mw *mw, uint32_t rkey,
		       const struct ibv_mw_bind_info *info)
{
	struct srl_qp *q = lqp(qpx);
	struct sr_bind_mw b;

	if (!new_wr(qpx, IBV_WR_BIND_MW) || reserve(q, sizeof(b)))
		return;
	sr_bind_to_wire(&b, mw, rkey, info);
	memcpy(q->wr + q->wrlen, &b, sizeof(b));
	q->wrlen += sizeof(b);
}

static void wr_set_ud_addr(struct ibv_qp_ex *qpx, struct ibv_ah *ah, uint32_t remote_qpn,
			   uint32_t remote_qkey)
{
	struct sr_send_wr *w = last_wr(lqp(qpx));

	if (!w)
		return;
	w->ah = ah ? ah->handle : SR_NONE;
	w->remote_qpn = remote_qpn;
	w->remote_qkey = remote_qkey;
}

/* clear_data drops the last WR's data: a setter replaces what an earlier
 * setter gave, as in rdma-core. */
static struct sr_send_wr *clear_data(struct srl_qp *q)
{
	struct sr_send_wr *w = last_wr(q);

	if (!w || q->wrerr)
		return NULL;
	/* A bind has no data to set. */
	if (w->opcode == IBV_WR_BIND_MW) {
		q->wrerr = EINVAL;
		return NULL;
	}
	q->wrlen = q->last + sizeof(*w);
	w->num_sge = 0;
	w->inline_len = 0;
	return w;
}

static void wr_set_sge_list(struct ibv_qp_ex *qpx, size_t num_sge, const struct ibv_sge *sg)
{
	struct srl_qp *q = lqp(qpx);
	struct sr_send_wr *w = clear_data(q);
	size_t i;

	if (!w)
		return;
	/* Checked before the multiplication, which could wrap. */
	if (num_sge > q->max_send_sge || num_sge > SR_MAX_BODY / sizeof(struct sr_sge)) {
		q->wrerr = EINVAL;
		return;
	}
	if (reserve(q, num_sge * sizeof(struct sr_sge)))
		return;
	w = (struct sr_send_wr *)(q->wr + q->last);
	w->send_flags &= ~IBV_SEND_INLINE;
	for (i = 0; i < num_sge; i++) {
		struct sr_sge s = { sg[i].addr, sg[i].length, sg[i].lkey };

		memcpy(q->wr + q->wrlen, &s, sizeof(s));
		q->wrlen += sizeof(s);
	}
	w->num_sge = num_sge;
}

static void wr_set_sge(struct ibv_qp_ex *qpx, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct ibv_sge s = { addr, length, lkey };

	wr_set_sge_list(qpx, 1, &s);
}

static void wr_set_inline_data_list(struct ibv_qp_ex *qpx, size_t num_buf,
				    const struct ibv_data_buf *bufs)
{
	struct srl_qp *q = lqp(qpx);
	struct sr_send_wr *w = clear_data(q);
	size_t i, total = 0;

	if (!w)
		return;
	for (i = 0; i < num_buf; i++) {
		if (bufs[i].length > SIZE_MAX - total) {
			q->wrerr = EINVAL; /* the sum would wrap */
			return;
		}
		total += bufs[i].length;
	}
	if (total > q->max_inline) {
		q->wrerr = ENOSPC;
		return;
	}
	if (reserve(q, total))
		return;
	w = (struct sr_send_wr *)(q->wr + q->last);
	w->send_flags |= IBV_SEND_INLINE;
	for (i = 0; i < num_buf; i++) {
		memcpy(q->wr + q->wrlen, bufs[i].addr, bufs[i].length);
		q->wrlen += bufs[i].length;
	}
	w->inline_len = total;
}

static void wr_set_inline_data(struct ibv_qp_ex *qpx, void *addr, size_t length)
{
	struct ibv_data_buf b = { addr, length };

	wr_set_inline_data_list(qpx, 1, &b);
}

static int wr_complete(struct ibv_qp_ex *qpx)
{
	struct srl_qp *q = lqp(qpx);
	struct sr_post *hdr;
	uint32_t bad;
	int err = q->wrerr;

	if (!err && q->nwr) {
		hdr = (struct sr_post *)q->wr;
		hdr->handle = qpx->qp_base.handle;
		hdr->nwr = q->nwr;
		err = sr_post_call(qpx->qp_base.context, SR_OP_POST_SEND, q->wr, q->wrlen, &bad);
	}
	reset(q);
	return err;
}

static void wr_abort(struct ibv_qp_ex *qpx)
{
	reset(lqp(qpx));
}

void sr_qp_ex_init(struct srl_qp *q)
{
	struct ibv_qp_ex *x = &q->qpx;

	x->comp_mask = 0;
	x->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
	x->wr_atomic_fetch_add = wr_atomic_fetch_add;
	x->wr_bind_mw = wr_bind_mw;
	x->wr_local_inv = wr_local_inv;
	x->wr_rdma_read = wr_rdma_read;
	x->wr_rdma_write = wr_rdma_write;
	x->wr_rdma_write_imm = wr_rdma_write_imm;
	x->wr_send = wr_send;
	x->wr_send_imm = wr_send_imm;
	x->wr_send_inv = wr_send_inv;
	x->wr_set_ud_addr = wr_set_ud_addr;
	x->wr_set_inline_data = wr_set_inline_data;
	x->wr_set_inline_data_list = wr_set_inline_data_list;
	x->wr_set_sge = wr_set_sge;
	x->wr_set_sge_list = wr_set_sge_list;
	x->wr_start = wr_start;
	x->wr_complete = wr_complete;
	x->wr_abort = wr_abort;
	reset(q);
}
