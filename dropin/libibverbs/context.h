/* context.h: softroce's device, context and verbs objects, shared by the
 * files that implement verbs on them. Every object is rdma-core's own public
 * struct (programs read its fields: cq->cqe, qp->qp_num, mr->lkey, ...), first
 * in a wrapper that adds what the library needs; the daemon's handle lives in
 * the struct's own handle field. */
#ifndef SOFTROCE_CONTEXT_H
#define SOFTROCE_CONTEXT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "proto.h"

struct sr_device {
	struct ibv_device dev;  /* first: programs see only this */
	uint32_t index;         /* the daemon's device number */
	uint8_t node_guid[8];
};

/* An object the daemon may name in an event: kind is enum sr_elem_kind. */
struct sr_obj {
	uint32_t kind, handle;
	void *ptr;
};

struct sr_context {
	struct verbs_context vctx; /* first: ibv_context is its last member */
	uint32_t index;
	pthread_mutex_t lock;      /* one call at a time on cmd_fd */
	int dead;                  /* a call found the daemon gone (EPIPE) */
	int fatal_reported;        /* IBV_EVENT_DEVICE_FATAL handed out */
	pthread_mutex_t objs_lock; /* objs: handle -> CQ, QP, SRQ for events */
	struct sr_obj *objs;
	int nobjs, capobjs;
	struct srl_chan *chans;    /* under lock: woken when the daemon dies */
	int64_t checked_ns;        /* when sr_ctx_alive last looked (racy: a hint) */
	int doorbell;              /* the daemon's eventfd for the rings (wq.c), or -1 */
};

/* srl_chan: a completion channel; fd is the daemon's eventfd. next links
 * the context's channels, so that a dead daemon can wake their waiters. */
struct srl_chan {
	struct ibv_comp_channel ch;
	uint32_t handle;
	struct srl_chan *next;
};

#define SRL_CQ_BATCH 16

/* srl_cq: every CQ is an ibv_cq_ex (an ibv_cq is its prefix), so that
 * ibv_cq_ex_to_cq and the start_poll family work on any of them. ring is
 * the daemon's shared ring (struct sr_cq_ring), entries long, of which
 * cons have been consumed. cache holds completions taken from the ring and
 * not yet consumed: those a modify to RESET of another QP drained while
 * removing its own (sr_cq_clean), and those a resize moved out of the old
 * ring. Both pollers take from it first, so nothing is lost or
 * reordered. */
struct srl_cq {
	struct ibv_cq_ex cq;
	pthread_mutex_t poll_lock;
	struct sr_cq_ring *ring;
	size_t ring_bytes;
	uint32_t entries, cons;
	struct sr_wc *cache;
	int head, n, cap; /* cap: SRL_CQ_BATCH, or more after sr_cq_clean */
	struct sr_wc cur; /* the completion start_poll/next_poll made current */
};

/* srl_qp: every QP is an ibv_qp_ex (ibv_qp is its first member); wr holds
 * the body of one POST_SEND built by the ibv_wr_* callbacks between
 * wr_start and wr_complete. */
struct srl_qp {
	struct ibv_qp_ex qpx;
	uint32_t max_inline;
	uint32_t max_send_sge;
	/* max_rd_atomic as the last successful modify or query set it: READ
	 * and atomics go through the ring only when it is not 0, since the
	 * QP refuses them otherwise (wq.c send_ok). */
	uint8_t max_rd_atomic;
	/* The rings (wq.c): NULL when the QP posts by calls only. */
	struct sr_wq_ring *sq, *rq;
	void *rings;
	size_t rings_bytes;
	pthread_mutex_t sq_lock, rq_lock;
	uint32_t sq_prod, rq_prod; /* the library's own counts */
	uint32_t max_send_wr, max_recv_wr, max_recv_sge;
	char *wr;            /* struct sr_post, then WRs as proto.h lays them out */
	size_t wrlen, wrcap;
	size_t last;         /* offset of the last struct sr_send_wr, 0 if none */
	uint32_t nwr;
	int wrerr;           /* first error since wr_start */
};

/* srl_srq: an SRQ with its ring (wq.c; NULL: posts are calls). */
struct srl_srq {
	struct ibv_srq srq; /* first: programs see only this */
	struct sr_wq_ring *ring;
	size_t ring_bytes;
	pthread_mutex_t lock;
	uint32_t prod, max_wr, max_sge;
};

static inline struct sr_context *to_sr(struct ibv_context *ctx)
{
	return (struct sr_context *)((char *)ctx - offsetof(struct sr_context, vctx.context));
}

static inline struct sr_device *to_srdev(struct ibv_device *dev)
{
	return (struct sr_device *)dev;
}

static inline struct srl_cq *to_lcq(struct ibv_cq *cq)
{
	return (struct srl_cq *)cq;
}

static inline struct srl_qp *to_lqp(struct ibv_qp *qp)
{
	return (struct srl_qp *)qp;
}

/* sr_ctx_call makes a control call on ctx's socket (sr_call in proto.h,
 * serialized by the context lock); it returns 0 or an errno value. */
int sr_ctx_call(struct ibv_context *ctx, uint32_t op, const void *body, uint32_t len,
		void *out, uint32_t outlen);
