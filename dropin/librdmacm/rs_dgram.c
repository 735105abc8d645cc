/* rs_dgram.c: datagram rsockets, in librdmacm's protocol (rdma-core's
 * docs/rsocket, "Datagram Overview"). A datagram rsocket is a UDP socket
 * and a UD QP. A datagram to a peer whose QPN is not known yet goes over
 * UDP with a struct ds_udp_header before it (the tag 0x55555555, our QPN
 * and our QP's address); the receiver answers such a datagram with a
 * header of its own (op RS_OP_CTRL, its QPN), and from then on each sends
 * to the other's UD QP (Q_Key RDMA_UDP_QKEY), the data after a struct
 * ds_header that names the sender's address and UDP port.
 *
 * librdmacm runs a service thread that reads the UDP sockets; here the
 * program's own calls (rsendto, rrecvfrom, rpoll) read them, so a program
 * blocked in rrecvfrom or rpoll answers at once, and one that is not
 * answers at its next call (the sender keeps using UDP until then).
 *
 * The QP's address is the device's (rdma_resolve_addr towards the peer),
 * and an address handle goes to the address a peer's header names: on a
 * host where the RoCE address is not the one UDP leaves from (loopback
 * addresses) the two differ, and RoCE must go to the device's. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rs.h"

#define DS_UDP_TAG 0x55555555
#define DS_UDP_V4_LEN 16
#define DS_UDP_V6_LEN 28
#define DS_V4_LEN 8
#define DS_V6_LEN 24
#define DS_GRH 40
#define DS_SLOT RS_SNDLOWAT
#define DS_WR_RECV (1ULL << 63)
#define DS_MAX_DESTS 4096

static socklen_t sa_len(const struct sockaddr *sa)
{
	return sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

static int sa_same(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return 0;
	if (a->sa_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;

		return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;

	return x->sin6_port == y->sin6_port && !memcmp(&x->sin6_addr, &y->sin6_addr, 16);
}

int ds_socket(struct rsock *rs, int domain, int type)
{
	rs->type = SOCK_DGRAM;
	rs->udp = socket(domain, SOCK_DGRAM | SOCK_NONBLOCK | (type & SOCK_CLOEXEC), 0);
	if (rs->udp < 0)
		return -1;
	/* Slots of RS_SNDLOWAT bytes, as librdmacm sizes them. */
	if (rs->rq_size > rs->rbuf_size / DS_SLOT)
		rs->rq_size = rs->rbuf_size / DS_SLOT;
	if (rs->sq_size > rs->sbuf_size / DS_SLOT)
		rs->sq_size = rs->sbuf_size / DS_SLOT;
	if (rs->rq_size < 2)
		rs->rq_size = 2;
	if (rs->sq_size < 2)
		rs->sq_size = 2;
	rs->state = RS_READABLE | RS_WRITABLE;
	return 0;
}

/* ds_src finds the address our datagrams to d come from, as the peer
 * sees it (and so names us in the ds_header of what goes over RoCE): the
 * socket's own when bound to one, else the one the host's routing picks
 * for d, with the socket's port (librdmacm's ds_get_src_addr). */
