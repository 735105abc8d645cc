/* events.c: rdma_get_cm_event and friends. A channel's fd is the daemon's
 * eventfd (semaphore mode): one count per queued event, so it is readable
 * exactly while events wait, and O_NONBLOCK works as programs expect. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cma.h"

static const char *const event_names[] = {
	"RDMA_CM_EVENT_ADDR_RESOLVED",	 "RDMA_CM_EVENT_ADDR_ERROR",	   "RDMA_CM_EVENT_ROUTE_RESOLVED",
	"RDMA_CM_EVENT_ROUTE_ERROR",	 "RDMA_CM_EVENT_CONNECT_REQUEST",  "RDMA_CM_EVENT_CONNECT_RESPONSE",
	"RDMA_CM_EVENT_CONNECT_ERROR",	 "RDMA_CM_EVENT_UNREACHABLE",	   "RDMA_CM_EVENT_REJECTED",
	"RDMA_CM_EVENT_ESTABLISHED",	 "RDMA_CM_EVENT_DISCONNECTED",	   "RDMA_CM_EVENT_DEVICE_REMOVAL",
	"RDMA_CM_EVENT_MULTICAST_JOIN",	 "RDMA_CM_EVENT_MULTICAST_ERROR", "RDMA_CM_EVENT_ADDR_CHANGE",
	"RDMA_CM_EVENT_TIMEWAIT_EXIT",
};

const char *rdma_event_str(enum rdma_cm_event_type event)
{
	if ((unsigned)event < sizeof(event_names) / sizeof(event_names[0]))
		return event_names[event];
	return "UNKNOWN EVENT";
}

/* wait_event takes one count from the channel's eventfd (blocking unless
 * the program made the fd non-blocking) and fetches the event. */
static int fetch(struct cma_channel *ch, struct sr_cm_event *ev)
{
	struct sr_handle h = { ch->handle };
	uint64_t one;
	ssize_t n;
	int err;

	for (;;) {
		n = read(ch->ch.fd, &one, sizeof(one));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno;
		}
		err = cma_call(SR_OP_CM_GET_EVENT, &h, sizeof(h), ev, sizeof(*ev), NULL);
		if (err != EAGAIN)
			return err;
		/* The event was consumed in the daemon (a refused request):
		 * wait for the next. */
	}
}

/* process turns the daemon's event into the program's, doing what
 * librdmacm does on the way: the child id of a request, the route after a
 * resolution, and on the active side the QP's RTR and RTS and the RTU
 * before reporting ESTABLISHED. */
static int process(struct cma_event *e, struct sr_cm_event *w, struct rdma_event_channel *channel)
{
	struct rdma_cm_event *ev = &e->event;
	struct cma_id *c;
	int err;

	ev->event = w->event;
	ev->status = w->status;
	if (w->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
		struct cma_id *l = cma_find(w->listen_id);
		if (!l)
			return EAGAIN;
		c = cma_new_id(l->id.channel, l->id.context, l->id.ps,
			       w->ud.qp_num || l->id.qp_type == IBV_QPT_UD ? l->id.qp_type : IBV_QPT_RC, w->id);
		if (!c)
			return ENOMEM;
		cma_apply_route(c, &w->route);
		if (!c->id.verbs) {
			/* No device: refuse, as librdmacm when the route fails. */
			rdma_reject(&c->id, NULL, 0);
			return EAGAIN;
		}
		c->resp_res = w->conn.responder_resources;
		c->init_depth = w->conn.initiator_depth;
		if (l->sync) {
			/* A sync listener's children are sync: their calls wait on
			 * a channel of their own (librdmacm's ucma_process_conn_req). */
			struct rdma_event_channel *pc = cma_private_channel();
			struct sr_cm_migrate m = { .id = c->handle };
			if (pc) {
				m.channel = ((struct cma_channel *)pc)->handle;
				if (cma_call(SR_OP_CM_MIGRATE, &m, sizeof(m), NULL, 0, NULL) == 0) {
					c->id.channel = pc;
					c->sync = 1;
				} else {
					rdma_destroy_event_channel(pc);
				}
			}
		}
		e->listen = l;
		ev->listen_id = &l->id;
	} else {
		c = cma_find(w->id);
		if (!c)
			return EAGAIN;
	}
	e->id = c;
	ev->id = &c->id;
	memcpy(e->private_data, w->conn.private_data, w->conn.private_data_len);
	if (c->id.qp_type == IBV_QPT_UD) {
		ev->param.ud.private_data = w->conn.private_data_len ? e->private_data : NULL;
		ev->param.ud.private_data_len = w->conn.private_data_len;
		cma_ah_from_wire(&ev->param.ud.ah_attr, &w->ud.ah_attr);
		ev->param.ud.qp_num = w->ud.qp_num;
		ev->param.ud.qkey = w->ud.qkey;
	} else {
		struct rdma_conn_param *p = &ev->param.conn;
		p->private_data = w->conn.private_data_len ? e->private_data : NULL;
		p->private_data_len = w->conn.private_data_len;
		p->responder_resources = w->conn.responder_resources;
		p->initiator_depth = w->conn.initiator_depth;
		p->flow_control = w->conn.flow_control;
		p->retry_count = w->conn.retry_count;
		p->rnr_retry_count = w->conn.rnr_retry_count;
		p->srq = w->conn.srq;
		p->qp_num = w->conn.qp_num;
	}
	switch (w->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		err = cma_query_route(c);
		if (err) {
			ev->event = w->event == RDMA_CM_EVENT_ADDR_RESOLVED ? RDMA_CM_EVENT_ADDR_ERROR
									    : RDMA_CM_EVENT_ROUTE_ERROR;
			ev->status = -err;
		}
		break;
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
		if (!c->id.qp)
			break; /* the program calls rdma_establish (UCX) */
		err = cma_modify_qp(c, IBV_QPS_RTR, 0);
		if (!err)
			err = cma_modify_qp(c, IBV_QPS_RTS, 0);
		if (!err) {
			struct sr_cm_conn req = { .id = c->handle };
			err = cma_call(SR_OP_CM_ACCEPT, &req, sizeof(req), NULL, 0, NULL);
		}
		if (err) {
			rdma_reject(&c->id, NULL, 0);
			ev->event = RDMA_CM_EVENT_CONNECT_ERROR;
			ev->status = -err;
		} else {
			ev->event = RDMA_CM_EVENT_ESTABLISHED;
		}
		break;
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_UNREACHABLE:
		if (c->id.qp) {
			struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
			ibv_modify_qp(c->id.qp, &a, IBV_QP_STATE);
		}
		break;
	}
	return 0;
}

