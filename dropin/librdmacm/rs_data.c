/* rs_data.c: a stream rsocket's data path: its buffers, the messages it
 * posts, the completions it takes (credits, data, control), the credit
 * grants it sends, waiting, and rsend/rrecv with their variants.
 *
 * Input from the peer is hostile: a data message longer than half the
 * receive buffer, more messages than receive credits, or an unknown opcode
 * fails the connection (EPROTO) instead of reading outside the buffer or
 * overrunning the message queue. */
#define _GNU_SOURCE
#include <byteswap.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "rs.h"

#define RS_WR_RECV (1ULL << 63)

int rs_init_bufs(struct rsock *rs)
{
	struct ibv_pd *pd = rs->id->pd;
	size_t tlen;

	rs->rmsg = calloc(rs->rq_size + 1, sizeof(*rs->rmsg));
	/* Past the ring's end: RS_CTRL_WQES slots for credit updates that
	 * cannot go inline (see rs_send_credits). */
	rs->sbuf = calloc(1, rs->sbuf_size + RS_CTRL_WQES * sizeof(struct rs_sge));
	rs->rbuf = calloc(1, rs->rbuf_size);
	tlen = sizeof(struct rs_sge) * RS_SGL_SIZE + sizeof(struct rs_iomap) * rs->target_iomap_size;
	rs->target_buf = calloc(1, tlen);
	if (!rs->rmsg || !rs->sbuf || !rs->rbuf || !rs->target_buf)
		return rs_err(ENOMEM);
	rs->smr = ibv_reg_mr(pd, rs->sbuf, rs->sbuf_size + RS_CTRL_WQES * sizeof(struct rs_sge), IBV_ACCESS_LOCAL_WRITE);
	rs->rmr = ibv_reg_mr(pd, rs->rbuf, rs->rbuf_size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	rs->target_mr = ibv_reg_mr(pd, rs->target_buf, tlen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!rs->smr || !rs->rmr || !rs->target_mr)
		return -1;
	rs->target_sgl = rs->target_buf;
	if (rs->target_iomap_size)
		rs->target_iomap = (struct rs_iomap *)((struct rs_sge *)rs->target_buf + RS_SGL_SIZE);
	rs->sbuf_avail = rs->sbuf_size;
	/* The first half is the peer's first target (the connection data
	 * says so); the second is ours to grant. */
	rs->rbuf_free_off = rs->rbuf_size >> 1;
	rs->rbuf_avail = rs->rbuf_size >> 1;
	rs->sqe_avail = rs->sq_size - rs->ctrl_max;
	rs->rseq_comp = rs->rq_size >> 1;
	return 0;
}

/* A receive takes no buffer: it is there for the immediate. */
int rs_post_recv(struct rsock *rs)
{
	struct ibv_recv_wr wr = { .wr_id = RS_WR_RECV }, *bad;
	int err = ibv_post_recv(rs->id->qp, &wr, &bad);

	return err ? rs_err(err) : 0;
}

/* rs_post_write posts an RDMA WRITE (WITH IMMEDIATE msg when imm); wr_id
 * keeps msg, which says at completion what to give back. */
int rs_post_write(struct rsock *rs, struct ibv_sge *sgl, int nsge, uint32_t msg, int imm, int flags,
		  uint64_t addr, uint32_t rkey)
{
	struct ibv_send_wr wr, *bad;
	int err;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = msg;
	wr.sg_list = sgl;
	wr.num_sge = nsge;
	wr.opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
	wr.send_flags = flags;
	wr.imm_data = htobe32(msg);
	wr.wr.rdma.remote_addr = addr;
	wr.wr.rdma.rkey = rkey;
	err = ibv_post_send(rs->id->qp, &wr, &bad);
	return err ? rs_err(err) : 0;
}

/* A control message is a zero-length write whose immediate is all of it. */
int rs_post_msg(struct rsock *rs, uint32_t msg)
{
	return rs_post_write(rs, NULL, 0, msg, 1, 0, 0, 0);
}

/* rs_post_data posts one message of len bytes from buf: inline when it
 * fits, else copied into the send ring (two pieces across its end). */
static int rs_post_data(struct rsock *rs, const void *buf, uint32_t len, uint32_t msg, int imm, uint64_t addr,
			uint32_t rkey)
{
	struct ibv_sge sge[2];
	uint32_t first;

	if (len <= rs->sq_inline) {
		sge[0].addr = (uintptr_t)buf;
		sge[0].length = len;
		sge[0].lkey = 0;
		return rs_post_write(rs, sge, 1, msg, imm, IBV_SEND_INLINE, addr, rkey);
	}
	first = rs->sbuf_size - rs->sbuf_head;
	if (first > len)
		first = len;
	memcpy(rs->sbuf + rs->sbuf_head, buf, first);
	sge[0].addr = (uintptr_t)rs->sbuf + rs->sbuf_head;
	sge[0].length = first;
	sge[0].lkey = rs->smr->lkey;
	if (first < len) {
		memcpy(rs->sbuf, (const uint8_t *)buf + first, len - first);
		sge[1].addr = (uintptr_t)rs->sbuf;
		sge[1].length = len - first;
		sge[1].lkey = rs->smr->lkey;
	}
	rs->sbuf_head = (rs->sbuf_head + len) % rs->sbuf_size;
	return rs_post_write(rs, sge, first < len ? 2 : 1, msg, imm, 0, addr, rkey);
}

/* rs_stage_send sends len bytes (already cut to what the peer and the ring
 * take) as a data message into the current target (direct: a plain write
 * to addr/rkey, an iomap's). The caller holds rs->lock. */
ssize_t rs_stage_send(struct rsock *rs, const void *buf, uint32_t len, int direct, uint64_t addr, uint32_t rkey,
		      uint32_t msg)
{
	volatile struct rs_sge *t = &rs->target_sgl[rs->target_sge];

	rs->sqe_avail--;
	rs->sbuf_avail -= len;
	if (direct)
		return rs_post_data(rs, buf, len, RS_MSG(RS_OP_WRITE, len), 0, addr, rkey);
	if (msg == RS_MSG(RS_OP_DATA, len)) {
		/* Move our copy of the target before the peer can rewrite it. */
		addr = t->addr;
		rkey = t->key;
		t->addr += len;
		t->length -= len;
		if (!t->length)
			rs->target_sge = (rs->target_sge + 1) % RS_SGL_SIZE;
	}
	rs->sseq_no++;
	return rs_post_data(rs, buf, len, msg, 1, addr, rkey);
}

/* rs_send_credits grants credits up to rseq_no + rq_size and, when half
 * the receive buffer is free, writes it into the peer's next target. */
static void rs_send_credits(struct rsock *rs)
{
	struct rs_sge sge;
	struct ibv_sge isge;
	uint32_t msg = RS_MSG(RS_OP_SGL, (uint16_t)(rs->rseq_no + rs->rq_size));
	uint32_t half = rs->rbuf_size >> 1;

	rs->ctrl_seqno++;
	rs->rseq_comp = rs->rseq_no + (rs->rq_size >> 1);
	if (rs->rbuf_avail < half) {
		rs_post_msg(rs, msg);
		return;
	}
	sge.addr = (uintptr_t)rs->rbuf + rs->rbuf_free_off;
	sge.key = rs->rmr->rkey;
	sge.length = half;
	if (rs->swap) {
		sge.addr = bswap_64(sge.addr);
		sge.key = bswap_32(sge.key);
		sge.length = bswap_32(sge.length);
	}
	if (rs->sq_inline >= sizeof(sge)) {
		isge.addr = (uintptr_t)&sge;
		isge.length = sizeof(sge);
		isge.lkey = 0;
		rs_post_write(rs, &isge, 1, msg, 1, IBV_SEND_INLINE,
			      rs->remote_sgl.addr + rs->remote_sge * sizeof(struct rs_sge), rs->remote_sgl.key);
	} else {
		/* No inline: the ring may be full of data, so control messages
		 * have slots of their own past its end (see rs_init_bufs). */
		memcpy(rs->sbuf + rs->sbuf_size + sizeof(sge) * (rs->ctrl_seqno % RS_CTRL_WQES), &sge, sizeof(sge));
		isge.addr = (uintptr_t)rs->sbuf + rs->sbuf_size + sizeof(sge) * (rs->ctrl_seqno % RS_CTRL_WQES);
		isge.length = sizeof(sge);
		isge.lkey = rs->smr->lkey;
		rs_post_write(rs, &isge, 1, msg, 1, 0,
			      rs->remote_sgl.addr + rs->remote_sge * sizeof(struct rs_sge), rs->remote_sgl.key);
	}
	rs->rbuf_avail -= half;
	rs->rbuf_free_off = (rs->rbuf_free_off + half) % rs->rbuf_size;
	rs->remote_sge = (rs->remote_sge + 1) % rs->remote_sgl.length;
}

int rs_ctrl_avail(struct rsock *rs)
{
	return rs->ctrl_seqno != rs->ctrl_max;
}

void rs_update_credits(struct rsock *rs)
{
	if ((rs->rbuf_avail >= (rs->rbuf_size >> 1) || (int16_t)(rs->rseq_no - rs->rseq_comp) >= 0) &&
	    rs_ctrl_avail(rs) && (rs->state & RS_CONNECTED))
		rs_send_credits(rs);
}

static void rs_fail(struct rsock *rs, int err)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	if (!(rs->state & RS_CONNECTED))
		return;
	rs->state = RS_ERROR;
	rs->err = err;
	ibv_modify_qp(rs->id->qp, &a, IBV_QP_STATE);
}