static void ds_src(struct rsock *rs, struct rs_dest *d)
{
	struct sockaddr_storage me, via;
	socklen_t len = sizeof(me), vlen = sizeof(via);
	int any, s;

	memset(&d->src, 0, sizeof(d->src));
	if (getsockname(rs->udp, (struct sockaddr *)&me, &len))
		return;
	if (me.ss_family == AF_INET)
		any = ((struct sockaddr_in *)&me)->sin_addr.s_addr == htonl(INADDR_ANY);
	else
		any = !memcmp(&((struct sockaddr_in6 *)&me)->sin6_addr, &in6addr_any, 16);
	if (any) {
		s = socket(d->addr.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (s >= 0 && !connect(s, (struct sockaddr *)&d->addr, d->addrlen) &&
		    !getsockname(s, (struct sockaddr *)&via, &vlen)) {
			/* the port is the socket's; the address routing's */
			if (via.ss_family == AF_INET)
				((struct sockaddr_in *)&via)->sin_port = ((struct sockaddr_in *)&me)->sin_port;
			else
				((struct sockaddr_in6 *)&via)->sin6_port = ((struct sockaddr_in6 *)&me)->sin6_port;
			me = via;
		}
		if (s >= 0)
			close(s);
	}
	d->src = me;
}

static struct rs_dest *ds_dest(struct rsock *rs, const struct sockaddr *addr, socklen_t len)
{
	struct rs_dest *d;

	for (d = rs->dests; d; d = d->next)
		if (sa_same((struct sockaddr *)&d->addr, addr))
			return d;
	/* Peers arrive by UDP from anywhere: a bounded number, so that a
	 * flood of forged sources cannot grow us without end. */
	if (rs->ndests >= DS_MAX_DESTS)
		return NULL;
	rs->ndests++;
	d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	if (len > sizeof(d->addr))
		len = sizeof(d->addr);
	memcpy(&d->addr, addr, len);
	d->addrlen = sa_len(addr);
	d->next = rs->dests;
	rs->dests = d;
	return d;
}

/* ds_header writes the struct ds_header of a datagram to d: our address
 * and port as d sees our UDP datagrams. Returns its length. */
static int ds_header(struct rs_dest *d, uint8_t *h)
{
	if (!d->src.ss_family)
		return 0;
	if (d->src.ss_family == AF_INET) {
		struct sockaddr_in *a = (void *)&d->src;

		h[0] = 4;
		h[1] = DS_V4_LEN;
		memcpy(h + 2, &a->sin_port, 2);
		memcpy(h + 4, &a->sin_addr, 4);
		return DS_V4_LEN;
	}
	struct sockaddr_in6 *a = (void *)&d->src;

	h[0] = 6;
	h[1] = DS_V6_LEN;
	memcpy(h + 2, &a->sin6_port, 2);
	memcpy(h + 4, &a->sin6_flowinfo, 4);
	memcpy(h + 8, &a->sin6_addr, 16);
	return DS_V6_LEN;
}

int ds_bind(struct rsock *rs, const struct sockaddr *addr, socklen_t len)
{
	return bind(rs->udp, addr, len);
}

int ds_connect(struct rsock *rs, const struct sockaddr *addr, socklen_t len)
{
	struct rs_dest *d;

	if (connect(rs->udp, addr, len))
		return -1;
	pthread_mutex_lock(&rs->lock);
	d = ds_dest(rs, addr, len);
	if (d)
		rs->conn_dest = d;
	pthread_mutex_unlock(&rs->lock);
	return d ? 0 : rs_err(ENOMEM);
}

static int ds_post_recv(struct rsock *rs, int slot)
{
	struct ibv_recv_wr wr = { .wr_id = DS_WR_RECV | slot, .num_sge = 1 }, *bad;
	struct ibv_sge sge = {
		.addr = (uintptr_t)rs->dbuf + (size_t)rs->sq_size * DS_SLOT + (size_t)slot * (DS_GRH + DS_SLOT),
		.length = DS_GRH + DS_SLOT,
		.lkey = rs->dmr->lkey,
	};
	int err;

	wr.sg_list = &sge;
	err = ibv_post_recv(rs->did->qp, &wr, &bad);
	return err ? rs_err(err) : 0;
}

/* ds_qp makes the UD QP, from the device address that reaches peer. */
static int ds_qp(struct rsock *rs, const struct sockaddr *peer)
{
	struct sockaddr_storage to;
	struct ibv_qp_init_attr attr;
	struct rdma_cm_id *id;
	size_t size;
	int i;

	if (rs->did)
		return 0;
	memcpy(&to, peer, sa_len(peer));
	((struct sockaddr_in *)&to)->sin_port = 0; /* the same place in sockaddr_in6 */
	if (rdma_create_id(NULL, &id, rs, RDMA_PS_UDP))
		return -1;
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&to, RS_RESOLVE_MS))
		goto fail;
	rs->did = id;
	if (rs_create_cq(id, rs->sq_size + rs->rq_size))
		return -1;
	memset(&attr, 0, sizeof(attr));
	attr.send_cq = attr.recv_cq = id->recv_cq;
	attr.qp_type = IBV_QPT_UD;
	attr.sq_sig_all = 1;
	attr.cap.max_send_wr = rs->sq_size;
	attr.cap.max_recv_wr = rs->rq_size;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	attr.cap.max_inline_data = rs->sq_inline;
	if (rdma_create_qp(id, NULL, &attr))
		return -1;
	size = (size_t)rs->sq_size * DS_SLOT + (size_t)rs->rq_size * (DS_GRH + DS_SLOT);
	rs->dbuf = calloc(1, size);
	/* Room for every receive slot, and as many copied from UDP. */
	rs->dq_cap = 2 * rs->rq_size;
	rs->dq = calloc(rs->dq_cap, sizeof(*rs->dq));
	if (!rs->dbuf || !rs->dq)
		return rs_err(ENOMEM);
	rs->dmr = ibv_reg_mr(id->pd, rs->dbuf, size, IBV_ACCESS_LOCAL_WRITE);
	if (!rs->dmr)
		return -1;
	rs->dsend_avail = rs->sq_size;
	for (i = 0; i < rs->rq_size; i++)
		if (ds_post_recv(rs, i))
			return -1;

	/* The device's address, which our UDP headers name for RoCE. */
	if (rdma_get_local_addr(id)->sa_family == AF_INET) {
		rs->dhdr[0] = 4;
		memcpy(rs->dhdr + 4, &((const struct sockaddr_in *)rdma_get_local_addr(id))->sin_addr, 4);
	} else {
		rs->dhdr[0] = 6;
		memcpy(rs->dhdr + 8, &((const struct sockaddr_in6 *)rdma_get_local_addr(id))->sin6_addr, 16);
	}
	return 0;
