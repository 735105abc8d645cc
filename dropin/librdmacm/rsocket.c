/* rsocket.c: stream rsockets' life: the index table, socket, bind, listen,
 * accept, connect (blocking and not), shutdown and close. The data path is
 * rs_data.c, polling rs_poll.c, options rs_opt.c, iomaps rs_iomap.c.
 *
 * Connection setup is rdma_cm's, on a sync id (a channel of the rsocket's
 * own): REQ and REP carry struct rs_conn_data. A non-blocking rsocket
 * makes that channel's fd non-blocking, so each rdma_cm step returns
 * EAGAIN and rs_do_connect takes it up again when the program next calls
 * or polls. Once connected the channel stays non-blocking: rs_cm_events
 * reads it to notice a DREQ (the peer closed or its program died). */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rs.h"

/* The table from index to rsocket: pages allocated on first use and never
 * freed, so rs_get reads without a lock. */
#define RS_PAGE_BITS 10
#define RS_PAGE (1 << RS_PAGE_BITS)
#define RS_PAGES 1024
static struct rsock **rs_pages[RS_PAGES];
static pthread_mutex_t rs_table_lock = PTHREAD_MUTEX_INITIALIZER;

struct rsock *rs_get(int index)
{
	struct rsock **page;

	if (index < 0 || index >= RS_PAGE * RS_PAGES)
		return NULL;
	page = __atomic_load_n(&rs_pages[index >> RS_PAGE_BITS], __ATOMIC_ACQUIRE);
	if (!page)
		return NULL;
	return __atomic_load_n(&page[index & (RS_PAGE - 1)], __ATOMIC_ACQUIRE);
}

static int rs_insert(struct rsock *rs, int index)
{
	struct rsock **page;
	int err = 0;

	if (index < 0 || index >= RS_PAGE * RS_PAGES)
		return EMFILE;
	pthread_mutex_lock(&rs_table_lock);
	page = rs_pages[index >> RS_PAGE_BITS];
	if (!page) {
		page = calloc(RS_PAGE, sizeof(*page));
		if (page)
			__atomic_store_n(&rs_pages[index >> RS_PAGE_BITS], page, __ATOMIC_RELEASE);
		else
			err = ENOMEM;
	}
	if (page) {
		__atomic_store_n(&page[index & (RS_PAGE - 1)], rs, __ATOMIC_RELEASE);
		rs->index = index;
	}
	pthread_mutex_unlock(&rs_table_lock);
	return err;
}

static void rs_remove(struct rsock *rs)
{
	if (rs->index < 0)
		return;
	pthread_mutex_lock(&rs_table_lock);
	__atomic_store_n(&rs_pages[rs->index >> RS_PAGE_BITS][rs->index & (RS_PAGE - 1)], NULL,
			 __ATOMIC_RELEASE);
	pthread_mutex_unlock(&rs_table_lock);
	rs->index = -1;
}

int rs_err(int err)
{
	errno = err;
	return -1;
}

uint64_t rs_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int rs_set_fd_nonblock(int fd, int on)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0)
		return -1;
	fl = on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK;
	return fcntl(fd, F_SETFL, fl);
}

/* rs_create_cq gives id one CQ of cqe entries for its sends and receives,
 * on a completion channel of its own made non-blocking: waiting is a poll
 * on its fd (with the other fds the rsocket waits on). */
int rs_create_cq(struct rdma_cm_id *id, int cqe)
{
	id->recv_cq_channel = ibv_create_comp_channel(id->verbs);
	if (!id->recv_cq_channel || rs_set_fd_nonblock(id->recv_cq_channel->fd, 1))
		return -1;
	id->recv_cq = ibv_create_cq(id->verbs, cqe, id, id->recv_cq_channel, 0);
	if (!id->recv_cq)
		return -1;
	id->send_cq = id->recv_cq;
	id->send_cq_channel = id->recv_cq_channel;
	return 0;
}

/* rs_release_id frees an rsocket's CQ, its channel and the id, once its
 * QP and regions are gone. */
void rs_release_id(struct rdma_cm_id *id)
{
	if (id->recv_cq)
		ibv_destroy_cq(id->recv_cq);
	if (id->recv_cq_channel)
		ibv_destroy_comp_channel(id->recv_cq_channel);
	id->recv_cq = id->send_cq = NULL;
	id->recv_cq_channel = id->send_cq_channel = NULL;
	rdma_destroy_id(id);
}

