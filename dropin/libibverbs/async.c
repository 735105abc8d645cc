/* async.c: asynchronous events. async_fd is the daemon's eventfd; the event
 * itself comes from GET_ASYNC_EVENT, naming the object by its handle. */
#include <errno.h>
#include <string.h>

#include "context.h"

int ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *event)
{
	struct sr_async_event e;
	void *obj;
	int err;

	for (;;) {
		if (sr_take_event(ctx->async_fd))
			return -1;
		err = sr_ctx_call(ctx, SR_OP_GET_ASYNC_EVENT, NULL, 0, &e, sizeof(e));
		if (err == EAGAIN)
			continue;
		if (err == EPIPE && !to_sr(ctx)->fatal_reported) {
			to_sr(ctx)->fatal_reported = 1;
			memset(event, 0, sizeof(*event));
			event->event_type = IBV_EVENT_DEVICE_FATAL;
			return 0;
		}
		if (err) {
			errno = err;
			return -1;
		}
		memset(event, 0, sizeof(*event));
		event->event_type = e.event_type;
		switch (e.kind) {
		case SR_ELEM_QP:
		case SR_ELEM_CQ:
		case SR_ELEM_SRQ:
			obj = sr_obj_find(ctx, e.kind, e.element);
			if (!obj)
				continue; /* destroyed meanwhile: nobody can ack it */
			if (e.kind == SR_ELEM_QP)
				event->element.qp = obj;
			else if (e.kind == SR_ELEM_CQ)
				event->element.cq = obj;
			else
				event->element.srq = obj;
			break;
		case SR_ELEM_PORT:
			event->element.port_num = e.element;
			break;
		default:
			break;
		}
		return 0;
	}
}

/* kind_of says which element an event type is about, as rdma-core's
 * ibv_ack_async_event decides. */
static int kind_of(enum ibv_event_type t)
{
	switch (t) {
	case IBV_EVENT_CQ_ERR:
		return SR_ELEM_CQ;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		return SR_ELEM_QP;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		return SR_ELEM_SRQ;
	default:
		return SR_ELEM_NONE;
	}
}

void ibv_ack_async_event(struct ibv_async_event *event)
{
	switch (kind_of(event->event_type)) {
	case SR_ELEM_CQ: {
		struct ibv_cq *cq = event->element.cq;

		pthread_mutex_lock(&cq->mutex);
		cq->async_events_completed++;
		pthread_cond_broadcast(&cq->cond);
		pthread_mutex_unlock(&cq->mutex);
		break;
	}
	case SR_ELEM_QP: {
		struct ibv_qp *qp = event->element.qp;

		pthread_mutex_lock(&qp->mutex);
		qp->events_completed++;
		pthread_cond_broadcast(&qp->cond);
		pthread_mutex_unlock(&qp->mutex);
		break;
	}
	case SR_ELEM_SRQ: {
		struct ibv_srq *srq = event->element.srq;

		pthread_mutex_lock(&srq->mutex);
		srq->events_completed++;
		pthread_cond_broadcast(&srq->cond);
		pthread_mutex_unlock(&srq->mutex);
		break;
	}
	default:
		break;
	}
}