fail:
	rdma_destroy_id(id);
	return -1;
}

/* ds_ah points d at QP qpn on the device whose RoCE address is ip. */
static void ds_ah(struct rsock *rs, struct rs_dest *d, uint32_t qpn, const uint8_t gid[16])
{
	struct ibv_ah_attr a;
	union ibv_gid g, want;
	int i;

	if (d->ah && d->qpn == qpn)
		return;
	if (d->ah)
		ibv_destroy_ah(d->ah);
	d->ah = NULL;
	memset(&a, 0, sizeof(a));
	a.is_global = 1;
	memcpy(a.grh.dgid.raw, gid, 16);
	a.grh.hop_limit = 64;
	a.port_num = 1;
	/* The source GID: the QP's address. */
	memset(&want, 0, sizeof(want));
	if (rs->dhdr[0] == 4) {
		want.raw[10] = want.raw[11] = 0xff;
		memcpy(want.raw + 12, rs->dhdr + 4, 4);
	} else {
		memcpy(want.raw, rs->dhdr + 8, 16);
	}
	for (i = 0; i < 16; i++) {
		if (!ibv_query_gid(rs->did->verbs, 1, i, &g) && !memcmp(&g, &want, 16)) {
			a.grh.sgid_index = i;
			break;
		}
	}
	d->ah = ibv_create_ah(rs->did->pd, &a);
	d->qpn = qpn;
}

static ssize_t ds_udp_send(struct rsock *rs, struct rs_dest *d, uint8_t op, const void *buf, size_t len)
{
	uint8_t h[DS_UDP_V6_LEN];
	struct iovec iov[2];
	struct msghdr msg;
	uint32_t qpn = htobe32(rs->did->qp->qp_num & 0xFFFFFF), tag = htobe32(DS_UDP_TAG);
	ssize_t n;

	memset(h, 0, sizeof(h));
	memcpy(h, &tag, 4);
	h[4] = rs->dhdr[0];
	h[5] = op;
	h[6] = rs->dhdr[0] == 4 ? DS_UDP_V4_LEN : DS_UDP_V6_LEN;
	memcpy(h + 8, &qpn, 4);
	memcpy(h + 12, rs->dhdr[0] == 4 ? rs->dhdr + 4 : rs->dhdr + 8, rs->dhdr[0] == 4 ? 4 : 16);
	iov[0].iov_base = h;
	iov[0].iov_len = h[6];
	iov[1].iov_base = (void *)buf;
	iov[1].iov_len = len;
	memset(&msg, 0, sizeof(msg));
	msg.msg_name = &d->addr;
	msg.msg_namelen = d->addrlen;
	msg.msg_iov = iov;
	msg.msg_iovlen = len ? 2 : 1;
	n = sendmsg(rs->udp, &msg, MSG_NOSIGNAL);
	return n < 0 ? n : n - h[6];
}