int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	struct cma_channel *ch = (struct cma_channel *)channel;
	struct sr_cm_event w;
	struct cma_event *e;
	int err;

	if (!channel || !event)
		return cma_err(EINVAL);
	for (;;) {
		err = fetch(ch, &w);
		if (err)
			return cma_err(err);
		e = calloc(1, sizeof(*e));
		if (!e)
			return cma_err(ENOMEM);
		err = process(e, &w, channel);
		if (err == EAGAIN) {
			free(e);
			continue;
		}
		if (err) {
			free(e);
			return cma_err(err);
		}
		break;
	}
	pthread_mutex_lock(&e->id->mut);
	e->id->events_delivered++;
	pthread_mutex_unlock(&e->id->mut);
	if (e->listen) {
		pthread_mutex_lock(&e->listen->mut);
		e->listen->events_delivered++;
		pthread_mutex_unlock(&e->listen->mut);
	}
	*event = &e->event;
	return 0;
}

static void acked(struct cma_id *c)
{
	pthread_mutex_lock(&c->mut);
	c->events_acked++;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->mut);
}

int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	struct cma_event *e = (struct cma_event *)event;

	if (!event)
		return cma_err(EINVAL);
	acked(e->id);
	if (e->listen)
		acked(e->listen);
	free(e);
	return 0;
}

/* cma_complete: a sync id's call waits for its event; a failure event
 * becomes the call's errno, as librdmacm's ucma_complete. */
int cma_complete(struct cma_id *c)
{
	struct rdma_cm_event *ev;
	int ret;

	if (!c->sync)
		return 0;
	if (c->id.event) {
		rdma_ack_cm_event(c->id.event);
		c->id.event = NULL;
	}
	ret = rdma_get_cm_event(c->id.channel, &c->id.event);
	if (ret)
		return ret;
	ev = c->id.event;
	if (ev->status) {
		errno = ev->event == RDMA_CM_EVENT_REJECTED ? ECONNREFUSED
			: ev->status < 0 ? -ev->status : ECONNREFUSED;
		return -1;
	}
	if (ev->event == RDMA_CM_EVENT_UNREACHABLE || ev->event == RDMA_CM_EVENT_CONNECT_ERROR ||
	    ev->event == RDMA_CM_EVENT_ADDR_ERROR || ev->event == RDMA_CM_EVENT_ROUTE_ERROR) {
		errno = ECONNREFUSED;
		return -1;
	}
	return 0;
}

int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	struct cma_id *l = (struct cma_id *)listen;
	struct rdma_cm_event *event;
	struct cma_id *c;
	int ret;

	if (!l->sync)
		return cma_err(EINVAL);
	if (listen->event) {
		rdma_ack_cm_event(listen->event);
		listen->event = NULL;
	}
	ret = rdma_get_cm_event(listen->channel, &event);
	if (ret)
		return ret;
	if (event->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
		rdma_ack_cm_event(event);
		return cma_err(EINVAL);
	}
	c = (struct cma_id *)event->id;
	ret = 0;
	if (l->qp_init_attr) {
		struct ibv_qp_init_attr attr = *l->qp_init_attr;
		ret = rdma_create_qp(&c->id, listen->pd, &attr);
	}
	if (ret) {
		int err = errno;
		rdma_ack_cm_event(event);
		rdma_reject(&c->id, NULL, 0);
		rdma_destroy_id(&c->id);
		return cma_err(err);
	}
	c->id.event = event;
	*id = &c->id;
	return 0;
}
