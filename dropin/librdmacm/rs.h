/* rs.h: the drop-in's rsockets, private state. (A datagram rsocket is a
 * UDP socket and a UD QP: rs_dgram.c.) A stream rsocket is an RC
 * QP connected through rdma_cm, speaking librdmacm's rsocket protocol
 * (rdma-core's librdmacm/docs/rsocket) so that it talks to Debian's
 * librdmacm on kernel rxe or a real RNIC:
 *
 *  - each side owns a receive buffer in two halves; it tells the peer where
 *    to write by RDMA-writing an rs_sge into the peer's "target SGL" (two
 *    entries, advertised in the connection's private data);
 *  - data goes as RDMA WRITE WITH IMMEDIATE into the current target, the
 *    immediate saying "data, N bytes"; control messages are zero-length
 *    writes with immediates (credit updates, shutdown, disconnect);
 *  - every immediate consumes a receive WQE, so the sender also needs
 *    credits: the receiver grants them as an absolute message count.
 *
 * The index a program sees is the fd of the rsocket's own rdma_cm event
 * channel, as in librdmacm, so it never collides with the program's fds. */
#ifndef SOFTROCE_RS_H
#define SOFTROCE_RS_H

#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

#include "cma.h"

/* The wire. */
#define RS_VERSION 1
#define RS_CONN_FLAG_NET 1   /* the sender is big-endian: its SGL writes are too */
#define RS_CONN_FLAG_IOMAP 2 /* target_iomap_size is meaningful */
#define RS_SGL_SIZE 2	     /* entries in a target SGL */

enum rs_op {
	RS_OP_DATA = 0,
	RS_OP_WRITE = 2, /* a direct (iomap) write: local bookkeeping only */
	RS_OP_SGL = 4,	 /* credits granted, target SGL maybe updated */
	RS_OP_IOMAP_SGL = 6,
	RS_OP_CTRL = 7,
};

enum rs_ctrl {
	RS_CTRL_DISCONNECT = 0,
	RS_CTRL_KEEPALIVE = 1,
	RS_CTRL_SHUTDOWN = 2,
};

#define RS_MSG(op, data) (((uint32_t)(op) << 29) | ((uint32_t)(data) & 0x1fffffff))
#define RS_MSG_OP(m) ((uint32_t)(m) >> 29)
#define RS_MSG_DATA(m) ((uint32_t)(m) & 0x1fffffff)

/* An advertised buffer, in its owner's byte order on the wire when written
 * into a target SGL, big-endian in the connection data. */
struct rs_sge {
	uint64_t addr;
	uint32_t key;
	uint32_t length;
};

struct rs_iomap {
	uint64_t offset;
	struct rs_sge sge;
};

/* The private data of the REQ and the REP: 40 bytes, big-endian. */
struct rs_conn_data {
	uint8_t version;
	uint8_t flags;
	uint16_t credits;
	uint8_t reserved[3];
	uint8_t target_iomap_size; /* rs_scale_to_value-encoded */
	struct rs_sge target_sgl;  /* where to write our SGL updates */
	struct rs_sge data_buf;	   /* the first half of the receive buffer */
} __attribute__((packed));

/* Defaults, librdmacm's (and /etc/rdma/rsocket/ may change them). */
#define RS_DEF_SQSIZE 384
#define RS_DEF_RQSIZE 384
#define RS_DEF_INLINE 64
#define RS_DEF_MEM (1 << 17)
#define RS_QP_MIN_SIZE 16
#define RS_QP_MAX_SIZE 0xFFFE
#define RS_CTRL_WQES 4	       /* send WQEs kept for control messages */
#define RS_SNDLOWAT 2048       /* the least send space worth a message */
#define RS_FIRST_XFER 2048     /* a send's first message; doubles per message */
#define RS_MAX_XFER 65536      /* ... up to this */
#define RS_POLL_US 10	       /* busy-poll before blocking */
#define RS_WAKE_MS 500	       /* a blocked rpoll re-checks at least this often */
#define RS_RESOLVE_MS 2000