/* ds_queue queues a datagram for rrecvfrom. One in receive slot slot
 * stays there; one that came over UDP (slot < 0) is copied: that happens
 * only until the peer's QP is known. A full queue drops it, as a full
 * socket buffer would; its slot is posted again. */
static void ds_queue(struct rsock *rs, const struct sockaddr *src, socklen_t srclen, uint8_t *data, uint32_t len,
		     int slot)
{
	struct rs_dmsg *m;

	if (rs->dq_len == rs->dq_cap) {
		if (slot >= 0)
			ds_post_recv(rs, slot);
		return;
	}
	m = &rs->dq[(rs->dq_head + rs->dq_len) % rs->dq_cap];
	if (slot < 0) {
		m->data = malloc(len ? len : 1);
		if (!m->data)
			return;
		memcpy(m->data, data, len);
	} else {
		m->data = data;
	}
	m->slot = slot;
	m->len = len;
	memcpy(&m->src, src, srclen);
	m->srclen = srclen;
	rs->dq_len++;
}

/* ds_release gives a taken datagram's room back. */
static void ds_release(struct rsock *rs, struct rs_dmsg *m)
{
	if (m->slot >= 0)
		ds_post_recv(rs, m->slot);
	else
		free(m->data);
}

/* ds_service reads the UDP socket: peers' first datagrams (answered with
 * our QPN, their data queued) and their answers (their QPN). mu held. */
static void ds_service(struct rsock *rs)
{
	uint8_t buf[DS_UDP_V6_LEN + DS_SLOT];
	struct sockaddr_storage from;
	socklen_t flen;
	ssize_t n;

	for (;;) {
		uint8_t gid[16] = { 0 };
		struct rs_dest *d;
		uint32_t tag, qpn;
		int hl;

		flen = sizeof(from);
		n = recvfrom(rs->udp, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&from, &flen);
		if (n < 0)
			return;
		if (n < DS_UDP_V4_LEN)
			continue;
		memcpy(&tag, buf, 4);
		hl = buf[6];
		if (be32toh(tag) != DS_UDP_TAG || n < hl ||
		    !((buf[4] == 4 && hl == DS_UDP_V4_LEN) || (buf[4] == 6 && hl == DS_UDP_V6_LEN)))
			continue; /* not an rsocket's: dropped */
		memcpy(&qpn, buf + 8, 4);
		qpn = be32toh(qpn) & 0xFFFFFF;
		if (buf[4] == 4) {
			gid[10] = gid[11] = 0xff;
			memcpy(gid + 12, buf + 12, 4);
		} else {
			memcpy(gid, buf + 12, 16);
		}
		d = ds_dest(rs, (struct sockaddr *)&from, flen);
		if (!d || ds_qp(rs, (struct sockaddr *)&from))
			continue;
		if (buf[5] == RS_OP_DATA)
			ds_udp_send(rs, d, RS_OP_CTRL, NULL, 0);
		ds_ah(rs, d, qpn, gid);
		if (buf[5] == RS_OP_DATA)
			ds_queue(rs, (struct sockaddr *)&from, flen, buf + hl, n - hl, -1);
	}
}

