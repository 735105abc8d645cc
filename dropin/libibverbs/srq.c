/* srq.c: shared receive queues, posted to through a ring shared with the
 * daemon when they can (wq.c). */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "context.h"

struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct sr_create_srq req = {
		pd->handle, attr->attr.max_wr, attr->attr.max_sge, attr->attr.srq_limit,
	};
	struct ibv_srq *srq;
	struct srl_srq *s;
	struct sr_srq resp;
	int err, fd = -1;

	s = calloc(1, sizeof(*s));
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	srq = &s->srq;
	err = sr_ctx_callx(pd->context, SR_OP_CREATE_SRQ, &req, sizeof(req), NULL, 0,
			   &resp, sizeof(resp), NULL, &fd);
	if (!err)
		err = sr_obj_add(pd->context, SR_ELEM_SRQ, resp.handle, srq);
	if (err) {
		if (fd >= 0)
			close(fd);
		free(s);
		errno = err;
		return NULL;
	}
	attr->attr.max_wr = resp.max_wr;
	attr->attr.max_sge = resp.max_sge;
	s->max_wr = resp.max_wr;
	s->max_sge = resp.max_sge;
	sr_srq_map(s, fd);
	srq->context = pd->context;
	srq->srq_context = attr->srq_context;
	srq->pd = pd;
	srq->handle = resp.handle;
	pthread_mutex_init(&srq->mutex, NULL);
	pthread_cond_init(&srq->cond, NULL);
	return srq;
}

int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	struct sr_modify_srq req = { srq->handle, mask, attr->max_wr, attr->srq_limit };
	int err = sr_ctx_call(srq->context, SR_OP_MODIFY_SRQ, &req, sizeof(req), NULL, 0);

	if (err)
		return errno = err, err;
	return 0;
}

int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	struct sr_handle h = { srq->handle };
	struct sr_srq resp;
	int err = sr_ctx_call(srq->context, SR_OP_QUERY_SRQ, &h, sizeof(h), &resp, sizeof(resp));

	if (err)
		return errno = err, err;
	attr->max_wr = resp.max_wr;
	attr->max_sge = resp.max_sge;
	attr->srq_limit = resp.srq_limit;
	return 0;
}

/* ibv_destroy_srq waits until every async event delivered for the SRQ has
 * been acknowledged, as rdma-core does. */
int ibv_destroy_srq(struct ibv_srq *srq)
{
	struct sr_handle h = { srq->handle };
	struct sr_destroy_srq_resp resp;
	int err;

	err = sr_ctx_call(srq->context, SR_OP_DESTROY_SRQ, &h, sizeof(h), &resp, sizeof(resp));
	if (err && !sr_ctx_gone(srq->context, err))
		return errno = err, err;
	/* A dead daemon reports no count: nothing more will come. */
	if (!err)
		sr_wait_events(&srq->mutex, &srq->cond, &srq->events_completed,
			       resp.events_reported);
	sr_obj_del(srq->context, SR_ELEM_SRQ, srq->handle);
	sr_srq_unmap((struct srl_srq *)srq);
	free(srq);
	return 0;
}

int sr_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	if (wr && !sr_wq_post_srq_recv((struct srl_srq *)srq, wr))
		return 0;
	return sr_post_recv_list(srq->context, SR_OP_POST_SRQ_RECV, srq->handle, wr, bad_wr);
}
