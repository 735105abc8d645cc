/* qp.c: queue pairs: create, modify, query, destroy, and posting work
 * requests: through the QP's rings (wq.c) when they can, else serialized as
 * proto.h lays them out, one call per list. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "context.h"

static void cap_to_wire(struct sr_qp_cap *w, const struct ibv_qp_cap *c)
{
	w->max_send_wr = c->max_send_wr;
	w->max_recv_wr = c->max_recv_wr;
	w->max_send_sge = c->max_send_sge;
	w->max_recv_sge = c->max_recv_sge;
	w->max_inline_data = c->max_inline_data;
}

static void cap_from_wire(struct ibv_qp_cap *c, const struct sr_qp_cap *w)
{
	c->max_send_wr = w->max_send_wr;
	c->max_recv_wr = w->max_recv_wr;
	c->max_send_sge = w->max_send_sge;
	c->max_recv_sge = w->max_recv_sge;
	c->max_inline_data = w->max_inline_data;
}

/* The send operations ibv_wr_* can build (qp_ex.c). */
#define SUPPORTED_SEND_OPS (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | \
			    IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | \
			    IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | \
			    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV | \
			    IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_BIND_MW)

struct ibv_qp *sr_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr)
{
	struct sr_create_qp req;
	struct ibv_qp *qp;
	struct srl_qp *q;
	struct sr_qp resp;
	int err, fd = -1;

	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) ||
	    attr->comp_mask & ~(uint32_t)(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
					  IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) ||
	    ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags) ||
	    ((attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) &&
	     attr->send_ops_flags & ~(uint64_t)SUPPORTED_SEND_OPS)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	/* softroce's engine has RC, UC and UD QPs only; RAW_PACKET, XRC and
	 * driver QPs are EOPNOTSUPP, as from a provider without them (and
	 * pyverbs skips), rather than the daemon's EINVAL for a type it does
	 * not know. */
	if (attr->qp_type != IBV_QPT_RC && attr->qp_type != IBV_QPT_UC &&
	    attr->qp_type != IBV_QPT_UD) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!attr->pd || attr->pd->context != ctx) {
		errno = EINVAL;
		return NULL;
	}
	q = calloc(1, sizeof(*q));
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	memset(&req, 0, sizeof(req));
	req.pd = attr->pd->handle;
	req.send_cq = attr->send_cq ? attr->send_cq->handle : SR_NONE;
	req.recv_cq = attr->recv_cq ? attr->recv_cq->handle : SR_NONE;
	req.srq = attr->srq ? attr->srq->handle : SR_NONE;
	req.qp_type = attr->qp_type;
	req.sq_sig_all = !!attr->sq_sig_all;
	cap_to_wire(&req.cap, &attr->cap);
	err = sr_ctx_callx(ctx, SR_OP_CREATE_QP, &req, sizeof(req), NULL, 0,
			   &resp, sizeof(resp), NULL, &fd);
	if (!err)
		err = sr_obj_add(ctx, SR_ELEM_QP, resp.handle, q);
	if (err) {
		if (fd >= 0)
			close(fd);
		free(q);
		errno = err;
		return NULL;
	}
	cap_from_wire(&attr->cap, &resp.cap);
	q->max_inline = resp.cap.max_inline_data;
	q->max_send_sge = resp.cap.max_send_sge;
	q->max_send_wr = resp.cap.max_send_wr;
	q->max_recv_wr = resp.cap.max_recv_wr;
	q->max_recv_sge = resp.cap.max_recv_sge;
	if (to_sr(ctx)->doorbell >= 0)
		sr_wq_map(q, fd, attr->srq != NULL);
	else if (fd >= 0)
		close(fd);
	qp = &q->qpx.qp_base;
	qp->context = ctx;
	qp->qp_context = attr->qp_context;
	qp->pd = attr->pd;
	qp->send_cq = attr->send_cq;
	qp->recv_cq = attr->recv_cq;
	qp->srq = attr->srq;
	qp->handle = resp.handle;
	qp->qp_num = resp.qp_num;
	qp->state = IBV_QPS_RESET;
	qp->qp_type = attr->qp_type;
	pthread_mutex_init(&qp->mutex, NULL);
	pthread_cond_init(&qp->cond, NULL);
	sr_qp_ex_init(q);
	return qp;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct ibv_qp_init_attr_ex ex;
	struct ibv_qp *qp;

	memset(&ex, 0, sizeof(ex));
	memcpy(&ex, attr, sizeof(*attr));
	ex.comp_mask = IBV_QP_INIT_ATTR_PD;
	ex.pd = pd;
	qp = sr_create_qp_ex(pd->context, &ex);
	if (qp)
		attr->cap = ex.cap;
	return qp;
}