enum rs_state {
	RS_INIT = 0,
	RS_BOUND = 0x1,
	RS_LISTENING = 0x2,
	RS_OPENING = 0x4,
	RS_RESOLVING_ADDR = RS_OPENING | 0x10,
	RS_RESOLVING_ROUTE = RS_OPENING | 0x20,
	RS_CONNECTING = RS_OPENING | 0x40,
	RS_ACCEPTING = RS_OPENING | 0x80,
	RS_CONNECTED = 0x100,
	RS_WRITABLE = 0x200,
	RS_READABLE = 0x400,
	RS_CONNECT_RDWR = RS_CONNECTED | RS_WRITABLE | RS_READABLE,
	RS_CONNECT_ERROR = 0x800,
	RS_DISCONNECTED = 0x1000,
	RS_ERROR = 0x2000,
};

/* A received data message waiting for rrecv. */
struct rs_rmsg {
	uint32_t op;
	uint32_t len;
};

/* A buffer the program iomapped; index >= 0: advertised to the peer. */
struct rs_iomr {
	struct ibv_mr *mr;
	uint64_t offset;
	int index;
	int queued; /* not yet written to the peer */
	struct rs_iomr *next;
};

/* Datagram rsockets (rs_dgram.c). */
struct rs_dest { /* a peer, by its UDP address */
	struct sockaddr_storage addr;
	socklen_t addrlen;
	struct sockaddr_storage src; /* where our UDP datagrams to it come from */
	struct ibv_ah *ah; /* once its QPN is known */
	uint32_t qpn;
	struct rs_dest *next;
};

/* A datagram waiting for rrecvfrom: in the receive slot it came in (which
 * is posted again once the program takes it), or, when it came over UDP
 * before the peer's QP was known, in memory of its own (slot < 0). */
struct rs_dmsg {
	uint8_t *data;
	int slot;
	uint32_t len;
	struct sockaddr_storage src;
	socklen_t srclen;
};

struct rsock {
	int type; /* SOCK_STREAM or SOCK_DGRAM */
	int index;
	int state;
	int err; /* SO_ERROR */
	int fs_flags, fd_flags;
	struct rdma_cm_id *id;

	/* Locks, outermost first: slock (one sender), rlock (one receiver),
	 * lock (the counters, the CQ, the QP's send queue), wait_lock (one
	 * thread blocks on the completion channel for all). */
	pthread_mutex_t slock, rlock, lock, wait_lock;

	/* Sizes, settable until the connection starts. */
	uint32_t sbuf_size, rbuf_size;
	uint16_t sq_size, rq_size, sq_inline;
	uint16_t target_iomap_size;

	/* Options. */
	uint64_t so_opts, tcp_opts, ipv6_opts;
	int tos;
	int keepalive;
	unsigned keepalive_time; /* seconds */
	uint64_t keepalive_due;	 /* seconds, CLOCK_MONOTONIC */
	void *route;
	size_t route_len;

	int swap; /* the peer's byte order differs from ours */

	/* Send side. */
	unsigned ctrl_seqno, ctrl_max; /* control messages posted, allowed */
	uint16_t sseq_no, sseq_comp;   /* data messages sent; credit limit */
	int sqe_avail;
	uint8_t *sbuf;
	struct ibv_mr *smr;
	uint32_t sbuf_avail;
	uint32_t sbuf_head; /* next free byte in the ring */
	int target_sge;
	void *target_buf; /* target SGL then target iomap, the peer writes them */
	struct ibv_mr *target_mr;
	volatile struct rs_sge *target_sgl;
	volatile struct rs_iomap *target_iomap;

	/* Receive side. */
	uint16_t rseq_no, rseq_comp; /* data messages consumed; next grant at */
	uint8_t *rbuf;
	struct ibv_mr *rmr;
	uint32_t rbuf_avail;	/* free and not advertised */
	uint32_t rbuf_free_off; /* where the next advertised half starts */
	uint32_t rbuf_off;	/* next byte to read */
	struct rs_rmsg *rmsg;	/* rq_size + 1 entries */
	int rmsg_head, rmsg_tail;

	/* The peer's buffers for our SGL and iomap updates. */
	struct rs_sge remote_sgl, remote_iomap;
	int remote_sge;