static void rs_recv_msg(struct rsock *rs, uint32_t msg)
{
	uint32_t data = RS_MSG_DATA(msg);
	int next;

	switch (RS_MSG_OP(msg)) {
	case RS_OP_DATA:
		next = (rs->rmsg_tail + 1) % (rs->rq_size + 1);
		if (data > (rs->rbuf_size >> 1) || next == rs->rmsg_head) {
			rs_fail(rs, EPROTO);
			return;
		}
		if (!data)
			return;
		rs->rmsg[rs->rmsg_tail].op = RS_OP_DATA;
		rs->rmsg[rs->rmsg_tail].len = data;
		rs->rmsg_tail = next;
		break;
	case RS_OP_SGL:
		rs->sseq_comp = (uint16_t)data;
		break;
	case RS_OP_IOMAP_SGL:
		break; /* the peer wrote an entry of our target iomap */
	case RS_OP_CTRL:
		if (data == RS_CTRL_DISCONNECT) {
			if (rs->state & RS_CONNECTED)
				rs->state = RS_DISCONNECTED;
		} else if (data == RS_CTRL_SHUTDOWN) {
			if (rs->state & RS_WRITABLE)
				rs->state &= ~RS_READABLE;
			else if (rs->state & RS_CONNECTED)
				rs->state = RS_DISCONNECTED;
		}
		break;
	default:
		rs_fail(rs, EPROTO);
	}
}