/* rs_alloc makes an rsocket; an accepted one inherits its listener's sizes. */
static struct rsock *rs_alloc(struct rsock *parent)
{
	struct rsock *rs = calloc(1, sizeof(*rs));

	if (!rs)
		return NULL;
	rs->index = -1;
	rs->type = SOCK_STREAM;
	rs->udp = -1;
	if (parent) {
		rs->sbuf_size = parent->sbuf_size;
		rs->rbuf_size = parent->rbuf_size;
		rs->sq_inline = parent->sq_inline;
		rs->sq_size = parent->sq_size;
		rs->rq_size = parent->rq_size;
		rs->target_iomap_size = parent->target_iomap_size;
		rs->fs_flags = parent->fs_flags;
		rs->fd_flags = parent->fd_flags;
	} else {
		rs->sbuf_size = rs_def_wmem;
		rs->rbuf_size = rs_def_mem;
		rs->sq_inline = rs_def_inline;
		rs->sq_size = rs_def_sqsize;
		rs->rq_size = rs_def_rqsize;
		rs->target_iomap_size = rs_def_iomap_size;
	}
	rs->ctrl_max = RS_CTRL_WQES;
	pthread_mutex_init(&rs->slock, NULL);
	pthread_mutex_init(&rs->rlock, NULL);
	pthread_mutex_init(&rs->lock, NULL);
	pthread_mutex_init(&rs->wait_lock, NULL);
	return rs;
}

static void rs_free(struct rsock *rs)
{
	struct rdma_cm_id *id = rs->id;

	rs_keepalive_stop(rs);
	rs_remove(rs);
	if (rs->type == SOCK_DGRAM)
		ds_free(rs);
	if (id) {
		rs_free_iomaps(rs);
		if (id->qp) {
			if (rs->unacked)
				ibv_ack_cq_events(id->recv_cq, rs->unacked);
			rdma_destroy_qp(id);
		}
	}
	if (rs->smr)
		ibv_dereg_mr(rs->smr);
	if (rs->rmr)
		ibv_dereg_mr(rs->rmr);
	if (rs->target_mr)
		ibv_dereg_mr(rs->target_mr);
	free(rs->sbuf);
	free(rs->rbuf);
	free(rs->target_buf);
	free(rs->rmsg);
	if (id)
		rs_release_id(id);
	free(rs->route);
	pthread_mutex_destroy(&rs->slock);
	pthread_mutex_destroy(&rs->rlock);
	pthread_mutex_destroy(&rs->lock);
	pthread_mutex_destroy(&rs->wait_lock);
	free(rs);
}

/* rs_create_ep makes the rsocket's CQ, its RC QP, its buffers, and posts
 * every receive. */
static int rs_create_ep(struct rsock *rs)
{
	struct rdma_cm_id *id = rs->id;
	struct ibv_qp_init_attr attr;
	struct ibv_device_attr dev;
	uint32_t max = RS_QP_MAX_SIZE;
	int i;

	if (!ibv_query_device(id->verbs, &dev) && (uint32_t)dev.max_qp_wr < max)
		max = dev.max_qp_wr;
	if (rs->sq_size > max)
		rs->sq_size = max;
	if (rs->sq_size < RS_QP_MIN_SIZE)
		rs->sq_size = RS_QP_MIN_SIZE;
	if (rs->rq_size > max)
		rs->rq_size = max;
	if (rs->rq_size < RS_QP_MIN_SIZE)
		rs->rq_size = RS_QP_MIN_SIZE;

	if (rs_create_cq(id, rs->sq_size + rs->rq_size))
		return -1;

	memset(&attr, 0, sizeof(attr));
	attr.qp_context = rs;
	attr.send_cq = id->send_cq;
	attr.recv_cq = id->recv_cq;
	attr.qp_type = IBV_QPT_RC;
	attr.sq_sig_all = 1;
	attr.cap.max_send_wr = rs->sq_size;
	attr.cap.max_recv_wr = rs->rq_size;
	attr.cap.max_send_sge = 2;
	attr.cap.max_recv_sge = 1;
	attr.cap.max_inline_data = rs->sq_inline;
	if (rdma_create_qp(id, NULL, &attr))
		return -1;
	rs->sq_inline = attr.cap.max_inline_data;

	if (rs_init_bufs(rs))
		return -1;
	for (i = 0; i < rs->rq_size; i++)
		if (rs_post_recv(rs))
			return -1;
	return 0;
}