	/* iomap: ours advertised to the peer (by index), and local ones. */
	struct rs_iomr *iomaps;
	int iomap_pending;

	/* Datagram: a UDP socket finds peers, a UD QP carries the data once
	 * the peer's QPN is known. */
	int udp;
	struct rdma_cm_id *did;
	uint8_t dhdr[24]; /* [0] IP version, from [4] (v4) or [8] (v6) the device's address */
	uint8_t *dbuf; /* sq_size send slots, then rq_size receive slots */
	struct ibv_mr *dmr;
	int dsend_next, dsend_avail;
	struct rs_dest *dests, *conn_dest;
	int ndests;
	struct rs_dmsg *dq; /* a ring of dq_cap */
	int dq_cap, dq_head, dq_len;

	int cq_armed;
	int unacked;	      /* completion events not yet acked */
	uint64_t cm_checked; /* when rs_cm_events last looked, us */
};

/* rsocket.c */
struct rsock *rs_get(int index);
int rs_do_connect(struct rsock *rs);
void rs_cm_events(struct rsock *rs);
void rs_cm_events_now_and_then(struct rsock *rs);
uint64_t rs_now_us(void);
int rs_err(int err); /* errno = err, returns -1 */
int rs_set_fd_nonblock(int fd, int on);
int rs_create_cq(struct rdma_cm_id *id, int cqe);
void rs_release_id(struct rdma_cm_id *id);

/* rs_data.c */
int rs_init_bufs(struct rsock *rs);
int rs_post_recv(struct rsock *rs);
int rs_post_msg(struct rsock *rs, uint32_t msg);
int rs_post_write(struct rsock *rs, struct ibv_sge *sgl, int nsge, uint32_t msg, int imm, int flags,
		  uint64_t addr, uint32_t rkey);
int rs_poll_cq(struct rsock *rs);
void rs_update_credits(struct rsock *rs);
int rs_wait(struct rsock *rs, int nonblock, int (*ready)(struct rsock *rs));
int rs_process(struct rsock *rs, int nonblock, int (*ready)(struct rsock *rs));
int rs_get_cq_event(struct rsock *rs);
void rs_take_cq_event(struct rsock *rs);
int rs_nonblocking(struct rsock *rs, int flags); /* O_NONBLOCK or MSG_DONTWAIT */
int rs_can_send(struct rsock *rs);
int rs_conn_can_send(struct rsock *rs);
int rs_conn_have_rdata(struct rsock *rs);
int rs_have_rdata(struct rsock *rs);
int rs_ctrl_avail(struct rsock *rs);
int rs_all_sends_done(struct rsock *rs);
int rs_conn_can_send_ctrl(struct rsock *rs);
ssize_t rs_stage_send(struct rsock *rs, const void *buf, uint32_t len, int direct,
		      uint64_t addr, uint32_t rkey, uint32_t msg);

/* rs_dgram.c */
int ds_socket(struct rsock *rs, int domain, int type);
int ds_bind(struct rsock *rs, const struct sockaddr *addr, socklen_t len);
int ds_connect(struct rsock *rs, const struct sockaddr *addr, socklen_t len);
ssize_t ds_sendto(struct rsock *rs, const void *buf, size_t len, int flags, const struct sockaddr *to,
		  socklen_t tolen);
ssize_t ds_recvfrom(struct rsock *rs, void *buf, size_t len, int flags, struct sockaddr *src, socklen_t *srclen);
short ds_revents(struct rsock *rs, short events);
void ds_arm(struct rsock *rs, struct pollfd *p);
void ds_take(struct rsock *rs, struct pollfd *p);
void ds_free(struct rsock *rs);

/* rs_iomap.c */
int rs_send_iomaps(struct rsock *rs, int flags);
void rs_free_iomaps(struct rsock *rs);

/* rs_opt.c */
void rs_configure(void);
extern uint16_t rs_def_inline, rs_def_sqsize, rs_def_rqsize, rs_def_iomap_size;
extern uint32_t rs_def_mem, rs_def_wmem, rs_polling_us;
int rs_value_to_scale(int value, int bits);
int rs_scale_to_value(int value, int bits);
void rs_keepalive_stop(struct rsock *rs);

#endif
