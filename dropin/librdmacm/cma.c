/* cma.c: librdmacm's ids, channels and calls over the softroce daemon
 * (proto.h, SR_OP_CM_*). The connection manager runs in the daemon, on the
 * device's QP 1; the QPs are the program's own (the drop-in libibverbs'),
 * moved through INIT, RTR and RTS here with the attributes the daemon
 * derives from the REQ and REP, as librdmacm does with the kernel's. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "cma.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_fd = -1;
static struct cma_device g_dev[16];
static int g_ndev;

/* ids by daemon handle, for events (a small open-addressed table would do;
 * programs hold few ids, a list is enough). */
struct id_link {
	struct cma_id *id;
	struct id_link *next;
};
static struct id_link *g_ids;

int cma_err(int err)
{
	if (!err)
		return 0;
	errno = err;
	return -1;
}

/* connect_daemon opens the connection the CM calls travel on and checks
 * that the daemon speaks this library's protocol. Called with g_lock. */
static int connect_daemon(void)
{
	struct sr_dev_entry *ents;
	int n, err;

	if (g_fd >= 0)
		return 0;
	g_fd = sr_connect();
	if (g_fd < 0)
		return errno ? errno : ENODEV;
	err = sr_call_list(g_fd, &ents, &n);
	if (err) {
		close(g_fd);
		g_fd = -1;
		return err;
	}
	free(ents);
	return 0;
}

/* cma_call makes one call on the CM connection. Calls are one at a time. */
int cma_call(uint32_t op, const void *body, uint32_t len, void *out, uint32_t outlen, int *fd_out)
{
	int err;

	pthread_mutex_lock(&g_lock);
	err = connect_daemon();
	if (!err)
		err = sr_call(g_fd, op, body, len, NULL, 0, out, outlen, NULL, fd_out);
	pthread_mutex_unlock(&g_lock);
	return err;
}

/* device_by_name opens (once) the drop-in libibverbs device of that name
 * and its shared PD. */
static struct cma_device *device_by_name(const char *name)
{
	struct ibv_device **list;
	struct cma_device *d = NULL;
	int i, n;

	pthread_mutex_lock(&g_lock);
	for (i = 0; i < g_ndev; i++)
		if (!strcmp(g_dev[i].name, name)) {
			d = &g_dev[i];
			goto out;
		}
	if (g_ndev == (int)(sizeof(g_dev) / sizeof(g_dev[0])))
		goto out;
	list = ibv_get_device_list(&n);
	if (!list)
		goto out;
	for (i = 0; i < n; i++) {
		if (strcmp(ibv_get_device_name(list[i]), name))
			continue;
		d = &g_dev[g_ndev];
		d->verbs = ibv_open_device(list[i]);
		if (d->verbs)
			d->pd = ibv_alloc_pd(d->verbs);
		if (!d->verbs || !d->pd) {
			if (d->verbs)
				ibv_close_device(d->verbs);
			memset(d, 0, sizeof(*d));
			d = NULL;
			break;
		}
		snprintf(d->name, sizeof(d->name), "%s", name);
		g_ndev++;
		break;
	}
	ibv_free_device_list(list);
out:
	pthread_mutex_unlock(&g_lock);
	return d;
}

struct ibv_context **rdma_get_devices(int *num_devices)
{
	struct ibv_device **list;
	struct ibv_context **out;
	int i, n = 0, k = 0;

	list = ibv_get_device_list(&n);
	out = calloc(n + 1, sizeof(*out));
	if (!out) {
		if (list)
			ibv_free_device_list(list);
		errno = ENOMEM;
		return NULL;
	}
	for (i = 0; i < n; i++) {
		struct cma_device *d = device_by_name(ibv_get_device_name(list[i]));
		if (d)
			out[k++] = d->verbs;
	}
	if (list)
		ibv_free_device_list(list);
	if (num_devices)
		*num_devices = k;
	return out;
}

void rdma_free_devices(struct ibv_context **list)
{
	free(list);
}

struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct cma_channel *c = calloc(1, sizeof(*c));
	struct sr_handle h;
	int fd = -1, err;

	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	err = cma_call(SR_OP_CM_CREATE_CHANNEL, NULL, 0, &h, sizeof(h), &fd);
	if (err || fd < 0) {
		free(c);
		if (fd >= 0)
			close(fd);
		errno = err ? err : EPROTO;
		if (getenv("SOFTROCE_DEBUG"))
			fprintf(stderr, "softroce librdmacm: no event channel: %s (is a softroce daemon running? "
				"start programs with `softroce run`)\n", strerror(errno));
		return NULL;
	}
	c->handle = h.handle;
	c->ch.fd = fd;
	return &c->ch;
}

void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	struct cma_channel *c = (struct cma_channel *)channel;
	struct sr_handle h = { c->handle };

	cma_call(SR_OP_CM_DESTROY_CHANNEL, &h, sizeof(h), NULL, 0, NULL);
	close(c->ch.fd);
	free(c);
}

struct rdma_event_channel *cma_private_channel(void)
{
	return rdma_create_event_channel();
}

struct cma_id *cma_find(uint32_t handle)
{
	struct id_link *l;
	struct cma_id *c = NULL;

	pthread_mutex_lock(&g_lock);
	for (l = g_ids; l; l = l->next)
		if (l->id->handle == handle) {
			c = l->id;
			break;
		}
	pthread_mutex_unlock(&g_lock);
	return c;
}

static void link_id(struct cma_id *c)
{
	struct id_link *l = malloc(sizeof(*l));

	if (!l)
		return;
	pthread_mutex_lock(&g_lock);
	l->id = c;
	l->next = g_ids;
	g_ids = l;
	pthread_mutex_unlock(&g_lock);
}

static void unlink_id(struct cma_id *c)
{
	struct id_link **p, *l;

	pthread_mutex_lock(&g_lock);
	for (p = &g_ids; *p; p = &(*p)->next)
		if ((*p)->id == c) {
			l = *p;
			*p = l->next;
			free(l);
			break;
		}
	pthread_mutex_unlock(&g_lock);
}

struct cma_id *cma_new_id(struct rdma_event_channel *ch, void *context, enum rdma_port_space ps,
			  enum ibv_qp_type qp_type, uint32_t handle)
{
	struct cma_id *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->id.channel = ch;
	c->id.context = context;
	c->id.ps = ps;
	c->id.qp_type = qp_type;
	c->handle = handle;
	c->resp_res = c->init_depth = 0xff;
	c->id.route.path_rec = &c->path;
	pthread_mutex_init(&c->mut, NULL);
	pthread_cond_init(&c->cond, NULL);
	link_id(c);
	return c;
}

int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
		   enum rdma_port_space ps)
{
	struct sr_cm_create_id req;
	enum ibv_qp_type qpt = ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC;
	struct sr_handle h;
	struct cma_id *c;
	int sync = 0, err;

	if (!channel) {
		channel = cma_private_channel();
		if (!channel)
			return -1;
		sync = 1;
	}
	req.channel = ((struct cma_channel *)channel)->handle;
	req.ps = ps;
	req.qp_type = qpt;
	err = cma_call(SR_OP_CM_CREATE_ID, &req, sizeof(req), &h, sizeof(h), NULL);
	if (!err) {
		c = cma_new_id(channel, context, ps, qpt, h.handle);
		if (!c)
			err = ENOMEM;
	}
	if (err) {
		if (sync)
			rdma_destroy_event_channel(channel);
		return cma_err(err);
	}
	c->sync = sync;
	*id = &c->id;
	return 0;
}

/* wait_acked waits until every event delivered for the id is acked, as
 * librdmacm's destroy and migrate do. */
static void wait_acked(struct cma_id *c)
{
	pthread_mutex_lock(&c->mut);
	while (c->events_acked < c->events_delivered)
		pthread_cond_wait(&c->cond, &c->mut);
	pthread_mutex_unlock(&c->mut);
}