static void rs_format_conn_data(struct rsock *rs, struct rs_conn_data *c)
{
	memset(c, 0, sizeof(*c));
	c->version = RS_VERSION;
	c->flags = RS_CONN_FLAG_IOMAP | (__BYTE_ORDER == __BIG_ENDIAN ? RS_CONN_FLAG_NET : 0);
	c->credits = htobe16(rs->rq_size);
	c->target_iomap_size = (uint8_t)rs_value_to_scale(rs->target_iomap_size, 8);
	c->target_sgl.addr = htobe64((uintptr_t)rs->target_sgl);
	c->target_sgl.length = htobe32(RS_SGL_SIZE);
	c->target_sgl.key = htobe32(rs->target_mr->rkey);
	c->data_buf.addr = htobe64((uintptr_t)rs->rbuf);
	c->data_buf.length = htobe32(rs->rbuf_size >> 1);
	c->data_buf.key = htobe32(rs->rmr->rkey);
}

/* rs_save_conn_data takes the peer's half of the setup. A peer's SGL of
 * no entries would leave us nowhere to write credits: refused. */
static int rs_save_conn_data(struct rsock *rs, const void *pdata, int len)
{
	struct rs_conn_data c;
	int net = __BYTE_ORDER == __BIG_ENDIAN;

	if (!pdata || len < (int)sizeof(c))
		return EPROTO;
	memcpy(&c, pdata, sizeof(c));
	if (c.version != RS_VERSION)
		return ENOTSUP;
	rs->remote_sgl.addr = be64toh(c.target_sgl.addr);
	rs->remote_sgl.length = be32toh(c.target_sgl.length);
	rs->remote_sgl.key = be32toh(c.target_sgl.key);
	if (!rs->remote_sgl.length)
		return EPROTO;
	rs->remote_sge = 1 % rs->remote_sgl.length;
	rs->swap = !!(c.flags & RS_CONN_FLAG_NET) != net;
	if (c.flags & RS_CONN_FLAG_IOMAP) {
		rs->remote_iomap.addr = rs->remote_sgl.addr + sizeof(struct rs_sge) * rs->remote_sgl.length;
		rs->remote_iomap.length = rs_scale_to_value(c.target_iomap_size, 8);
		rs->remote_iomap.key = rs->remote_sgl.key;
	}
	rs->target_sgl[0].addr = be64toh(c.data_buf.addr);
	rs->target_sgl[0].length = be32toh(c.data_buf.length);
	rs->target_sgl[0].key = be32toh(c.data_buf.key);
	rs->sseq_comp = be16toh(c.credits);
	return 0;
}

/* rs_established finishes a connection whose ESTABLISHED (or, on the
 * active side, the REP's) event is the id's current one. */
static int rs_established(struct rsock *rs, int active)
{
	struct rdma_cm_event *ev = rs->id->event;
	int err = 0;

	if (!ev || ev->event != RDMA_CM_EVENT_ESTABLISHED)
		err = ECONNREFUSED;
	else if (active)
		err = rs_save_conn_data(rs, ev->param.conn.private_data, ev->param.conn.private_data_len);
	if (ev) {
		rdma_ack_cm_event(ev);
		rs->id->event = NULL;
	}
	if (err)
		return rs_err(err);
	rs_set_fd_nonblock(rs->id->channel->fd, 1);
	rs->state = RS_CONNECT_RDWR;
	return 0;
}

/* rs_do_connect advances a connection as far as it goes without blocking
 * (non-blocking rsockets) or to the end: 0 connected, -1 with EINPROGRESS
 * while under way, another errno when it failed (kept for SO_ERROR). */