/* Every QP is created with its ibv_qp_ex (the wr_* callbacks work on any). */
struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	return &to_lqp(qp)->qpx;
}

static void attr_to_wire(struct sr_qp_attr *w, const struct ibv_qp_attr *a)
{
	memset(w, 0, sizeof(*w));
	w->qp_state = a->qp_state;
	w->cur_qp_state = a->cur_qp_state;
	w->path_mtu = a->path_mtu;
	w->path_mig_state = a->path_mig_state;
	w->qkey = a->qkey;
	w->rq_psn = a->rq_psn;
	w->sq_psn = a->sq_psn;
	w->dest_qp_num = a->dest_qp_num;
	w->qp_access_flags = a->qp_access_flags;
	cap_to_wire(&w->cap, &a->cap);
	sr_ah_to_wire(&w->ah_attr, &a->ah_attr);
	w->pkey_index = a->pkey_index;
	w->en_sqd_async_notify = a->en_sqd_async_notify;
	w->sq_draining = a->sq_draining;
	w->max_rd_atomic = a->max_rd_atomic;
	w->max_dest_rd_atomic = a->max_dest_rd_atomic;
	w->min_rnr_timer = a->min_rnr_timer;
	w->port_num = a->port_num;
	w->timeout = a->timeout;
	w->retry_cnt = a->retry_cnt;
	w->rnr_retry = a->rnr_retry;
}

static void attr_from_wire(struct ibv_qp_attr *a, const struct sr_qp_attr *w)
{
	memset(a, 0, sizeof(*a));
	a->qp_state = w->qp_state;
	a->cur_qp_state = w->cur_qp_state;
	a->path_mtu = w->path_mtu;
	a->path_mig_state = w->path_mig_state;
	a->qkey = w->qkey;
	a->rq_psn = w->rq_psn;
	a->sq_psn = w->sq_psn;
	a->dest_qp_num = w->dest_qp_num;
	a->qp_access_flags = w->qp_access_flags;
	cap_from_wire(&a->cap, &w->cap);
	sr_ah_from_wire(&a->ah_attr, &w->ah_attr);
	a->pkey_index = w->pkey_index;
	a->en_sqd_async_notify = w->en_sqd_async_notify;
	a->sq_draining = w->sq_draining;
	a->max_rd_atomic = w->max_rd_atomic;
	a->max_dest_rd_atomic = w->max_dest_rd_atomic;
	a->min_rnr_timer = w->min_rnr_timer;
	a->port_num = w->port_num;
	a->timeout = w->timeout;
	a->retry_cnt = w->retry_cnt;
	a->rnr_retry = w->rnr_retry;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	struct sr_modify_qp req = { .handle = qp->handle, .mask = attr_mask };
	int err;

	attr_to_wire(&req.attr, attr);
	err = sr_ctx_call(qp->context, SR_OP_MODIFY_QP, &req, sizeof(req), NULL, 0);
	if (err)
		return errno = err, err;
	if (attr_mask & IBV_QP_STATE)
		qp->state = attr->qp_state;
	if (attr_mask & IBV_QP_MAX_QP_RD_ATOMIC)
		to_lqp(qp)->max_rd_atomic = attr->max_rd_atomic;
	/* A QP in RESET has no completions left (sr_cq_clean). */
	if ((attr_mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RESET) {
		if (qp->send_cq)
			err = sr_cq_clean(qp->send_cq, qp->qp_num);
		if (!err && qp->recv_cq && qp->recv_cq != qp->send_cq)
			err = sr_cq_clean(qp->recv_cq, qp->qp_num);
		if (err)
			return errno = err, err;
	}
	return 0;
}

int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
		 struct ibv_qp_init_attr *init_attr)
{
	struct sr_handle h = { qp->handle };
	struct sr_query_qp_resp resp;
	int err;

