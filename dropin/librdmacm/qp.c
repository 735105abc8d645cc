/* qp.c: the QPs of rdma_cm ids: created on id->verbs, moved through INIT,
 * RTR and RTS with the attributes the daemon derives from the connection
 * (rdma_init_qp_attr), as librdmacm moves them with the kernel's. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cma.h"

void cma_ah_from_wire(struct ibv_ah_attr *a, const struct sr_ah_attr *w)
{
	memset(a, 0, sizeof(*a));
	memcpy(&a->grh.dgid, w->dgid, 16);
	a->grh.flow_label = w->flow_label;
	a->grh.sgid_index = w->sgid_index;
	a->grh.hop_limit = w->hop_limit;
	a->grh.traffic_class = w->traffic_class;
	a->is_global = w->is_global;
	a->dlid = w->dlid;
	a->sl = w->sl;
	a->src_path_bits = w->src_path_bits;
	a->static_rate = w->static_rate;
	a->port_num = w->port_num;
}

int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr, int *qp_attr_mask)
{
	struct cma_id *c = (struct cma_id *)id;
	struct sr_cm_init_qp_attr req = { c->handle, qp_attr->qp_state };
	struct sr_modify_qp out;
	const struct sr_qp_attr *w = &out.attr;
	int err = cma_call(SR_OP_CM_INIT_QP_ATTR, &req, sizeof(req), &out, sizeof(out), NULL);

	if (err)
		return cma_err(err);
	memset(qp_attr, 0, sizeof(*qp_attr));
	qp_attr->qp_state = w->qp_state;
	qp_attr->path_mtu = w->path_mtu;
	qp_attr->qkey = w->qkey;
	qp_attr->rq_psn = w->rq_psn;
	qp_attr->sq_psn = w->sq_psn;
	qp_attr->dest_qp_num = w->dest_qp_num;
	qp_attr->qp_access_flags = w->qp_access_flags;
	cma_ah_from_wire(&qp_attr->ah_attr, &w->ah_attr);
	qp_attr->pkey_index = w->pkey_index;
	qp_attr->max_rd_atomic = w->max_rd_atomic;
	qp_attr->max_dest_rd_atomic = w->max_dest_rd_atomic;
	qp_attr->min_rnr_timer = w->min_rnr_timer;
	qp_attr->port_num = w->port_num;
	qp_attr->timeout = w->timeout;
	qp_attr->retry_cnt = w->retry_cnt;
	qp_attr->rnr_retry = w->rnr_retry;
	*qp_attr_mask = out.mask;
	return 0;
}

/* cma_modify_qp moves id->qp to state with the connection's attributes.
 * override_rd applies the resources the program gave rdma_accept (as
 * librdmacm's ucma_modify_qp_rtr/rts). A connected QP still in RESET goes
 * through INIT first; RTR also refreshes INIT's access flags. */
int cma_modify_qp(struct cma_id *c, enum ibv_qp_state state, int override_rd)
{
	struct ibv_qp_attr a;
	int mask;

	if (state == IBV_QPS_RTR) {
		a.qp_state = IBV_QPS_INIT;
		if (rdma_init_qp_attr(&c->id, &a, &mask))
			return errno;
		if (ibv_modify_qp(c->id.qp, &a, mask))
			return errno;
	}
	a.qp_state = state;
	if (rdma_init_qp_attr(&c->id, &a, &mask))
		return errno;
	if (override_rd && state == IBV_QPS_RTR && c->resp_res != 0xff)
		a.max_dest_rd_atomic = c->resp_res;
	if (override_rd && state == IBV_QPS_RTS && c->init_depth != 0xff)
		a.max_rd_atomic = c->init_depth;
	if (ibv_modify_qp(c->id.qp, &a, mask))
		return errno;
	return 0;
}