int rs_do_connect(struct rsock *rs)
{
	struct cma_id *c = (struct cma_id *)rs->id;
	struct rdma_conn_param param;
	struct rs_conn_data cd;
	int ret = 0;

	pthread_mutex_lock(&rs->slock);
	if (rs->state & RS_OPENING)
		rs_set_fd_nonblock(rs->id->channel->fd, rs->fs_flags & O_NONBLOCK);
	switch (rs->state) {
	case RS_INIT:
	case RS_BOUND:
		ret = rdma_resolve_addr(rs->id, NULL, &rs->id->route.addr.dst_addr, RS_RESOLVE_MS);
		if (ret) {
			if (errno == EAGAIN)
				rs->state = RS_RESOLVING_ADDR;
			break;
		}
		goto resolve_route;
	case RS_RESOLVING_ADDR:
		ret = cma_complete(c);
		if (ret)
			break;
resolve_route:
		ret = -1;
		if (rs->route)
			ret = rdma_set_option(rs->id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, rs->route, rs->route_len);
		if (ret)
			ret = rdma_resolve_route(rs->id, RS_RESOLVE_MS);
		if (ret) {
			if (errno == EAGAIN)
				rs->state = RS_RESOLVING_ROUTE;
			break;
		}
		goto connect;
	case RS_RESOLVING_ROUTE:
		ret = cma_complete(c);
		if (ret)
			break;
connect:
		ret = rs_create_ep(rs);
		if (ret)
			break;
		rs_format_conn_data(rs, &cd);
		memset(&param, 0, sizeof(param));
		param.private_data = &cd;
		param.private_data_len = sizeof(cd);
		param.flow_control = 1;
		param.retry_count = 7;
		param.rnr_retry_count = 7;
		ret = rdma_connect(rs->id, &param);
		if (ret) {
			if (errno == EAGAIN)
				rs->state = RS_CONNECTING;
			break;
		}
		ret = rs_established(rs, 1);
		break;
	case RS_CONNECTING:
		ret = cma_complete(c);
		if (!ret)
			ret = rs_established(rs, 1);
		break;
	case RS_ACCEPTING:
		ret = cma_complete(c);
		if (!ret)
			ret = rs_established(rs, 0);
		break;
	case RS_CONNECT_ERROR:
	case RS_DISCONNECTED:
	case RS_ERROR:
		ret = rs_err(ENOTCONN);
		goto out;
	default:
		ret = (rs->state & RS_CONNECTED) ? 0 : rs_err(EINVAL);
		goto out;
	}
	if (ret) {
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			errno = EINPROGRESS;
		} else {
			rs->state = RS_CONNECT_ERROR;
			rs->err = errno;
		}
	}
out:
	pthread_mutex_unlock(&rs->slock);
	return ret;
}

/* rs_cm_events reads what rdma_cm says about a connected rsocket: a DREQ
 * (the peer closed, or its program died) disconnects it and flushes the
 * QP, so that every waiter wakes. */
void rs_cm_events(struct rsock *rs)
{
	struct rdma_cm_event *ev;

	if (!(rs->state & (RS_CONNECTED | RS_DISCONNECTED | RS_ERROR)))
		return;
	while (!rdma_get_cm_event(rs->id->channel, &ev)) {
		enum rdma_cm_event_type t = ev->event;

		rdma_ack_cm_event(ev);
		if (t != RDMA_CM_EVENT_DISCONNECTED && t != RDMA_CM_EVENT_DEVICE_REMOVAL)
			continue;
		pthread_mutex_lock(&rs->lock);
		if (rs->state & RS_CONNECTED) {
			struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

			rs->state = t == RDMA_CM_EVENT_DISCONNECTED ? RS_DISCONNECTED : RS_ERROR;
			if (t != RDMA_CM_EVENT_DISCONNECTED)
				rs->err = ENODEV;
			ibv_modify_qp(rs->id->qp, &a, IBV_QP_STATE);
		}
		pthread_mutex_unlock(&rs->lock);
	}
}

/* rs_cm_events_now_and_then: rs_cm_events at most every 50 ms, for
 * callers that spin (non-blocking calls, rpoll's checks): a read on the
 * channel each time would be a system call per spin. */
void rs_cm_events_now_and_then(struct rsock *rs)
{
	uint64_t now = rs_now_us();

	if (now - rs->cm_checked < 50000)
		return;
	rs->cm_checked = now;
	rs_cm_events(rs);
}

int rsocket(int domain, int type, int protocol)
{
	int kind = type & ~(SOCK_CLOEXEC | SOCK_NONBLOCK);
	struct rsock *rs;
	int err;

	if ((domain != AF_INET && domain != AF_INET6 && domain != AF_IB) ||
	    (kind != SOCK_STREAM && kind != SOCK_DGRAM) ||
	    (kind == SOCK_STREAM && protocol && protocol != IPPROTO_TCP) ||
	    (kind == SOCK_DGRAM && protocol && protocol != IPPROTO_UDP))
		return rs_err(ENOTSUP);
	if (domain == AF_IB && kind == SOCK_DGRAM)
		return rs_err(ENOTSUP);
	rs_configure();
	rs = rs_alloc(NULL);
	if (!rs)
		return rs_err(ENOMEM);
	rs->fd_flags = (type & SOCK_CLOEXEC) ? FD_CLOEXEC : 0;
	rs->fs_flags = (type & SOCK_NONBLOCK) ? O_NONBLOCK : 0;
	if (kind == SOCK_DGRAM) {
		if (ds_socket(rs, domain, type)) {
			err = errno;
			rs_free(rs);
			return rs_err(err);
		}
		err = rs_insert(rs, rs->udp);
		if (err) {
			rs_free(rs);
			return rs_err(err);
		}
		return rs->index;
	}
	if (rdma_create_id(NULL, &rs->id, rs, RDMA_PS_TCP)) {
		err = errno;
		rs_free(rs);
		return rs_err(err);
	}
	rs->id->route.addr.src_addr.sa_family = domain;
	err = rs_insert(rs, rs->id->channel->fd);
	if (err) {
		rs_free(rs);
		return rs_err(err);
	}
	return rs->index;
}