static void rs_send_done(struct rsock *rs, struct ibv_wc *wc)
{
	uint32_t msg = (uint32_t)wc->wr_id;

	switch (RS_MSG_OP(msg)) {
	case RS_OP_SGL:
	case RS_OP_CTRL:
		rs->ctrl_max++;
		break;
	case RS_OP_IOMAP_SGL:
		rs->sqe_avail++;
		rs->sbuf_avail += sizeof(struct rs_iomap);
		break;
	default:
		rs->sqe_avail++;
		rs->sbuf_avail += RS_MSG_DATA(msg);
		break;
	}
	if (wc->status != IBV_WC_SUCCESS && (rs->state & RS_CONNECTED)) {
		rs->state = RS_ERROR;
		rs->err = wc->status == IBV_WC_RETRY_EXC_ERR ? ETIMEDOUT : ECONNRESET;
	}
}

/* rs_poll_cq takes every completion and posts back the receives the
 * immediates used. The caller holds rs->lock. */
int rs_poll_cq(struct rsock *rs)
{
	struct ibv_wc wc[16];
	int n, i, used = 0, ret = 0;

	while ((n = ibv_poll_cq(rs->id->recv_cq, 16, wc)) > 0) {
		for (i = 0; i < n; i++) {
			if (!(wc[i].wr_id & RS_WR_RECV)) {
				rs_send_done(rs, &wc[i]);
				continue;
			}
			if (wc[i].status != IBV_WC_SUCCESS)
				continue;
			used++;
			if (wc[i].wc_flags & IBV_WC_WITH_IMM)
				rs_recv_msg(rs, be32toh(wc[i].imm_data));
			else
				rs_fail(rs, EPROTO);
		}
	}
	if (rs->state & RS_CONNECTED) {
		while (!ret && used--)
			ret = rs_post_recv(rs);
		if (ret) {
			rs->state = RS_ERROR;
			rs->err = errno;
		}
	}
	return ret;
}

/* rs_take_cq_event takes the event the CQ's channel holds, acking them in
 * batches; the CQ is then unarmed. The caller holds wait_lock. */