/* ds_poll takes the UD QP's completions. mu held. */
static void ds_poll(struct rsock *rs)
{
	struct ibv_wc wc[16];
	int n, i;

	if (!rs->did)
		return;
	while ((n = ibv_poll_cq(rs->did->recv_cq, 16, wc)) > 0) {
		for (i = 0; i < n; i++) {
			int slot = (int)(wc[i].wr_id & 0xffffffff);
			uint8_t *p;
			struct sockaddr_storage src;
			uint32_t hl;

			if (!(wc[i].wr_id & DS_WR_RECV)) {
				rs->dsend_avail++;
				continue;
			}
			p = rs->dbuf + (size_t)rs->sq_size * DS_SLOT + (size_t)slot * (DS_GRH + DS_SLOT);
			hl = p[DS_GRH + 1];
			if (wc[i].status == IBV_WC_SUCCESS && wc[i].byte_len >= DS_GRH + DS_V4_LEN &&
			    ((p[DS_GRH] == 4 && hl == DS_V4_LEN) || (p[DS_GRH] == 6 && hl == DS_V6_LEN)) &&
			    wc[i].byte_len >= DS_GRH + hl) {
				memset(&src, 0, sizeof(src));
				if (p[DS_GRH] == 4) {
					struct sockaddr_in *s = (void *)&src;

					s->sin_family = AF_INET;
					memcpy(&s->sin_port, p + DS_GRH + 2, 2);
					memcpy(&s->sin_addr, p + DS_GRH + 4, 4);
				} else {
					struct sockaddr_in6 *s = (void *)&src;

					s->sin6_family = AF_INET6;
					memcpy(&s->sin6_port, p + DS_GRH + 2, 2);
					memcpy(&s->sin6_flowinfo, p + DS_GRH + 4, 4);
					memcpy(&s->sin6_addr, p + DS_GRH + 8, 16);
				}
				ds_queue(rs, (struct sockaddr *)&src, sa_len((struct sockaddr *)&src), p + DS_GRH + hl,
					 wc[i].byte_len - DS_GRH - hl, slot);
			} else if (wc[i].status != IBV_WC_WR_FLUSH_ERR) {
				ds_post_recv(rs, slot);
			}
		}
	}
}

/* ds_wait blocks until the UDP socket or the CQ has something. mu held
 * on entry and exit; released while waiting. */
static int ds_wait(struct rsock *rs)
{
	struct pollfd p[2];
	int n = 0;

	if (rs->did && !rs->cq_armed) {
		ibv_req_notify_cq(rs->did->recv_cq, 0);
		rs->cq_armed = 1;
		return 0; /* look again before sleeping */
	}
	p[n].fd = rs->udp;
	p[n++].events = POLLIN;
	if (rs->did) {
		p[n].fd = rs->did->recv_cq_channel->fd;
		p[n++].events = POLLIN;
	}
	pthread_mutex_unlock(&rs->lock);
	while (poll(p, n, -1) < 0 && errno == EINTR)
		;
	pthread_mutex_lock(&rs->lock);
	if (n == 2 && p[1].revents) {
		struct ibv_cq *cq;
		void *ctx;

		if (!ibv_get_cq_event(rs->did->recv_cq_channel, &cq, &ctx)) {
			ibv_ack_cq_events(cq, 1);
			rs->cq_armed = 0;
		}
	}
	return 0;
}

ssize_t ds_sendto(struct rsock *rs, const void *buf, size_t len, int flags, const struct sockaddr *to, socklen_t tolen)
{
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge;
	struct rs_dest *d;
	uint8_t *slot;
	ssize_t ret;
	int err, hl;

	pthread_mutex_lock(&rs->lock);
	d = to ? ds_dest(rs, to, tolen) : rs->conn_dest;
	if (!d) {
		ret = rs_err(to ? ENOMEM : EDESTADDRREQ);
		goto out;
	}
	if (ds_qp(rs, (struct sockaddr *)&d->addr)) {
		ret = -1;
		goto out;
	}
	ds_service(rs);
	if (!d->src.ss_family)
		ds_src(rs, d);
	if (len > DS_SLOT - DS_V6_LEN) {
		ret = rs_err(EMSGSIZE);
		goto out;
	}
	if (!d->ah) {
		ret = ds_udp_send(rs, d, RS_OP_DATA, buf, len);
		goto out;
	}
	for (;;) {
		ds_poll(rs);
		if (rs->dsend_avail)
			break;
		if ((rs->fs_flags & O_NONBLOCK) || (flags & MSG_DONTWAIT)) {
			ret = rs_err(EWOULDBLOCK);
			goto out;
		}
		ds_wait(rs);
	}
	slot = rs->dbuf + (size_t)rs->dsend_next * DS_SLOT;
	hl = ds_header(d, slot);
	memcpy(slot + hl, buf, len);
	sge.addr = (uintptr_t)slot;
	sge.length = hl + len;
	sge.lkey = rs->dmr->lkey;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = rs->dsend_next;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.wr.ud.ah = d->ah;
	wr.wr.ud.remote_qpn = d->qpn;
	wr.wr.ud.remote_qkey = RDMA_UDP_QKEY;
	err = ibv_post_send(rs->did->qp, &wr, &bad);
	if (err) {
		ret = rs_err(err);
		goto out;
	}
	rs->dsend_avail--;
	rs->dsend_next = (rs->dsend_next + 1) % rs->sq_size;
	ret = len;
out:
	pthread_mutex_unlock(&rs->lock);
	return ret;
}