int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	struct cma_id *c = (struct cma_id *)id;
	struct ibv_qp_init_attr init;
	struct ibv_pd *pd = attr->comp_mask & IBV_QP_INIT_ATTR_PD && attr->pd ? attr->pd : id->pd;
	struct ibv_qp *qp;
	int err;

	if (!id->verbs || !pd || pd->context != id->verbs)
		return cma_err(EINVAL);
	memset(&init, 0, sizeof(init));
	init.qp_context = attr->qp_context;
	init.send_cq = attr->send_cq;
	init.recv_cq = attr->recv_cq;
	init.srq = attr->srq ? attr->srq : id->srq;
	init.cap = attr->cap;
	init.qp_type = attr->qp_type ? attr->qp_type : id->qp_type;
	init.sq_sig_all = attr->sq_sig_all;
	if (!init.send_cq || !init.recv_cq) {
		/* librdmacm makes the CQs (and their channels) it is not given. */
		int cqe = init.cap.max_send_wr > init.cap.max_recv_wr ? init.cap.max_send_wr : init.cap.max_recv_wr;
		if (cqe < 1)
			cqe = 1;
		if (!init.send_cq) {
			id->send_cq_channel = ibv_create_comp_channel(id->verbs);
			id->send_cq = id->send_cq_channel ? ibv_create_cq(id->verbs, cqe, id, id->send_cq_channel, 0) : NULL;
			if (!id->send_cq)
				return -1;
			init.send_cq = id->send_cq;
		}
		if (!init.recv_cq) {
			id->recv_cq_channel = ibv_create_comp_channel(id->verbs);
			id->recv_cq = id->recv_cq_channel ? ibv_create_cq(id->verbs, cqe, id, id->recv_cq_channel, 0) : NULL;
			if (!id->recv_cq)
				return -1;
			init.recv_cq = id->recv_cq;
		}
		c->own_cqs = 1;
	} else {
		id->send_cq = init.send_cq;
		id->recv_cq = init.recv_cq;
	}
	qp = ibv_create_qp(pd, &init);
	if (!qp)
		return -1;
	attr->cap = init.cap;
	id->qp = qp;
	/* UD goes to RTS at once; a connected QP waits in INIT. */
	{
		struct ibv_qp_attr a;
		int mask;
		a.qp_state = IBV_QPS_INIT;
		err = rdma_init_qp_attr(id, &a, &mask) ? errno : ibv_modify_qp(qp, &a, mask) ? errno : 0;
		if (!err && init.qp_type == IBV_QPT_UD) {
			a.qp_state = IBV_QPS_RTR;
			err = rdma_init_qp_attr(id, &a, &mask) ? errno : ibv_modify_qp(qp, &a, mask) ? errno : 0;
			a.qp_state = IBV_QPS_RTS;
			if (!err)
				err = rdma_init_qp_attr(id, &a, &mask) ? errno : ibv_modify_qp(qp, &a, mask) ? errno : 0;
		}
	}
	if (err) {
		ibv_destroy_qp(qp);
		id->qp = NULL;
		return cma_err(err);
	}
	return 0;
}

int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	struct ibv_qp_init_attr_ex ex;
	int ret;

	memset(&ex, 0, sizeof(ex));
	memcpy(&ex, qp_init_attr, sizeof(*qp_init_attr));
	ex.comp_mask = IBV_QP_INIT_ATTR_PD;
	ex.pd = pd ? pd : id->pd;
	ret = rdma_create_qp_ex(id, &ex);
	if (!ret)
		qp_init_attr->cap = ex.cap;
	return ret;
}

void rdma_destroy_qp(struct rdma_cm_id *id)
{
	struct cma_id *c = (struct cma_id *)id;

	if (id->qp)
		ibv_destroy_qp(id->qp);
	id->qp = NULL;
	if (c->own_cqs) {
		if (id->send_cq)
			ibv_destroy_cq(id->send_cq);
		if (id->recv_cq && id->recv_cq != id->send_cq)
			ibv_destroy_cq(id->recv_cq);
		if (id->send_cq_channel)
			ibv_destroy_comp_channel(id->send_cq_channel);
		if (id->recv_cq_channel && id->recv_cq_channel != id->send_cq_channel)
			ibv_destroy_comp_channel(id->recv_cq_channel);
		id->send_cq = id->recv_cq = NULL;
		id->send_cq_channel = id->recv_cq_channel = NULL;
		c->own_cqs = 0;
	}
}

int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	struct ibv_srq_init_attr init;
	struct ibv_pd *pd = attr->comp_mask & IBV_SRQ_INIT_ATTR_PD && attr->pd ? attr->pd : id->pd;

	if (!pd)
		return cma_err(EINVAL);
	memset(&init, 0, sizeof(init));
	init.srq_context = attr->srq_context;
	init.attr = attr->attr;
	id->srq = ibv_create_srq(pd, &init);
	if (!id->srq)
		return -1;
	attr->attr = init.attr;
	return 0;
}

int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct ibv_srq_init_attr_ex ex;
	int ret;

	memset(&ex, 0, sizeof(ex));
	ex.srq_context = attr->srq_context;
	ex.attr = attr->attr;
	ex.comp_mask = IBV_SRQ_INIT_ATTR_PD;
	ex.pd = pd ? pd : id->pd;
	ret = rdma_create_srq_ex(id, &ex);
	if (!ret)
		attr->attr = ex.attr;
	return ret;
}

void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (id->srq)
		ibv_destroy_srq(id->srq);
	id->srq = NULL;
}