int rbind(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	struct rsock *rs = rs_get(socket);

	if (!rs)
		return rs_err(EBADF);
	if (rs->type == SOCK_DGRAM)
		return ds_bind(rs, addr, addrlen);
	if (rs->state != RS_INIT)
		return rs_err(EINVAL);
	if (rdma_bind_addr(rs->id, (struct sockaddr *)addr))
		return -1;
	rs->state = RS_BOUND;
	return 0;
}

int rlisten(int socket, int backlog)
{
	struct rsock *rs = rs_get(socket);

	if (!rs)
		return rs_err(EBADF);
	if (rs->type == SOCK_DGRAM)
		return rs_err(EOPNOTSUPP);
	if (rs->state == RS_LISTENING)
		return 0;
	if (rdma_listen(rs->id, backlog))
		return -1;
	rs_set_fd_nonblock(rs->id->channel->fd, rs->fs_flags & O_NONBLOCK);
	rs->state = RS_LISTENING;
	return 0;
}

/* rs_accept_one turns one connection request into an rsocket: 0 and *out
 * when it is accepted (or being accepted), EAGAIN when none waits, another
 * errno when the request was refused (the caller takes the next). */
static int rs_accept_one(struct rsock *l, struct rsock **out)
{
	struct rdma_cm_id *cid;
	struct rdma_conn_param param;
	struct rs_conn_data cd;
	struct rsock *rs;
	int err;

	if (rdma_get_request(l->id, &cid))
		return errno;
	rs = rs_alloc(l);
	if (!rs) {
		rdma_reject(cid, NULL, 0);
		rdma_destroy_id(cid);
		return ENOMEM;
	}
	rs->id = cid;
	cid->context = rs;
	err = rs_insert(rs, cid->channel->fd);
	if (!err && rs_create_ep(rs))
		err = errno;
	if (!err)
		err = rs_save_conn_data(rs, cid->event->param.conn.private_data,
					cid->event->param.conn.private_data_len);
	if (err) {
		rdma_reject(cid, NULL, 0);
		rs_free(rs);
		return err;
	}
	param = cid->event->param.conn;
	rs_format_conn_data(rs, &cd);
	param.private_data = &cd;
	param.private_data_len = sizeof(cd);
	rs_set_fd_nonblock(cid->channel->fd, rs->fs_flags & O_NONBLOCK);
	if (rdma_accept(cid, &param)) {
		if (errno != EAGAIN) {
			err = errno;
			rdma_reject(cid, NULL, 0);
			rs_free(rs);
			return err;
		}
		rs->state = RS_ACCEPTING;
	} else if (rs_established(rs, 0)) {
		err = errno;
		rs_free(rs);
		return err;
	}
	*out = rs;
	return 0;
}

int raccept(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	struct rsock *l = rs_get(socket), *rs = NULL;
	int err;

	if (!l)
		return rs_err(EBADF);
	if (l->type == SOCK_DGRAM)
		return rs_err(EOPNOTSUPP);
	if (l->state != RS_LISTENING)
		return rs_err(EINVAL);
	do {
		err = rs_accept_one(l, &rs);
	} while (err && err != EAGAIN && err != EWOULDBLOCK && err != EINTR && err != EBADF);
	if (err)
		return rs_err(err);
	if (addr && addrlen)
		rgetpeername(rs->index, addr, addrlen);
	return rs->index;
}