	err = sr_ctx_call(qp->context, SR_OP_QUERY_QP, &h, sizeof(h), &resp, sizeof(resp));
	if (err)
		return errno = err, err;
	attr_from_wire(attr, &resp.attr);
	memset(init_attr, 0, sizeof(*init_attr));
	init_attr->qp_context = qp->qp_context;
	init_attr->send_cq = qp->send_cq;
	init_attr->recv_cq = qp->recv_cq;
	init_attr->srq = qp->srq;
	init_attr->qp_type = qp->qp_type;
	init_attr->sq_sig_all = resp.init.sq_sig_all;
	cap_from_wire(&init_attr->cap, &resp.init.cap);
	if (attr_mask & IBV_QP_STATE)
		qp->state = attr->qp_state;
	to_lqp(qp)->max_rd_atomic = attr->max_rd_atomic;
	return 0;
}

/* ibv_destroy_qp waits, as rdma-core does, until every async event the
 * daemon delivered for the QP has been acknowledged. */
int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct srl_qp *q = to_lqp(qp);
	struct sr_handle h = { qp->handle };
	struct sr_destroy_qp_resp resp;
	int err;

	err = sr_ctx_call(qp->context, SR_OP_DESTROY_QP, &h, sizeof(h), &resp, sizeof(resp));
	if (err && !sr_ctx_gone(qp->context, err))
		return errno = err, err;
	/* A dead daemon reports no count: nothing more will come. */
	if (!err)
		sr_wait_events(&qp->mutex, &qp->cond, &qp->events_completed,
			       resp.events_reported);
	sr_obj_del(qp->context, SR_ELEM_QP, qp->handle);
	/* The QP's completions already in its CQs stay there to be polled, as
	 * with rxe (whose destroy_qp leaves the CQ alone; mlx4 and mlx5 clean
	 * them): libfabric's verbs provider destroys a connection's QP first
	 * and then polls the CQ for what it had not read yet, so a send or
	 * receive that completed just before a peer's disconnect would
	 * otherwise be reported flushed, or be lost. None comes after this
	 * returns: the daemon wrote the flushes of the WRs still in the rings
	 * before it answered. */
	sr_wq_unmap(q);
	free(q->wr);
	free(q);
	return 0;
}

/* The data path. One post is one call carrying the whole list; a list too
 * long for one body goes in several calls. */

/* A bind carries its struct sr_bind_mw and no data: its sg_list and
 * IBV_SEND_INLINE are ignored, as by rxe. */
static size_t send_wr_size(const struct ibv_send_wr *wr)
{
	size_t n = sizeof(struct sr_send_wr);
	int i;

	if (wr->opcode == IBV_WR_BIND_MW)
		return n + sizeof(struct sr_bind_mw);
	if (wr->num_sge < 0)
		return n;
	if (!(wr->send_flags & IBV_SEND_INLINE))
		return n + wr->num_sge * sizeof(struct sr_sge);
	for (i = 0; i < wr->num_sge; i++)
		n += wr->sg_list[i].length;
	return n;
}

/* fill_send_wr fills the fixed part of a send WR. */
static void fill_send_wr(struct sr_send_wr *w, const struct ibv_send_wr *wr, enum ibv_qp_type t)
{
	memset(w, 0, sizeof(*w));
	w->wr_id = wr->wr_id;
	w->opcode = wr->opcode;
	w->send_flags = wr->send_flags;
	w->ah = SR_NONE;
	switch (wr->opcode) {
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_SEND_WITH_IMM:
		w->imm_data = wr->imm_data;
		break;
	case IBV_WR_SEND_WITH_INV:
	case IBV_WR_LOCAL_INV:
		w->invalidate_rkey = wr->invalidate_rkey;
		break;
	default:
		break;
	}
	switch (wr->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_RDMA_READ:
		w->remote_addr = wr->wr.rdma.remote_addr;
		w->rkey = wr->wr.rdma.rkey;
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		w->remote_addr = wr->wr.atomic.remote_addr;
		w->rkey = wr->wr.atomic.rkey;
		w->compare_add = wr->wr.atomic.compare_add;
		w->swap = wr->wr.atomic.swap;
		break;
	default:
		break;
	}
	if (t == IBV_QPT_UD) {
		w->ah = wr->wr.ud.ah ? wr->wr.ud.ah->handle : SR_NONE;
		w->remote_qpn = wr->wr.ud.remote_qpn;
		w->remote_qkey = wr->wr.ud.remote_qkey;
	}
}