ssize_t ds_recvfrom(struct rsock *rs, void *buf, size_t len, int flags, struct sockaddr *src, socklen_t *srclen)
{
	struct rs_dmsg *m;
	size_t n;

	pthread_mutex_lock(&rs->lock);
	for (;;) {
		ds_service(rs);
		ds_poll(rs);
		if (rs->dq_len)
			break;
		if ((rs->fs_flags & O_NONBLOCK) || (flags & MSG_DONTWAIT)) {
			pthread_mutex_unlock(&rs->lock);
			return rs_err(EWOULDBLOCK);
		}
		ds_wait(rs);
	}
	m = &rs->dq[rs->dq_head];
	n = m->len < len ? m->len : len;
	memcpy(buf, m->data, n);
	if (src && srclen) {
		memcpy(src, &m->src, *srclen < m->srclen ? *srclen : m->srclen);
		*srclen = m->srclen;
	}
	if (!(flags & MSG_PEEK)) {
		ds_release(rs, m);
		rs->dq_head = (rs->dq_head + 1) % rs->dq_cap;
		rs->dq_len--;
	}
	pthread_mutex_unlock(&rs->lock);
	return n;
}

short ds_revents(struct rsock *rs, short events)
{
	short rev = 0;

	pthread_mutex_lock(&rs->lock);
	ds_service(rs);
	ds_poll(rs);
	if ((events & POLLIN) && rs->dq_len)
		rev |= POLLIN;
	if ((events & POLLOUT) && (!rs->did || rs->dsend_avail))
		rev |= POLLOUT;
	pthread_mutex_unlock(&rs->lock);
	return rev;
}

void ds_arm(struct rsock *rs, struct pollfd *p)
{
	p[0].fd = rs->udp;
	p[1].fd = -1;
	p[0].events = p[1].events = POLLIN;
	p[0].revents = p[1].revents = 0;
	pthread_mutex_lock(&rs->lock);
	if (rs->did) {
		if (!rs->cq_armed) {
			ibv_req_notify_cq(rs->did->recv_cq, 0);
			rs->cq_armed = 1;
		}
		p[1].fd = rs->did->recv_cq_channel->fd;
	}
	pthread_mutex_unlock(&rs->lock);
}

void ds_take(struct rsock *rs, struct pollfd *p)
{
	struct ibv_cq *cq;
	void *ctx;

	if (!p[1].revents)
		return;
	pthread_mutex_lock(&rs->lock);
	if (rs->did && rs->cq_armed && !ibv_get_cq_event(rs->did->recv_cq_channel, &cq, &ctx)) {
		ibv_ack_cq_events(cq, 1);
		rs->cq_armed = 0;
	}
	pthread_mutex_unlock(&rs->lock);
}

void ds_free(struct rsock *rs)
{
	struct rs_dest *d, *dn;
	struct rdma_cm_id *id = rs->did;
	int i;

	for (d = rs->dests; d; d = dn) {
		dn = d->next;
		if (d->ah)
			ibv_destroy_ah(d->ah);
		free(d);
	}
	for (i = 0; i < rs->dq_len; i++) {
		struct rs_dmsg *m = &rs->dq[(rs->dq_head + i) % rs->dq_cap];

		if (m->slot < 0)
			free(m->data);
	}
	free(rs->dq);
	if (id) {
		if (id->qp)
			rdma_destroy_qp(id);
		if (rs->dmr)
			ibv_dereg_mr(rs->dmr);
		rs_release_id(id);
	}
	free(rs->dbuf);
	if (rs->udp >= 0)
		close(rs->udp);
}