void rs_take_cq_event(struct rsock *rs)
{
	struct ibv_cq *cq;
	void *ctx;

	if (ibv_get_cq_event(rs->id->recv_cq_channel, &cq, &ctx))
		return;
	if (++rs->unacked >= rs->sq_size + rs->rq_size) {
		ibv_ack_cq_events(rs->id->recv_cq, rs->unacked);
		rs->unacked = 0;
	}
	rs->cq_armed = 0;
}

/* rs_get_cq_event blocks until the CQ's channel or the rdma_cm channel
 * says something. The caller holds wait_lock, not lock. */
int rs_get_cq_event(struct rsock *rs)
{
	struct pollfd p[2];

	if (!rs->cq_armed)
		return 0;
	p[0].fd = rs->id->recv_cq_channel->fd;
	p[0].events = POLLIN;
	p[1].fd = rs->id->channel->fd;
	p[1].events = POLLIN;
	while (poll(p, 2, -1) < 0)
		if (errno != EINTR)
			return -1;
	if (p[1].revents)
		rs_cm_events(rs);
	if (p[0].revents)
		rs_take_cq_event(rs);
	return 0;
}

/* rs_process takes completions until ready says so: at once (nonblock:
 * EWOULDBLOCK) or arming the CQ and blocking on its channel. Two threads
 * (a sender waiting for credits, a receiver for data) both make progress:
 * whoever waits holds wait_lock; the other re-polls when it gets it. */
int rs_process(struct rsock *rs, int nonblock, int (*ready)(struct rsock *rs))
{
	int ret;

	pthread_mutex_lock(&rs->lock);
	for (;;) {
		rs_update_credits(rs);
		ret = rs_poll_cq(rs);
		if (ready(rs)) {
			ret = 0;
			break;
		}
		if (ret)
			break;
		if (nonblock) {
			ret = rs_err(EWOULDBLOCK);
			break;
		}
		if (!rs->cq_armed) {
			ibv_req_notify_cq(rs->id->recv_cq, 0);
			rs->cq_armed = 1;
			continue;
		}
		rs_update_credits(rs);
		pthread_mutex_lock(&rs->wait_lock);
		pthread_mutex_unlock(&rs->lock);
		ret = rs_get_cq_event(rs);
		pthread_mutex_unlock(&rs->wait_lock);
		pthread_mutex_lock(&rs->lock);
		if (ret)
			break;
	}
	rs_update_credits(rs);
	pthread_mutex_unlock(&rs->lock);
	return ret;
}

/* rs_wait: rs_process, busy-polling a little before blocking. */
int rs_wait(struct rsock *rs, int nonblock, int (*ready)(struct rsock *rs))
{
	uint64_t start = 0;
	int ret;

	for (;;) {
		ret = rs_process(rs, 1, ready);
		if (!ret || errno != EWOULDBLOCK)
			return ret;
		if (nonblock) {
			rs_cm_events_now_and_then(rs);
			return rs_process(rs, 1, ready);
		}
		if (!start)
			start = rs_now_us();
		else if (rs_now_us() - start > rs_polling_us)
			break;
	}
	return rs_process(rs, 0, ready);
}

int rs_can_send(struct rsock *rs)
{
	return rs->sqe_avail && rs->sbuf_avail >= RS_SNDLOWAT && rs->sseq_no != rs->sseq_comp &&
	       rs->target_sgl[rs->target_sge].length != 0;
}

int rs_conn_can_send(struct rsock *rs)
{
	return rs_can_send(rs) || !(rs->state & RS_WRITABLE);
}

int rs_conn_can_send_ctrl(struct rsock *rs)
{
	return rs_ctrl_avail(rs) || !(rs->state & RS_CONNECTED);
}

int rs_have_rdata(struct rsock *rs)
{
	return rs->rmsg_head != rs->rmsg_tail;
}

int rs_conn_have_rdata(struct rsock *rs)
{
	return rs_have_rdata(rs) || !(rs->state & RS_READABLE);
}

int rs_all_sends_done(struct rsock *rs)
{
	return (int)(rs->ctrl_max - rs->ctrl_seqno) + rs->sqe_avail == rs->sq_size || !(rs->state & RS_CONNECTED);
}

int rs_nonblocking(struct rsock *rs, int flags)
{
	return (rs->fs_flags & O_NONBLOCK) || (flags & MSG_DONTWAIT);
}

/* rs_connect_first: a call on an rsocket still connecting carries the
 * connection on; EAGAIN while it is under way, as librdmacm. */