int rdma_destroy_id(struct rdma_cm_id *id)
{
	struct cma_id *c = (struct cma_id *)id;
	struct sr_handle h = { c->handle };

	if (id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	wait_acked(c);
	cma_call(SR_OP_CM_DESTROY_ID, &h, sizeof(h), NULL, 0, NULL);
	unlink_id(c);
	if (c->sync)
		rdma_destroy_event_channel(id->channel);
	free(c->qp_init_attr);
	free(c);
	return 0;
}

/* sockaddr conversions between struct sockaddr and the wire. */
static void sa_to_wire(struct sr_cm_sockaddr *w, const struct sockaddr *sa)
{
	memset(w, 0, sizeof(*w));
	if (!sa)
		return;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)sa;
		w->family = AF_INET;
		w->port = ntohs(in->sin_port);
		memcpy(w->addr, &in->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)sa;
		w->family = AF_INET6;
		w->port = ntohs(in6->sin6_port);
		memcpy(w->addr, &in6->sin6_addr, 16);
		w->scope_id = in6->sin6_scope_id;
	} else {
		w->family = sa->sa_family;
	}
}

static void sa_from_wire(struct sockaddr_storage *ss, const struct sr_cm_sockaddr *w)
{
	memset(ss, 0, sizeof(*ss));
	if (w->family == AF_INET) {
		struct sockaddr_in *in = (void *)ss;
		in->sin_family = AF_INET;
		in->sin_port = htons(w->port);
		memcpy(&in->sin_addr, w->addr, 4);
	} else if (w->family == AF_INET6) {
		struct sockaddr_in6 *in6 = (void *)ss;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(w->port);
		memcpy(&in6->sin6_addr, w->addr, 16);
		in6->sin6_scope_id = w->scope_id;
	}
}

/* cma_apply_route fills id->route, port_num, and (once the id has a
 * device) id->verbs and id->pd, from the daemon's answer. */
void cma_apply_route(struct cma_id *c, const struct sr_cm_route *r)
{
	struct rdma_cm_id *id = &c->id;
	struct ibv_sa_path_rec *p = &c->path;
	char name[65];

	if (r->src.family)
		sa_from_wire(&id->route.addr.src_storage, &r->src);
	if (r->dst.family)
		sa_from_wire(&id->route.addr.dst_storage, &r->dst);
	memcpy(name, r->dev_name, 64);
	name[64] = 0;
	if (name[0] && !id->verbs) {
		struct cma_device *d = device_by_name(name);
		if (d) {
			id->verbs = d->verbs;
			if (!id->pd)
				id->pd = d->pd;
		}
	}
	id->port_num = r->port_num;
	memcpy(&id->route.addr.addr.ibaddr.sgid, r->path.sgid, 16);
	memcpy(&id->route.addr.addr.ibaddr.dgid, r->path.dgid, 16);
	id->route.addr.addr.ibaddr.pkey = htons(r->path.pkey);
	memset(p, 0, sizeof(*p));
	memcpy(&p->sgid, r->path.sgid, 16);
	memcpy(&p->dgid, r->path.dgid, 16);
	p->flow_label = htonl(r->path.flow_label);
	p->hop_limit = r->path.hop_limit;
	p->traffic_class = r->path.traffic_class;
	p->reversible = htonl(0x80000000);
	p->numb_path = 1;
	p->pkey = htons(r->path.pkey);
	p->sl = htons(r->path.sl);
	p->mtu_selector = 2;
	p->mtu = r->path.mtu;
	p->rate_selector = 2;
	p->rate = r->path.rate;
	p->packet_life_time_selector = 2;
	p->packet_life_time = r->path.packet_life_time;
	id->route.path_rec = p;
	id->route.num_paths = r->num_paths;
}

int cma_query_route(struct cma_id *c)
{
	struct sr_handle h = { c->handle };
	struct sr_cm_route r;
	int err = cma_call(SR_OP_CM_QUERY_ROUTE, &h, sizeof(h), &r, sizeof(r), NULL);

	if (!err)
		cma_apply_route(c, &r);
	return err;
}

int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct cma_id *c = (struct cma_id *)id;
	struct sr_cm_bind req = { .id = c->handle };
	struct sr_cm_route r;
	int err;

	sa_to_wire(&req.addr, addr);
	err = cma_call(SR_OP_CM_BIND, &req, sizeof(req), &r, sizeof(r), NULL);
	if (err)
		return cma_err(err);
	cma_apply_route(c, &r);
	return 0;
}