int rconnect(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	struct rsock *rs = rs_get(socket);

	if (!rs)
		return rs_err(EBADF);
	if (rs->type == SOCK_DGRAM)
		return ds_connect(rs, addr, addrlen);
	if (!addr || addrlen < sizeof(struct sockaddr_in) || addrlen > sizeof(rs->id->route.addr.dst_storage))
		return rs_err(EINVAL);
	if (rs->state == RS_INIT || rs->state == RS_BOUND)
		memcpy(&rs->id->route.addr.dst_storage, addr, addrlen);
	else if (rs->state & RS_CONNECTED)
		return rs_err(EISCONN);
	else if (rs->state & RS_OPENING)
		return rs_err(EALREADY);
	else if (rs->state == RS_LISTENING)
		return rs_err(EINVAL);
	else if (rs->state == RS_CONNECT_ERROR && rs->err) {
		/* A failed non-blocking connect: the next connect says why
		 * (hiredis asks this way), as a socket's does. */
		int err = rs->err;

		rs->err = 0;
		return rs_err(err);
	}
	return rs_do_connect(rs);
}

int rshutdown(int socket, int how)
{
	struct rsock *rs = rs_get(socket);
	int ctrl, ret = 0;

	if (!rs)
		return rs_err(EBADF);
	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		return rs_err(EINVAL);
	if (rs->type == SOCK_DGRAM) {
		rs->state &= ~(how == SHUT_RD ? RS_READABLE : how == SHUT_WR ? RS_WRITABLE : RS_READABLE | RS_WRITABLE);
		return 0;
	}
	rs_keepalive_stop(rs);
	pthread_mutex_lock(&rs->lock);
	if (rs->state & RS_CONNECTED) {
		if (how == SHUT_RDWR) {
			ctrl = RS_CTRL_DISCONNECT;
			rs->state &= ~(RS_READABLE | RS_WRITABLE);
		} else if (how == SHUT_WR) {
			rs->state &= ~RS_WRITABLE;
			ctrl = (rs->state & RS_READABLE) ? RS_CTRL_SHUTDOWN : RS_CTRL_DISCONNECT;
		} else {
			rs->state &= ~RS_READABLE;
			if (rs->state & RS_WRITABLE) {
				pthread_mutex_unlock(&rs->lock);
				return 0;
			}
			ctrl = RS_CTRL_DISCONNECT;
		}
		pthread_mutex_unlock(&rs->lock);
		if (!rs_ctrl_avail(rs))
			ret = rs_process(rs, 0, rs_conn_can_send_ctrl);
		pthread_mutex_lock(&rs->lock);
		if (!ret && (rs->state & RS_CONNECTED) && rs_ctrl_avail(rs)) {
			rs->ctrl_seqno++;
			ret = rs_post_msg(rs, RS_MSG(RS_OP_CTRL, ctrl));
		}
		pthread_mutex_unlock(&rs->lock);
		if (rs->state & RS_CONNECTED)
			rs_process(rs, 0, rs_all_sends_done);
		pthread_mutex_lock(&rs->lock);
	}
	if ((rs->state & RS_DISCONNECTED) && rs->id->qp) {
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

		ibv_modify_qp(rs->id->qp, &a, IBV_QP_STATE);
	}
	pthread_mutex_unlock(&rs->lock);
	return ret;
}

int rclose(int socket)
{
	struct rsock *rs = rs_get(socket);

	if (!rs)
		return rs_err(EBADF);
	if (rs->state & RS_CONNECTED)
		rshutdown(socket, SHUT_RDWR);
	rs_free(rs);
	return 0;
}

static void rs_copy_addr(struct sockaddr *dst, const struct sockaddr *src, socklen_t *len)
{
	socklen_t size = src->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);

	if (dst)
		memcpy(dst, src, *len < size ? *len : size);
	*len = size;
}

int rgetpeername(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	struct rsock *rs = rs_get(socket);

	if (!rs)
		return rs_err(EBADF);
	if (rs->type == SOCK_DGRAM)
		return getpeername(rs->udp, addr, addrlen);
	if (!addr || !addrlen)
		return rs_err(EFAULT);
	if (!(rs->state & (RS_CONNECTED | RS_OPENING | RS_DISCONNECTED)))
		return rs_err(ENOTCONN);
	rs_copy_addr(addr, rdma_get_peer_addr(rs->id), addrlen);
	return 0;
}

int rgetsockname(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	struct rsock *rs = rs_get(socket);

	if (!rs)
		return rs_err(EBADF);
	if (rs->type == SOCK_DGRAM)
		return getsockname(rs->udp, addr, addrlen);
	if (!addrlen || (!addr && *addrlen))
		return rs_err(EFAULT);
	rs_copy_addr(addr, rdma_get_local_addr(rs->id), addrlen);
	return 0;
}