static int rs_connect_first(struct rsock *rs)
{
	if (!(rs->state & RS_OPENING))
		return 0;
	if (rs_do_connect(rs)) {
		if (errno == EINPROGRESS)
			errno = EAGAIN;
		return -1;
	}
	return 0;
}

/* rs_copy_out copies len bytes from the receive ring at off. */
static void rs_copy_out(struct rsock *rs, uint8_t *dst, uint32_t off, uint32_t len)
{
	uint32_t first = rs->rbuf_size - off;

	if (first > len)
		first = len;
	memcpy(dst, rs->rbuf + off, first);
	if (first < len)
		memcpy(dst + first, rs->rbuf, len - first);
}

/* rs_read takes up to len queued bytes (peek: leaves them). Holds lock. */
static size_t rs_read(struct rsock *rs, uint8_t *buf, size_t len, int peek)
{
	size_t done = 0;
	int head = rs->rmsg_head;
	uint32_t off = rs->rbuf_off, take;

	while (done < len && head != rs->rmsg_tail) {
		struct rs_rmsg *m = &rs->rmsg[head];

		take = m->len;
		if (take > len - done)
			take = len - done;
		rs_copy_out(rs, buf + done, off, take);
		off = (off + take) % rs->rbuf_size;
		done += take;
		if (peek) {
			if (take == m->len)
				head = (head + 1) % (rs->rq_size + 1);
			continue;
		}
		rs->rbuf_avail += take;
		if (take == m->len) {
			rs->rseq_no++;
			head = (head + 1) % (rs->rq_size + 1);
		} else {
			m->len -= take;
		}
	}
	if (!peek) {
		rs->rmsg_head = head;
		rs->rbuf_off = off;
	}
	return done;
}

ssize_t rrecv(int socket, void *buf, size_t len, int flags)
{
	struct rsock *rs = rs_get(socket);
	size_t done = 0;
	int ret = 0;

	if (!rs)
		return rs_err(EBADF);
	if (rs->type == SOCK_DGRAM)
		return ds_recvfrom(rs, buf, len, flags, NULL, NULL);
	if (rs_connect_first(rs))
		return -1;
	if (rs->state == RS_LISTENING || rs->state == RS_INIT || rs->state == RS_BOUND)
		return rs_err(ENOTCONN);
	pthread_mutex_lock(&rs->rlock);
	do {
		if (!rs_have_rdata(rs)) {
			ret = rs_wait(rs, rs_nonblocking(rs, flags), rs_conn_have_rdata);
			if (ret)
				break;
		}
		pthread_mutex_lock(&rs->lock);
		if (rs->state & RS_ERROR) {
			/* A failed connection delivers nothing more: what a peer
			 * that broke the protocol queued is not data. */
			pthread_mutex_unlock(&rs->lock);
			ret = rs_err(rs->err ? rs->err : ECONNRESET);
			break;
		}
		if (flags & MSG_PEEK) {
			done = rs_read(rs, buf, len, 1);
			pthread_mutex_unlock(&rs->lock);
			break;
		}
		done += rs_read(rs, (uint8_t *)buf + done, len - done, 0);
		rs_update_credits(rs);
		pthread_mutex_unlock(&rs->lock);
	} while (done < len && (flags & MSG_WAITALL) && (rs->state & RS_READABLE));
	pthread_mutex_unlock(&rs->rlock);
	return (ret && !done) ? ret : (ssize_t)done;
}

ssize_t rrecvfrom(int socket, void *buf, size_t len, int flags, struct sockaddr *src_addr, socklen_t *addrlen)
{
	struct rsock *rs = rs_get(socket);
	ssize_t ret;

	if (rs && rs->type == SOCK_DGRAM)
		return ds_recvfrom(rs, buf, len, flags, src_addr, addrlen);
	ret = rrecv(socket, buf, len, flags);

	if (ret > 0 && src_addr && addrlen)
		rgetpeername(socket, src_addr, addrlen);
	return ret;
}

/* rs_iov moves the vectors in order as one stream (recv: rrecv, else
 * rsend), stopping at the first short one; a receive blocks at most for
 * its first byte. */
static ssize_t rs_iov(int socket, const struct iovec *iov, int iovcnt, int flags, int recv)
{
	ssize_t total = 0, n;
	int i;

	for (i = 0; i < iovcnt; i++) {
		if (!iov[i].iov_len)
			continue;
		if (recv)
			n = rrecv(socket, iov[i].iov_base, iov[i].iov_len, total ? flags | MSG_DONTWAIT : flags);
		else
			n = rsend(socket, iov[i].iov_base, iov[i].iov_len, flags);
		if (n < 0)
			return total ? total : n;
		total += n;
		if ((size_t)n < iov[i].iov_len)
			break;
	}
	return total;
}