int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr, struct sockaddr *dst_addr, int timeout_ms)
{
	struct cma_id *c = (struct cma_id *)id;
	struct sr_cm_resolve req = { .id = c->handle, .timeout_ms = timeout_ms };
	int err;

	if (!dst_addr)
		return cma_err(EINVAL);
	sa_to_wire(&req.src, src_addr);
	sa_to_wire(&req.dst, dst_addr);
	err = cma_call(SR_OP_CM_RESOLVE_ADDR, &req, sizeof(req), NULL, 0, NULL);
	if (err)
		return cma_err(err);
	memcpy(&id->route.addr.dst_storage, dst_addr,
	       dst_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
	return cma_complete(c);
}

int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	struct cma_id *c = (struct cma_id *)id;
	struct sr_handle h = { c->handle };
	int err = cma_call(SR_OP_CM_RESOLVE_ROUTE, &h, sizeof(h), NULL, 0, NULL);

	if (err)
		return cma_err(err);
	return cma_complete(c);
}

int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	struct cma_id *c = (struct cma_id *)id;
	struct sr_cm_listen req = { c->handle, backlog };
	int err = cma_call(SR_OP_CM_LISTEN, &req, sizeof(req), NULL, 0, NULL);

	if (err)
		return cma_err(err);
	cma_query_route(c);
	return 0;
}

/* conn_to_wire copies a conn_param (or rdma_cm's defaults for NULL). */
static int conn_to_wire(struct cma_id *c, struct sr_cm_conn_param *w, const struct rdma_conn_param *p, int max_pd)
{
	memset(w, 0, sizeof(*w));
	w->qp_num = c->id.qp ? c->id.qp->qp_num : (p ? p->qp_num : 0);
	w->srq = c->id.qp && c->id.qp->srq ? 1 : (p ? p->srq : 0);
	if (!p) {
		w->responder_resources = w->initiator_depth = 0xff;
		w->retry_count = w->rnr_retry_count = 7;
		return 0;
	}
	if (p->private_data_len > max_pd || (p->private_data_len && !p->private_data))
		return EINVAL;
	w->private_data_len = p->private_data_len;
	if (p->private_data_len)
		memcpy(w->private_data, p->private_data, p->private_data_len);
	w->responder_resources = p->responder_resources;
	w->initiator_depth = p->initiator_depth;
	w->flow_control = p->flow_control;
	w->retry_count = p->retry_count;
	w->rnr_retry_count = p->rnr_retry_count;
	return 0;
}

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	struct cma_id *c = (struct cma_id *)id;
	struct sr_cm_conn req = { .id = c->handle };
	int err;

	err = conn_to_wire(c, &req.param, conn_param, id->qp_type == IBV_QPT_UD ? 180 : 56);
	if (!err)
		err = cma_call(SR_OP_CM_CONNECT, &req, sizeof(req), NULL, 0, NULL);
	if (err)
		return cma_err(err);
	if (conn_param) {
		c->resp_res = conn_param->responder_resources;
		c->init_depth = conn_param->initiator_depth;
	}
	return cma_complete(c);
}

int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	struct cma_id *c = (struct cma_id *)id;
	struct sr_cm_conn req = { .id = c->handle };
	int err;

	if (id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	if (conn_param) {
		c->resp_res = conn_param->responder_resources;
		c->init_depth = conn_param->initiator_depth;
	}
	err = conn_to_wire(c, &req.param, conn_param, id->qp_type == IBV_QPT_UD ? 136 : 196);
	if (err)
		return cma_err(err);
	if (!conn_param) {
		/* librdmacm accepts a NULL param with what the request offered. */
		req.param.responder_resources = c->resp_res;
		req.param.initiator_depth = c->init_depth;
	}
	if (id->qp && id->qp_type != IBV_QPT_UD) {
		/* The passive side's QP goes to RTS before the REP. */
		err = cma_modify_qp(c, IBV_QPS_RTR, 1);
		if (!err)
			err = cma_modify_qp(c, IBV_QPS_RTS, 1);
		if (err) {
			rdma_reject(id, NULL, 0);
			return cma_err(err);
		}
	}
	err = cma_call(SR_OP_CM_ACCEPT, &req, sizeof(req), NULL, 0, NULL);
	if (err)
		return cma_err(err);
	if (id->qp_type == IBV_QPT_UD)
		return 0;
	return cma_complete(c);
}