int sr_ctx_callx(struct ibv_context *ctx, uint32_t op, const void *body, uint32_t len,
		 const int *fds, int nfds, void *out, uint32_t outlen,
		 uint32_t *got, int *fd_out);
/* sr_ctx_alive: a cheap check, for pollers that make no calls, that ctx's
 * daemon is still there: at most every 100 ms it looks at the socket; a
 * daemon found gone is treated as a call that failed with EPIPE. Returns 0
 * when the daemon is gone. */
int sr_ctx_alive(struct ibv_context *ctx);
/* sr_ctx_gone: err (from a call on ctx) means the daemon is gone. Destroy
 * verbs then free the object locally and succeed, as after the removal of
 * a kernel device: the daemon has dropped everything the context owned. */
int sr_ctx_gone(struct ibv_context *ctx, int err);
/* sr_chan_link and sr_chan_unlink keep ctx's list of channels. */
void sr_chan_link(struct ibv_context *ctx, struct srl_chan *ch);
void sr_chan_unlink(struct ibv_context *ctx, struct srl_chan *ch);
/* sr_ctx_query makes one of the query calls (body struct sr_query). */
int sr_ctx_query(struct ibv_context *ctx, uint32_t op, uint32_t port,
		 uint32_t index, void *out, uint32_t outlen);

/* The object table (device.c): objects an event can name. */
int sr_obj_add(struct ibv_context *ctx, uint32_t kind, uint32_t handle, void *ptr);
void sr_obj_del(struct ibv_context *ctx, uint32_t kind, uint32_t handle);
void *sr_obj_find(struct ibv_context *ctx, uint32_t kind, uint32_t handle);

/* Context ops installed by ibv_open_device. */
int sr_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
int sr_req_notify_cq(struct ibv_cq *cq, int solicited_only);
int sr_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
int sr_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
int sr_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
struct ibv_cq_ex *sr_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr);
struct ibv_qp *sr_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr);
int sr_query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *input,
		       struct ibv_device_attr_ex *attr, size_t attr_size);
/* Memory windows (pd.c). */
struct ibv_mw *sr_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int sr_dealloc_mw(struct ibv_mw *mw);
int sr_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mw_bind);

/* qp.c: one POST_* call (body starts with struct sr_post): 0, or an errno
 * value with *bad the index of the first WR not posted. */
int sr_post_call(struct ibv_context *ctx, uint32_t op, const void *body, size_t len,
		 uint32_t *bad);
int sr_post_recv_list(struct ibv_context *ctx, uint32_t op, uint32_t handle,
		      struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);

/* wq.c: the QP's rings. sr_wq_map maps them from the daemon's fd (closing
 * it); without them (0 returned either way) the QP posts by calls.
 * sr_wq_post_send and sr_wq_post_recv post a whole list through a ring and
 * return 0, or return -1 having written nothing: the list must go by a
 * call, which takes what waits in the rings first. */
void sr_wq_map(struct srl_qp *q, int fd, int on_srq);
void sr_srq_map(struct srl_srq *s, int fd);
void sr_srq_unmap(struct srl_srq *s);
int sr_wq_post_srq_recv(struct srl_srq *s, struct ibv_recv_wr *wr);
void sr_wq_unmap(struct srl_qp *q);
int sr_wq_post_send(struct srl_qp *q, struct ibv_send_wr *wr);
int sr_wq_post_recv(struct srl_qp *q, struct ibv_recv_wr *wr);

/* qp.c: one WR laid out as a POST_SEND or POST_RECV body carries it (its
 * struct and what follows); they return the bytes written. */
size_t sr_send_wr_to_wire(void *dst, const struct ibv_send_wr *w, enum ibv_qp_type t);
size_t sr_recv_wr_to_wire(void *dst, const struct ibv_recv_wr *w);

/* qp.c: the struct sr_bind_mw that follows a BIND_MW WR. */
void sr_bind_to_wire(struct sr_bind_mw *b, struct ibv_mw *mw, uint32_t rkey,
		     const struct ibv_mw_bind_info *info);

/* cq.c: drop the completions of QP qpn from cq, in the library's cache and
 * in the daemon (0 or an errno value). */
int sr_cq_clean(struct ibv_cq *cq, uint32_t qpn);

/* channel.c: take one event from a daemon eventfd (0, or -1 with errno). */
int sr_take_event(int fd);

/* qp_ex.c: fill the ibv_wr_* callbacks of a new QP. */
void sr_qp_ex_init(struct srl_qp *q);

/* Conversions between verbs structs and the wire (ah.c). */
void sr_ah_to_wire(struct sr_ah_attr *w, const struct ibv_ah_attr *a);
void sr_ah_from_wire(struct ibv_ah_attr *a, const struct sr_ah_attr *w);

/* sr_wait_events blocks until *completed reaches reported under mutex: what
 * destroy_{cq,qp,srq} do so that no event for the object is still unacked. */
void sr_wait_events(pthread_mutex_t *mutex, pthread_cond_t *cond,
		    const uint32_t *completed, uint32_t reported);

/* fork.c: MADV_DONTFORK for registered ranges when ibv_fork_init was called. */
int sr_fork_enabled(void);

#endif