ssize_t rrecvmsg(int socket, struct msghdr *msg, int flags)
{
	if (msg->msg_control && msg->msg_controllen)
		return rs_err(ENOTSUP);
	msg->msg_flags = 0;
	return rs_iov(socket, msg->msg_iov, (int)msg->msg_iovlen, flags, 1);
}

ssize_t rread(int socket, void *buf, size_t count)
{
	return rrecv(socket, buf, count, 0);
}

ssize_t rreadv(int socket, const struct iovec *iov, int iovcnt)
{
	return rs_iov(socket, iov, iovcnt, 0, 1);
}

/* rs_send_some sends from buf: each message up to RS_FIRST_XFER doubling
 * to RS_MAX_XFER, cut to the ring's room and the peer's target. */
static ssize_t rs_send_some(struct rsock *rs, const uint8_t *buf, size_t len, int flags)
{
	uint32_t olen = RS_FIRST_XFER, xfer;
	size_t left = len;
	int ret = 0;

	while (left) {
		if (!rs_can_send(rs)) {
			ret = rs_wait(rs, rs_nonblocking(rs, flags), rs_conn_can_send);
			if (ret)
				break;
			if (!(rs->state & RS_WRITABLE)) {
				/* We shut writing down: EPIPE; the peer went: ECONNRESET. */
				ret = rs_err(rs->state & RS_CONNECTED ? EPIPE : rs->err ? rs->err : ECONNRESET);
				break;
			}
		}
		pthread_mutex_lock(&rs->lock);
		if (!(rs->state & RS_WRITABLE) || !rs_can_send(rs)) {
			pthread_mutex_unlock(&rs->lock);
			continue;
		}
		if (olen < left) {
			xfer = olen;
			if (olen < RS_MAX_XFER)
				olen <<= 1;
		} else {
			xfer = left;
		}
		if (xfer > rs->sbuf_avail)
			xfer = rs->sbuf_avail;
		if (xfer > rs->target_sgl[rs->target_sge].length)
			xfer = rs->target_sgl[rs->target_sge].length;
		ret = rs_stage_send(rs, buf, xfer, 0, 0, 0, RS_MSG(RS_OP_DATA, xfer));
		pthread_mutex_unlock(&rs->lock);
		if (ret)
			break;
		buf += xfer;
		left -= xfer;
	}
	return (ret && left == len) ? ret : (ssize_t)(len - left);
}

ssize_t rsend(int socket, const void *buf, size_t len, int flags)
{
	struct rsock *rs = rs_get(socket);
	ssize_t ret;

	if (!rs)
		return rs_err(EBADF);
	if (rs->type == SOCK_DGRAM)
		return ds_sendto(rs, buf, len, flags, NULL, 0);
	if (rs_connect_first(rs))
		return -1;
	if (!(rs->state & (RS_CONNECTED | RS_DISCONNECTED | RS_ERROR)))
		return rs_err(ENOTCONN);
	pthread_mutex_lock(&rs->slock);
	ret = rs->iomap_pending ? rs_send_iomaps(rs, flags) : 0;
	if (!ret)
		ret = rs_send_some(rs, buf, len, flags);
	pthread_mutex_unlock(&rs->slock);
	return ret;
}

ssize_t rsendto(int socket, const void *buf, size_t len, int flags, const struct sockaddr *dest_addr,
		socklen_t addrlen)
{
	struct rsock *rs = rs_get(socket);

	if (rs && rs->type == SOCK_DGRAM)
		return ds_sendto(rs, buf, len, flags, dest_addr, addrlen);
	return rsend(socket, buf, len, flags);
}

ssize_t rsendmsg(int socket, const struct msghdr *msg, int flags)
{
	if (msg->msg_control && msg->msg_controllen)
		return rs_err(ENOTSUP);
	return rs_iov(socket, msg->msg_iov, (int)msg->msg_iovlen, flags, 0);
}

ssize_t rwrite(int socket, const void *buf, size_t count)
{
	return rsend(socket, buf, count, 0);
}

ssize_t rwritev(int socket, const struct iovec *iov, int iovcnt)
{
	return rs_iov(socket, iov, iovcnt, 0, 0);
}
