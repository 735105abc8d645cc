/* pd.c: protection domains, and the memory windows allocated in them
 * (ibv_alloc_mw, ibv_bind_mw and ibv_dealloc_mw reach these through
 * ibv_context_ops; verbs.h checks a bind's type, range and PD first). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"

struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
	struct sr_handle h;
	struct ibv_pd *pd;
	int err;

	pd = calloc(1, sizeof(*pd));
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	err = sr_ctx_call(ctx, SR_OP_ALLOC_PD, NULL, 0, &h, sizeof(h));
	if (err) {
		free(pd);
		errno = err;
		return NULL;
	}
	pd->context = ctx;
	pd->handle = h.handle;
	return pd;
}

/* ibv_dealloc_pd fails (EBUSY from the daemon) while objects use the PD. */
int ibv_dealloc_pd(struct ibv_pd *pd)
{
	struct sr_handle h = { pd->handle };
	int err = sr_ctx_call(pd->context, SR_OP_DEALLOC_PD, &h, sizeof(h), NULL, 0);

	if (err && !sr_ctx_gone(pd->context, err))
		return errno = err, err;
	free(pd);
	return 0;
}

struct ibv_mw *sr_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct sr_alloc_mw req = { pd->handle, type };
	struct ibv_mw *mw;
	struct sr_mw resp;
	int err;

	mw = calloc(1, sizeof(*mw));
	if (!mw) {
		errno = ENOMEM;
		return NULL;
	}
	err = sr_ctx_call(pd->context, SR_OP_ALLOC_MW, &req, sizeof(req), &resp, sizeof(resp));
	if (err) {
		free(mw);
		errno = err;
		return NULL;
	}
	mw->context = pd->context;
	mw->pd = pd;
	mw->rkey = resp.rkey;
	mw->handle = resp.handle;
	mw->type = type;
	return mw;
}

/* sr_dealloc_mw destroys a window, bound or not: its rkey stops working. */
int sr_dealloc_mw(struct ibv_mw *mw)
{
	struct sr_handle h = { mw->handle };
	int err = sr_ctx_call(mw->context, SR_OP_DEALLOC_MW, &h, sizeof(h), NULL, 0);

	if (err && !sr_ctx_gone(mw->context, err))
		return errno = err, err;
	free(mw);
	return 0;
}

/* sr_bind_mw binds a type 1 window as rdma-core's rxe provider does: it
 * posts a BIND_MW work request with the window's next key and, once the
 * request is posted, gives the window that key. The bind runs in send
 * queue order; if it fails (IBV_WC_MW_BIND_ERR) the device keeps the old
 * key, and the caller should restore it. */
int sr_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mw_bind)
{
	struct ibv_send_wr wr, *bad;
	int err;

	/* A type 1 window's addresses are virtual addresses. */
	if (mw_bind->bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED)
		return errno = EINVAL, EINVAL;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = mw_bind->wr_id;
	wr.opcode = IBV_WR_BIND_MW;
	wr.send_flags = mw_bind->send_flags;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.bind_info = mw_bind->bind_info;
	err = sr_post_send(qp, &wr, &bad);
	if (err)
		return errno = err, err;
	mw->rkey = wr.bind_mw.rkey;
	return 0;
}