size_t sr_send_wr_to_wire(void *dst, const struct ibv_send_wr *w, enum ibv_qp_type t)
{
	struct sr_send_wr sw;
	char *p = (char *)dst + sizeof(sw);
	int i;

	fill_send_wr(&sw, w, t);
	if (w->opcode == IBV_WR_BIND_MW) {
		struct sr_bind_mw b;

		sr_bind_to_wire(&b, w->bind_mw.mw, w->bind_mw.rkey, &w->bind_mw.bind_info);
		memcpy(p, &b, sizeof(b));
		p += sizeof(b);
	} else if (w->send_flags & IBV_SEND_INLINE) {
		for (i = 0; i < w->num_sge; i++) {
			memcpy(p, (void *)(uintptr_t)w->sg_list[i].addr, w->sg_list[i].length);
			p += w->sg_list[i].length;
			sw.inline_len += w->sg_list[i].length;
		}
	} else {
		sw.num_sge = w->num_sge;
		for (i = 0; i < w->num_sge; i++) {
			struct sr_sge s = {
				w->sg_list[i].addr, w->sg_list[i].length, w->sg_list[i].lkey,
			};

			memcpy(p, &s, sizeof(s));
			p += sizeof(s);
		}
	}
	memcpy(dst, &sw, sizeof(sw));
	return p - (char *)dst;
}

size_t sr_recv_wr_to_wire(void *dst, const struct ibv_recv_wr *w)
{
	struct sr_recv_wr rw = { w->wr_id, w->num_sge, 0 };
	char *p = (char *)dst + sizeof(rw);
	int i;

	memcpy(dst, &rw, sizeof(rw));
	for (i = 0; i < w->num_sge; i++) {
		struct sr_sge s = { w->sg_list[i].addr, w->sg_list[i].length, w->sg_list[i].lkey };

		memcpy(p, &s, sizeof(s));
		p += sizeof(s);
	}
	return p - (char *)dst;
}

/* sr_bind_to_wire names the window by handle and by the rkey the program
 * holds, and the region by its lkey (none for a type 1 unbind). */
void sr_bind_to_wire(struct sr_bind_mw *b, struct ibv_mw *mw, uint32_t rkey,
		     const struct ibv_mw_bind_info *info)
{
	memset(b, 0, sizeof(*b));
	b->mw = mw ? mw->handle : SR_NONE;
	b->mw_rkey = mw ? mw->rkey : 0;
	b->rkey = rkey;
	b->mr_lkey = info->mr ? info->mr->lkey : 0;
	b->addr = info->addr;
	b->length = info->length;
	b->access = info->mw_access_flags;
}

/* sr_post_call sends one POST_* body (struct sr_post first) and returns 0,
 * or an errno value with *bad the index of the first WR not posted. */
int sr_post_call(struct ibv_context *ctx, uint32_t op, const void *body, size_t len,
		 uint32_t *bad)
{
	struct sr_post_resp resp = { 0 };
	uint32_t got;
	int err;

	err = sr_ctx_callx(ctx, op, body, len, NULL, 0, &resp, sizeof(resp), &got, NULL);
	*bad = got == sizeof(resp) ? resp.bad : 0;
	return err;
}

/* POST_STACK: a post body up to this size (a few WRs) is built on the
 * stack; only longer lists pay for a malloc. */
#define POST_STACK 2048