int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	struct cma_id *c = (struct cma_id *)id;
	struct sr_cm_reject req = { .id = c->handle };

	if (private_data_len > sizeof(req.private_data))
		return cma_err(EINVAL);
	req.private_data_len = private_data_len;
	if (private_data_len)
		memcpy(req.private_data, private_data, private_data_len);
	return cma_err(cma_call(SR_OP_CM_REJECT, &req, sizeof(req), NULL, 0, NULL));
}

int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	return rdma_reject(id, private_data, private_data_len);
}

int rdma_disconnect(struct rdma_cm_id *id)
{
	struct cma_id *c = (struct cma_id *)id;
	struct sr_handle h = { c->handle };
	int err;

	if (id->qp) {
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
		ibv_modify_qp(id->qp, &a, IBV_QP_STATE);
	}
	err = cma_call(SR_OP_CM_DISCONNECT, &h, sizeof(h), NULL, 0, NULL);
	if (err)
		return cma_err(err);
	return cma_complete(c);
}

/* rdma_establish sends the RTU for an active id whose program moved its
 * own QP after CONNECT_RESPONSE. As librdmacm's, it waits for no event and
 * none follows; an id with a QP of rdma_create_qp's is refused. */
int rdma_establish(struct rdma_cm_id *id)
{
	struct cma_id *c = (struct cma_id *)id;
	struct sr_handle h = { c->handle };

	if (id->qp)
		return cma_err(EINVAL);
	return cma_err(cma_call(SR_OP_CM_ESTABLISH, &h, sizeof(h), NULL, 0, NULL));
}

int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	return 0;
}

int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen)
{
	struct cma_id *c = (struct cma_id *)id;
	struct sr_cm_option req = { c->handle, level, optname, 0 };

	if (!optval)
		return cma_err(EINVAL);
	if (optlen == 1)
		req.value = *(uint8_t *)optval;
	else if (optlen == 2)
		req.value = *(uint16_t *)optval;
	else if (optlen >= 4)
		req.value = *(uint32_t *)optval;
	else
		return cma_err(EINVAL);
	return cma_err(cma_call(SR_OP_CM_SET_OPTION, &req, sizeof(req), NULL, 0, NULL));
}

int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	struct cma_id *c = (struct cma_id *)id;
	struct rdma_event_channel *old = id->channel;
	struct sr_cm_migrate req = { .id = c->handle };
	int sync = 0, err;

	if (!channel) {
		channel = cma_private_channel();
		if (!channel)
			return -1;
		sync = 1;
	}
	/* A sync id keeps its last event (see cma_complete) until its next
	 * call: migrating is one, so that event is acked here, as librdmacm
	 * does, before waiting for the ones the program holds. */
	if (c->sync && id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	wait_acked(c);
	req.channel = ((struct cma_channel *)channel)->handle;
	err = cma_call(SR_OP_CM_MIGRATE, &req, sizeof(req), NULL, 0, NULL);
	if (err) {
		if (sync)
			rdma_destroy_event_channel(channel);
		return cma_err(err);
	}
	if (c->sync)
		rdma_destroy_event_channel(old);
	c->sync = sync;
	id->channel = channel;
	return 0;
}

__be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	struct sockaddr *sa = &id->route.addr.src_addr;
	return sa->sa_family == AF_INET6 ? ((struct sockaddr_in6 *)sa)->sin6_port
					 : ((struct sockaddr_in *)sa)->sin_port;
}

__be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	struct sockaddr *sa = &id->route.addr.dst_addr;
	return sa->sa_family == AF_INET6 ? ((struct sockaddr_in6 *)sa)->sin6_port
					 : ((struct sockaddr_in *)sa)->sin_port;
}

int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	return cma_err(ENOSYS);
}

int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *mc_join_attr, void *context)
{
	return cma_err(ENOSYS);
}

int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	return cma_err(ENOSYS);
}

int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	return 0; /* kernel rxe carries no ECE either */
}

int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!ece)
		return cma_err(EINVAL);
	memset(ece, 0, sizeof(*ece));
	return 0;
}