int sr_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
	struct srl_qp *q = to_lqp(qp);
	char stack[POST_STACK] __attribute__((aligned(8)));
	int err = 0, size_err;

	if (wr && !sr_wq_post_send(q, wr))
		return 0;
	while (wr) {
		struct ibv_send_wr *w, *stop;
		struct sr_post *hdr;
		size_t len = sizeof(*hdr);
		uint32_t nwr = 0, bad;
		char *buf, *p;

		size_err = 0;
		/* How much of the list fits in one body. */
		for (w = wr; w; w = w->next) {
			size_t n = send_wr_size(w);

			if (w->opcode != IBV_WR_BIND_MW &&
			    (w->num_sge < 0 || ((w->send_flags & IBV_SEND_INLINE) &&
						n - sizeof(struct sr_send_wr) > q->max_inline))) {
				size_err = EINVAL;
				break;
			}
			if (nwr && len + n > SR_MAX_BODY)
				break;
			if (len + n > SR_MAX_BODY) {
				size_err = EINVAL;
				break;
			}
			len += n;
			nwr++;
		}
		stop = w;
		if (nwr == 0) {
			err = size_err;
			goto fail_at;
		}
		buf = len <= sizeof(stack) ? stack : malloc(len);
		if (!buf) {
			err = ENOMEM;
			goto fail_at;
		}
		hdr = (struct sr_post *)buf;
		hdr->handle = qp->handle;
		hdr->nwr = nwr;
		p = buf + sizeof(*hdr);
		for (w = wr; w != stop; w = w->next)
			p += sr_send_wr_to_wire(p, w, qp->qp_type);
		err = sr_post_call(qp->context, SR_OP_POST_SEND, buf, len, &bad);
		if (buf != stack)
			free(buf);
		if (err) {
			for (; bad > 0 && wr->next; bad--)
				wr = wr->next;
			goto fail_at;
		}
		wr = stop;
		if (size_err) {
			err = size_err;
			goto fail_at;
		}
	}
	return 0;
fail_at:
	*bad_wr = wr;
	return err;
}

/* sr_post_recv_list serves POST_RECV and POST_SRQ_RECV. */
int sr_post_recv_list(struct ibv_context *ctx, uint32_t op, uint32_t handle,
		      struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	char stack[POST_STACK] __attribute__((aligned(8)));
	int err = 0, size_err;

	while (wr) {
		struct ibv_recv_wr *w, *stop;
		struct sr_post *hdr;
		size_t len = sizeof(*hdr);
		uint32_t nwr = 0, bad;
		char *buf, *p;

		size_err = 0;
		for (w = wr; w; w = w->next) {
			size_t n = sizeof(struct sr_recv_wr) + w->num_sge * sizeof(struct sr_sge);

			if (w->num_sge < 0 || n > SR_MAX_BODY - sizeof(*hdr)) {
				size_err = EINVAL;
				break;
			}
			if (len + n > SR_MAX_BODY)
				break;
			len += n;
			nwr++;
		}
		stop = w;
		if (nwr == 0) {
			err = size_err;
			goto fail_at;
		}
		buf = len <= sizeof(stack) ? stack : malloc(len);
		if (!buf) {
			err = ENOMEM;
			goto fail_at;
		}
		hdr = (struct sr_post *)buf;
		hdr->handle = handle;
		hdr->nwr = nwr;
		p = buf + sizeof(*hdr);
		for (w = wr; w != stop; w = w->next)
			p += sr_recv_wr_to_wire(p, w);
		err = sr_post_call(ctx, op, buf, len, &bad);
		if (buf != stack)
			free(buf);
		if (err) {
			for (; bad > 0 && wr->next; bad--)
				wr = wr->next;
			goto fail_at;
		}
		wr = stop;
		if (size_err) {
			err = size_err;
			goto fail_at;
		}
	}
	return 0;
fail_at:
	*bad_wr = wr;
	return err;
}

int sr_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	if (wr && !sr_wq_post_recv(to_lqp(qp), wr))
		return 0;
	return sr_post_recv_list(qp->context, SR_OP_POST_RECV, qp->handle, wr, bad_wr);
}
