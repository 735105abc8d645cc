/* verbs.c: the verbs end to end through the drop-in library, as a program
 * built against the system's headers uses them. Two contexts on one device
 * (one daemon, which loops packets to its own GIDs back) play both ends:
 * RC WRITE, READ, SEND/RECV with immediate (through a completion channel),
 * inline SEND, FETCH_ADD and CMP_SWAP (checked in the target's memory: the
 * daemon works on the program's own pages), the ibv_wr_* API, the extended
 * CQ API, UD through an address handle, an SRQ and its limit event, registering stack memory,
 * ibv_rereg_mr, memory windows of both types, a QP's completions dropped
 * when it goes to RESET, ibv_wr_* lists whose size would wrap, a daemon of
 * another user refused, a context whose daemon is gone (a blocked
 * ibv_get_cq_event wakes, destroys succeed), an answer that breaks the
 * framing, the
 * EOPNOTSUPP answers for what softroce lacks, and fork. Exits 0 when all pass;
 * cmd/softroce runs it against a daemon. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "../proto.h" /* test_misframed plays a daemon */

#define BUF 8192
#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

static int failures;

#define FAILED(...) do {						\
	fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);		\
	fprintf(stderr, __VA_ARGS__);					\
	fprintf(stderr, " (errno %s)\n", strerror(errno));		\
	failures++;							\
} while (0)

#define CHECK(cond, ...) do {						\
	if (!(cond)) {							\
		FAILED(__VA_ARGS__);					\
		return -1;						\
	}								\
} while (0)

/* CHECK_OUT is CHECK for a test that must clean up: it goes to out. */
#define CHECK_OUT(cond, ...) do {					\
	if (!(cond)) {							\
		FAILED(__VA_ARGS__);					\
		goto out;						\
	}								\
} while (0)

/* RUN counts a test that failed without a CHECK (one that cleans up
 * before it returns) as a failure too. */
#define RUN(fn) do {							\
	int _f = failures, _r = (fn);					\
	printf("%-28s %s\n", #fn, _r ? "FAIL" : "ok");			\
	if (_r) {							\
		if (failures == _f)					\
			failures++;					\
		goto out;						\
	}								\
} while (0)

/* One end: a context with its PD, an MR over a malloc'd buffer, a CQ. */
struct end {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	char *buf;
	struct ibv_mr *mr;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_cq_ex *cqx; /* when the CQ was made with ibv_create_cq_ex */
	struct ibv_qp *qp;
	union ibv_gid gid;
	int gid_index;
};

static struct ibv_device *dev;

/* find_gid picks a RoCE v2 GID of port 1, as perftest does. */
static int find_gid(struct end *e)
{
	struct ibv_gid_entry ge;
	int i;

	for (i = 0; i < 16; i++) {
		if (ibv_query_gid_ex(e->ctx, 1, i, &ge, 0))
			continue;
		if (ge.gid_type == IBV_GID_TYPE_ROCE_V2) {
			e->gid = ge.gid;
			e->gid_index = i;
			return 0;
		}
	}
	return -1;
}

static int open_end(struct end *e, int with_channel, int with_cq_ex)
{
	memset(e, 0, sizeof(*e));
	e->ctx = ibv_open_device(dev);
	CHECK(e->ctx, "ibv_open_device");
	CHECK(!find_gid(e), "no RoCE v2 GID on port 1");
	e->pd = ibv_alloc_pd(e->ctx);
	CHECK(e->pd, "ibv_alloc_pd");
	e->buf = malloc(BUF);
	CHECK(e->buf, "malloc");
	memset(e->buf, 0, BUF);
	e->mr = ibv_reg_mr(e->pd, e->buf, BUF, ACCESS);
	CHECK(e->mr, "ibv_reg_mr");
	if (with_channel) {
		e->ch = ibv_create_comp_channel(e->ctx);
		CHECK(e->ch, "ibv_create_comp_channel");
	}
	if (with_cq_ex) {
		struct ibv_cq_init_attr_ex a = {
			.cqe = 64,
			.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM |
				    IBV_WC_EX_WITH_QP_NUM,
		};

		e->cqx = ibv_create_cq_ex(e->ctx, &a);
		CHECK(e->cqx, "ibv_create_cq_ex");
		e->cq = ibv_cq_ex_to_cq(e->cqx);
	} else {
		e->cq = ibv_create_cq(e->ctx, 64, e, e->ch, 0);
		CHECK(e->cq, "ibv_create_cq");
		CHECK(e->cq->cqe >= 64, "cqe %d", e->cq->cqe);
	}
	return 0;
}

static void close_end(struct end *e)
{
	if (e->qp && ibv_destroy_qp(e->qp))
		failures++, fprintf(stderr, "FAIL destroy_qp\n");
	if (e->cq && ibv_destroy_cq(e->cq))
		failures++, fprintf(stderr, "FAIL destroy_cq\n");
	if (e->ch && ibv_destroy_comp_channel(e->ch))
		failures++, fprintf(stderr, "FAIL destroy_comp_channel\n");
	if (e->mr && ibv_dereg_mr(e->mr))
		failures++, fprintf(stderr, "FAIL dereg_mr\n");
	if (e->pd && ibv_dealloc_pd(e->pd))
		failures++, fprintf(stderr, "FAIL dealloc_pd\n");
	if (e->ctx && ibv_close_device(e->ctx))
		failures++, fprintf(stderr, "FAIL close_device\n");
	free(e->buf);
}

static struct ibv_qp *make_qp(struct end *e, enum ibv_qp_type t, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = e->cq,
		.recv_cq = e->cq,
		.srq = srq,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2,
			 .max_recv_sge = 2, .max_inline_data = 64 },
		.qp_type = t,
	};

	return ibv_create_qp(e->pd, &a);
}

/* destroy_pair destroys the QPs a test made (either may be NULL) and
 * returns rc, or -1 if a destroy failed. */
static int destroy_pair(int rc, struct ibv_qp *x, struct ibv_qp *y)
{
	if (x && ibv_destroy_qp(x))
		rc = -1;
	if (y && ibv_destroy_qp(y))
		rc = -1;
	return rc;
}

/* connect_rc takes an RC QP through INIT, RTR and RTS towards remote, with
 * the attributes ibv_rc_pingpong uses. */
static int connect_rc_rd(struct ibv_qp *qp, struct end *local, struct ibv_qp *rqp, struct end *remote,
			 int max_rd_atomic);

static int connect_rc(struct ibv_qp *qp, struct end *local, struct ibv_qp *rqp, struct end *remote)
{
	return connect_rc_rd(qp, local, rqp, remote, 1);
}

/* connect_rc_rd is connect_rc with the QP's max_rd_atomic (0: it may send
 * no READ or atomic; -1: the QP stays in RTR, for the caller to take to
 * RTS with attributes of its own). */
static int connect_rc_rd(struct ibv_qp *qp, struct end *local, struct ibv_qp *rqp, struct end *remote,
			 int max_rd_atomic)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = 1,
		.qp_access_flags = ACCESS,
	};

	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			     IBV_QP_ACCESS_FLAGS), "modify INIT");
	CHECK(qp->state == IBV_QPS_INIT, "state %d after INIT", qp->state);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = rqp->qp_num;
	a.rq_psn = 100;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = remote->gid;
	a.ah_attr.grh.sgid_index = local->gid_index;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			     IBV_QP_MIN_RNR_TIMER), "modify RTR");
	if (max_rd_atomic < 0)
		return 0;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 100;
	a.max_rd_atomic = max_rd_atomic;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
	      "modify RTS");
	return 0;
}

/* wait_wc polls cq until one completion arrives (or about 10 s pass). */
static int wait_wc(struct ibv_cq *cq, struct ibv_wc *wc)
{
	struct timespec ts = { 0, 100000 };
	int i, n;

	for (i = 0; i < 100000; i++) {
		n = ibv_poll_cq(cq, 1, wc);
		if (n < 0)
			return -1;
		if (n == 1)
			return 0;
		nanosleep(&ts, NULL);
	}
	errno = ETIMEDOUT;
	return -1;
}

static int expect_wc(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_opcode op, struct ibv_wc *wc)
{
	CHECK(!wait_wc(cq, wc), "no completion for wr %" PRIu64, wr_id);
	CHECK(wc->status == IBV_WC_SUCCESS, "wr %" PRIu64 " status %s", wc->wr_id,
	      ibv_wc_status_str(wc->status));
	CHECK(wc->wr_id == wr_id, "wr_id %" PRIu64 " want %" PRIu64, wc->wr_id, wr_id);
	CHECK(wc->opcode == op, "opcode %d want %d", wc->opcode, op);
	return 0;
}

static int post1(struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad = NULL;
	int rc = ibv_post_send(qp, wr, &bad);

	if (rc)
		errno = rc;
	return rc;
}

static struct end a, b;

static int test_write(void)
{
	struct ibv_sge sge = { (uintptr_t)a.buf, 32, a.mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { (uintptr_t)b.buf + 64, b.mr->rkey },
	};
	struct ibv_wc wc;

	snprintf(a.buf, 32, "written by RDMA WRITE");
	CHECK(!post1(a.qp, &wr), "post WRITE");
	CHECK(!expect_wc(a.cq, 1, IBV_WC_RDMA_WRITE, &wc), "WRITE completion");
	CHECK(!strcmp(b.buf + 64, "written by RDMA WRITE"), "target holds '%.32s'", b.buf + 64);
	return 0;
}

static int test_read(void)
{
	struct ibv_sge sge = { (uintptr_t)a.buf + 256, 32, a.mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = 2, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { (uintptr_t)b.buf + 512, b.mr->rkey },
	};
	struct ibv_wc wc;

	snprintf(b.buf + 512, 32, "read by RDMA READ");
	CHECK(!post1(a.qp, &wr), "post READ");
	CHECK(!expect_wc(a.cq, 2, IBV_WC_RDMA_READ, &wc), "READ completion");
	CHECK(wc.byte_len == 32, "byte_len %u", wc.byte_len);
	CHECK(!strcmp(a.buf + 256, "read by RDMA READ"), "got '%.32s'", a.buf + 256);
	return 0;
}

/* test_send_imm: B's receive completes through B's extended CQ; A's send
 * completion is awaited through A's completion channel. */
static int test_send_imm(void)
{
	struct ibv_sge rsge = { (uintptr_t)b.buf + 1024, 64, b.mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 3, .sg_list = &rsge, .num_sge = 1 }, *rbad;
	struct ibv_sge sge = { (uintptr_t)a.buf + 1024, 20, a.mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = 4, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
		.send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(0x12345678),
	};
	struct ibv_poll_cq_attr pa = { 0 };
	struct ibv_cq *ev_cq;
	struct ibv_wc wc;
	void *ev_ctx;
	int i, rc;

	CHECK(!ibv_post_recv(b.qp, &rwr, &rbad), "post_recv");
	CHECK(!ibv_req_notify_cq(a.cq, 0), "req_notify_cq");
	memcpy(a.buf + 1024, "send with immediate", 20);
	CHECK(!post1(a.qp, &wr), "post SEND_WITH_IMM");
	CHECK(!ibv_get_cq_event(a.ch, &ev_cq, &ev_ctx), "get_cq_event");
	CHECK(ev_cq == a.cq && ev_ctx == &a, "event for cq %p ctx %p", (void *)ev_cq, ev_ctx);
	ibv_ack_cq_events(ev_cq, 1);
	CHECK(!expect_wc(a.cq, 4, IBV_WC_SEND, &wc), "SEND completion");

	for (i = 0; i < 100000; i++) {
		rc = ibv_start_poll(b.cqx, &pa);
		if (rc != ENOENT)
			break;
		struct timespec ts = { 0, 100000 };
		nanosleep(&ts, NULL);
	}
	CHECK(rc == 0, "start_poll %d", rc);
	CHECK(b.cqx->status == IBV_WC_SUCCESS && b.cqx->wr_id == 3, "recv status %d wr_id %" PRIu64,
	      b.cqx->status, b.cqx->wr_id);
	CHECK(ibv_wc_read_opcode(b.cqx) == IBV_WC_RECV, "opcode %d", ibv_wc_read_opcode(b.cqx));
	CHECK(ibv_wc_read_byte_len(b.cqx) == 20, "byte_len %u", ibv_wc_read_byte_len(b.cqx));
	CHECK(ibv_wc_read_wc_flags(b.cqx) & IBV_WC_WITH_IMM, "no IBV_WC_WITH_IMM");
	CHECK(ntohl(ibv_wc_read_imm_data(b.cqx)) == 0x12345678, "imm %08x",
	      ntohl(ibv_wc_read_imm_data(b.cqx)));
	CHECK(ibv_wc_read_qp_num(b.cqx) == b.qp->qp_num, "qp_num %u", ibv_wc_read_qp_num(b.cqx));
	CHECK(ibv_next_poll(b.cqx) == ENOENT, "a second completion");
	ibv_end_poll(b.cqx);
	CHECK(!strcmp(b.buf + 1024, "send with immediate"), "received '%.64s'", b.buf + 1024);
	return 0;
}

/* test_inline: the payload is gathered from a stack buffer at post time. */
static int test_inline(void)
{
	char msg[32] = "inline payload";
	struct ibv_sge rsge = { (uintptr_t)b.buf + 2048, 64, b.mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 5, .sg_list = &rsge, .num_sge = 1 }, *rbad;
	struct ibv_sge sge = { (uintptr_t)msg, sizeof(msg), 0 };
	struct ibv_send_wr wr = {
		.wr_id = 6, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE,
	};
	struct ibv_wc wc;

	CHECK(!ibv_post_recv(b.qp, &rwr, &rbad), "post_recv");
	CHECK(!post1(a.qp, &wr), "post inline SEND");
	memset(msg, 'x', sizeof(msg)); /* the library copied it already */
	CHECK(!expect_wc(a.cq, 6, IBV_WC_SEND, &wc), "SEND completion");
	CHECK(!expect_wc(b.cq, 5, IBV_WC_RECV, &wc), "RECV completion");
	CHECK(wc.byte_len == 32, "byte_len %u", wc.byte_len);
	CHECK(!strcmp(b.buf + 2048, "inline payload"), "received '%.64s'", b.buf + 2048);
	return 0;
}

static int atomic(enum ibv_wr_opcode op, uint64_t cmp_add, uint64_t swap, uint64_t *old)
{
	uint64_t *local = (uint64_t *)(a.buf + 4096);
	struct ibv_sge sge = { (uintptr_t)local, 8, a.mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = 7, .sg_list = &sge, .num_sge = 1, .opcode = op,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.atomic = { (uintptr_t)b.buf + 4096, cmp_add, swap, b.mr->rkey },
	};
	struct ibv_wc wc;

	*local = 0xdeadbeef;
	CHECK(!post1(a.qp, &wr), "post atomic %d", op);
	CHECK(!expect_wc(a.cq, 7, op == IBV_WR_ATOMIC_FETCH_AND_ADD ? IBV_WC_FETCH_ADD :
			 IBV_WC_COMP_SWAP, &wc), "atomic completion");
	*old = *local;
	return 0;
}

static int test_atomics(void)
{
	volatile uint64_t *target = (uint64_t *)(b.buf + 4096);
	uint64_t old;

	*target = 100;
	CHECK(!atomic(IBV_WR_ATOMIC_FETCH_AND_ADD, 5, 0, &old), "fetch_add");
	CHECK(old == 100, "fetch_add returned %" PRIu64, old);
	CHECK(*target == 105, "target %" PRIu64 " after fetch_add", *target);
	CHECK(!atomic(IBV_WR_ATOMIC_CMP_AND_SWP, 104, 7, &old), "cmp_swp miss");
	CHECK(old == 105 && *target == 105, "cmp_swp miss: old %" PRIu64 " target %" PRIu64,
	      old, *target);
	CHECK(!atomic(IBV_WR_ATOMIC_CMP_AND_SWP, 105, 7, &old), "cmp_swp hit");
	CHECK(old == 105 && *target == 7, "cmp_swp hit: old %" PRIu64 " target %" PRIu64,
	      old, *target);
	return 0;
}

/* test_read_needs_rd_atomic: on a QP whose max_rd_atomic is 0 a READ or an
 * atomic is refused at post time (EINVAL, as by rxe) and the QP stays in
 * RTS: the library keeps them out of the send ring, where the daemon would
 * refuse them by moving the QP to the error state; a WRITE still goes. */
static int test_read_needs_rd_atomic(void)
{
	struct ibv_qp *qa = make_qp(&a, IBV_QPT_RC, NULL), *qb = make_qp(&b, IBV_QPT_RC, NULL);
	struct ibv_sge sge = { (uintptr_t)a.buf + 6144, 8, a.mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = 40, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { (uintptr_t)b.buf + 6144, b.mr->rkey },
	};
	struct ibv_qp_attr qattr = { 0 };
	struct ibv_qp_init_attr ia;
	struct ibv_wc wc;
	int rc = -1;

	CHECK_OUT(qa && qb && !connect_rc_rd(qa, &a, qb, &b, 0) && !connect_rc(qb, &b, qa, &a), "connect");
	CHECK_OUT(post1(qa, &wr) == EINVAL, "READ with max_rd_atomic 0 posted");
	wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	wr.wr.atomic.remote_addr = (uintptr_t)b.buf + 6144;
	wr.wr.atomic.rkey = b.mr->rkey;
	wr.wr.atomic.compare_add = 1;
	CHECK_OUT(post1(qa, &wr) == EINVAL, "FETCH_ADD with max_rd_atomic 0 posted");
	CHECK_OUT(!ibv_query_qp(qa, &qattr, IBV_QP_STATE, &ia) && qattr.qp_state == IBV_QPS_RTS,
		  "the QP left RTS (state %d)", qattr.qp_state);
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.wr.rdma.remote_addr = (uintptr_t)b.buf + 6144;
	wr.wr.rdma.rkey = b.mr->rkey;
	CHECK_OUT(!post1(qa, &wr) && !expect_wc(a.cq, 40, IBV_WC_RDMA_WRITE, &wc), "WRITE after them");
	rc = 0;
out:
	rc = destroy_pair(rc, qa, qb);
	return rc;
}

/* test_wr_api: two WRITEs in one wr_start/wr_complete batch. */
static int test_wr_api(void)
{
	struct ibv_qp_ex *qpx = ibv_qp_to_qp_ex(a.qp);
	struct ibv_wc wc;

	CHECK(qpx, "ibv_qp_to_qp_ex");
	snprintf(a.buf + 3072, 16, "wr api one");
	snprintf(a.buf + 3088, 16, "wr api two");
	ibv_wr_start(qpx);
	qpx->wr_id = 8;
	qpx->wr_flags = 0;
	ibv_wr_rdma_write(qpx, b.mr->rkey, (uintptr_t)b.buf + 3072);
	ibv_wr_set_sge(qpx, a.mr->lkey, (uintptr_t)a.buf + 3072, 16);
	qpx->wr_id = 9;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qpx, b.mr->rkey, (uintptr_t)b.buf + 3088);
	ibv_wr_set_sge(qpx, a.mr->lkey, (uintptr_t)a.buf + 3088, 16);
	CHECK(!ibv_wr_complete(qpx), "wr_complete");
	CHECK(!expect_wc(a.cq, 9, IBV_WC_RDMA_WRITE, &wc), "wr api completion");
	CHECK(!strcmp(b.buf + 3072, "wr api one") && !strcmp(b.buf + 3088, "wr api two"),
	      "target holds '%.16s' '%.16s'", b.buf + 3072, b.buf + 3088);
	ibv_wr_start(qpx);
	ibv_wr_send(qpx);
	ibv_wr_abort(qpx);
	return 0;
}

/* test_wr_overflow: an SGE list longer than the QP allows and inline
 * buffers whose lengths sum past SIZE_MAX fail with EINVAL at wr_complete,
 * without the library reading past the caller's arrays. */
static int test_wr_overflow(void)
{
	struct ibv_qp_ex *qpx = ibv_qp_to_qp_ex(a.qp);
	struct ibv_data_buf bufs[2] = {
		{ a.buf, SIZE_MAX / 2 + 1 }, { a.buf, SIZE_MAX / 2 + 1 },
	};
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr qa;
	struct ibv_sge *sges;
	uint32_t i, n;
	int err;

	CHECK(!ibv_query_qp(a.qp, &qa, IBV_QP_CAP, &ia), "query_qp");
	n = ia.cap.max_send_sge + 1;
	sges = calloc(n, sizeof(*sges));
	CHECK(sges, "calloc");
	for (i = 0; i < n; i++)
		sges[i] = (struct ibv_sge){ (uintptr_t)a.buf, 8, a.mr->lkey };
	ibv_wr_start(qpx);
	qpx->wr_id = 30;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qpx, b.mr->rkey, (uintptr_t)b.buf + 3072);
	ibv_wr_set_sge_list(qpx, n, sges);
	err = ibv_wr_complete(qpx);
	free(sges);
	CHECK(err == EINVAL, "%u SGEs (max_send_sge %u): wr_complete %d", n,
	      ia.cap.max_send_sge, err);
	ibv_wr_start(qpx);
	ibv_wr_rdma_write(qpx, b.mr->rkey, (uintptr_t)b.buf + 3072);
	ibv_wr_set_sge_list(qpx, SIZE_MAX / 8 + 1, NULL); /* the product wraps */
	err = ibv_wr_complete(qpx);
	CHECK(err == EINVAL, "SIZE_MAX / 8 + 1 SGEs: wr_complete %d", err);
	ibv_wr_start(qpx);
	ibv_wr_send(qpx);
	ibv_wr_set_inline_data_list(qpx, 2, bufs); /* the sum wraps to 0 */
	err = ibv_wr_complete(qpx);
	CHECK(err == EINVAL, "inline lengths summing past SIZE_MAX: wr_complete %d", err);
	return 0;
}

static int test_query_qp(void)
{
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr ia;

	CHECK(!ibv_query_qp(a.qp, &qa, IBV_QP_STATE | IBV_QP_CAP, &ia), "query_qp");
	CHECK(qa.qp_state == IBV_QPS_RTS, "state %d", qa.qp_state);
	CHECK(qa.dest_qp_num == b.qp->qp_num, "dest_qp_num %u", qa.dest_qp_num);
	CHECK(ia.send_cq == a.cq && ia.cap.max_send_wr >= 16, "init attr");
	return 0;
}

static int modify_ud(struct ibv_qp *qp)
{
	struct ibv_qp_attr at = {
		.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qkey = 0x11111111,
	};

	CHECK(!ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			     IBV_QP_QKEY), "UD INIT");
	at.qp_state = IBV_QPS_RTR;
	CHECK(!ibv_modify_qp(qp, &at, IBV_QP_STATE), "UD RTR");
	at.qp_state = IBV_QPS_RTS;
	at.sq_psn = 0;
	CHECK(!ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_SQ_PSN), "UD RTS");
	return 0;
}

static int test_ud(void)
{
	struct ibv_qp *ua = make_qp(&a, IBV_QPT_UD, NULL), *ub = make_qp(&b, IBV_QPT_UD, NULL);
	struct ibv_ah_attr aa = {
		.is_global = 1, .port_num = 1,
		.grh = { .dgid = b.gid, .sgid_index = a.gid_index, .hop_limit = 1 },
	};
	struct ibv_sge rsge = { (uintptr_t)b.buf + 5120, 40 + 64, b.mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 10, .sg_list = &rsge, .num_sge = 1 }, *rbad;
	struct ibv_sge sge = { (uintptr_t)a.buf + 5120, 16, a.mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = 11, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	};
	struct ibv_ah *ah;
	struct ibv_wc wc;
	int rc = -1;

	CHECK(ua && ub, "create UD QPs");
	if (modify_ud(ua) || modify_ud(ub))
		goto out;
	ah = ibv_create_ah(a.pd, &aa);
	CHECK(ah, "create_ah");
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = ub->qp_num;
	wr.wr.ud.remote_qkey = 0x11111111;
	snprintf(a.buf + 5120, 16, "UD datagram");
	CHECK(!ibv_post_recv(ub, &rwr, &rbad), "UD post_recv");
	CHECK(!post1(ua, &wr), "UD post_send");
	if (expect_wc(a.cq, 11, IBV_WC_SEND, &wc) || expect_wc(b.cq, 10, IBV_WC_RECV, &wc))
		goto out;
	CHECK(wc.byte_len == 40 + 16, "UD byte_len %u", wc.byte_len);
	CHECK(wc.src_qp == ua->qp_num, "src_qp %u want %u", wc.src_qp, ua->qp_num);
	CHECK(wc.wc_flags & IBV_WC_GRH, "no IBV_WC_GRH");
	CHECK(!strcmp(b.buf + 5120 + 40, "UD datagram"), "received '%.16s'", b.buf + 5160);
	CHECK(!ibv_destroy_ah(ah), "destroy_ah");
	rc = 0;
out:
	rc = destroy_pair(rc, ua, ub);
	return rc;
}

static int test_srq(void)
{
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(b.pd, &sa);
	struct ibv_qp *qa = NULL, *qb = NULL;
	struct ibv_sge rsge = { (uintptr_t)b.buf + 6144, 64, b.mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 12, .sg_list = &rsge, .num_sge = 1 }, *rbad;
	struct ibv_sge sge = { (uintptr_t)a.buf + 6144, 16, a.mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = 13, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	};
	struct pollfd pfd = { .fd = b.ctx->async_fd, .events = POLLIN };
	struct ibv_async_event ev;
	struct ibv_srq_attr q;
	struct ibv_wc wc;
	int rc = -1;

	CHECK(srq, "create_srq");
	CHECK(sa.attr.max_wr >= 8, "srq max_wr %u", sa.attr.max_wr);
	qa = make_qp(&a, IBV_QPT_RC, NULL);
	qb = make_qp(&b, IBV_QPT_RC, srq);
	if (!qa || !qb || connect_rc(qa, &a, qb, &b) || connect_rc(qb, &b, qa, &a))
		goto out;
	CHECK(!ibv_query_srq(srq, &q), "query_srq");
	CHECK(q.max_wr >= 8, "query_srq max_wr %u", q.max_wr);
	snprintf(a.buf + 6144, 16, "to the SRQ");
	CHECK(!ibv_post_srq_recv(srq, &rwr, &rbad), "post_srq_recv");
	rwr.wr_id = 16;
	rsge.addr += 64;
	CHECK(!ibv_post_srq_recv(srq, &rwr, &rbad), "post_srq_recv");
	q.srq_limit = 2;
	CHECK(!ibv_modify_srq(srq, &q, IBV_SRQ_LIMIT), "modify_srq limit");
	CHECK(!post1(qa, &wr), "post SEND");
	if (expect_wc(a.cq, 13, IBV_WC_SEND, &wc) || expect_wc(b.cq, 12, IBV_WC_RECV, &wc))
		goto out;
	CHECK(wc.qp_num == qb->qp_num, "qp_num %u", wc.qp_num);
	CHECK(!strcmp(b.buf + 6144, "to the SRQ"), "received '%.16s'", b.buf + 6144);
	/* One receive left, under the limit of 2: the SRQ limit event. */
	CHECK(poll(&pfd, 1, 10000) == 1, "no async event");
	CHECK(!ibv_get_async_event(b.ctx, &ev), "get_async_event");
	CHECK(ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ev.element.srq == srq,
	      "event %s", ibv_event_type_str(ev.event_type));
	ibv_ack_async_event(&ev);
	rc = 0;
out:
	rc = destroy_pair(rc, qa, qb);
	if (srq && ibv_destroy_srq(srq))
		rc = -1;
	return rc;
}

/* in_memfd tells whether addr is in one of the library's memfd mappings. */
static int in_memfd(const void *addr)
{
	FILE *f = fopen("/proc/self/maps", "r");
	unsigned long s, e;
	char line[512];
	int found = 0;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%lx-%lx", &s, &e) == 2 && (uintptr_t)addr >= s &&
		    (uintptr_t)addr < e && strstr(line, "/memfd:softroce-mr"))
			found = 1;
	fclose(f);
	return found;
}

/* test_stack_mr: a buffer on the caller's own stack can be registered (the
 * library moves those pages from another thread) and the stack stays
 * intact; dereg_mr gives the pages back to private memory. */
static int test_stack_mr(void)
{
	char local[512];
	volatile int canary = 0x5eed;
	struct ibv_mr *mr;
	struct ibv_sge sge;
	struct ibv_send_wr wr = {
		.wr_id = 14, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { (uintptr_t)b.buf + 512, b.mr->rkey },
	};
	struct ibv_wc wc;

	memset(local, 0, sizeof(local));
	mr = ibv_reg_mr(a.pd, local, sizeof(local), IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "reg_mr on the stack");
	CHECK(in_memfd(local) == 1, "registered stack page not in a memfd");
	sge = (struct ibv_sge){ (uintptr_t)local, 32, mr->lkey };
	snprintf(b.buf + 512, 32, "read onto the stack");
	CHECK(!post1(a.qp, &wr), "post READ");
	CHECK(!expect_wc(a.cq, 14, IBV_WC_RDMA_READ, &wc), "READ completion");
	CHECK(!strcmp(local, "read onto the stack"), "got '%.32s'", local);
	CHECK(canary == 0x5eed, "canary %x", canary);
	CHECK(!ibv_dereg_mr(mr), "dereg_mr");
	CHECK(in_memfd(local) == 0, "stack page still in a memfd after dereg_mr");
	CHECK(!strcmp(local, "read onto the stack"), "after dereg_mr '%.32s'", local);
	return 0;
}

/* write_from_b writes text (up to 32 bytes) from b's buffer to dst under
 * rkey through b.qp and waits for the WRITE's completion. */
static int write_from_b(uint64_t wr_id, uint64_t dst, uint32_t rkey, const char *text)
{
	struct ibv_sge sge = { (uintptr_t)b.buf + 1024, 32, b.mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED, .wr.rdma = { dst, rkey },
	};
	struct ibv_wc wc;

	snprintf(b.buf + 1024, 32, "%s", text);
	CHECK(!post1(b.qp, &wr), "post WRITE");
	CHECK(!expect_wc(b.cq, wr_id, IBV_WC_RDMA_WRITE, &wc), "WRITE completion");
	return 0;
}

/* same_keys checks that a rereg kept the MR's keys, as rxe's are kept. */
static int same_keys(struct ibv_mr *mr, uint32_t lkey, uint32_t rkey)
{
	CHECK(mr->lkey == lkey && mr->rkey == rkey, "keys %#x/%#x, were %#x/%#x",
	      mr->lkey, mr->rkey, lkey, rkey);
	return 0;
}

/* test_rereg: an MR moved to another buffer by ibv_rereg_mr works there;
 * given remote write access, it takes a WRITE under the rkey handed out
 * before (rereg keeps the keys); moved back with new access at once, too. */
static int test_rereg(void)
{
	char *one = calloc(1, 4096), *two = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(a.pd, one, 4096, IBV_ACCESS_LOCAL_WRITE);
	const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	struct ibv_sge sge;
	struct ibv_send_wr wr = {
		.wr_id = 15, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { (uintptr_t)b.buf + 512, b.mr->rkey },
	};
	struct ibv_wc wc;
	uint32_t lkey, rkey;

	CHECK(one && two && mr, "reg_mr");
	lkey = mr->lkey;
	rkey = mr->rkey;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, two, 4096, 0) == 0,
	      "rereg_mr");
	CHECK(mr->addr == two && mr->length == 4096, "rereg_mr addr %p", mr->addr);
	if (same_keys(mr, lkey, rkey))
		return -1;
	CHECK(ibv_rereg_mr(mr, 1 << 5, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT &&
	      errno == EINVAL, "rereg_mr with an unknown flag");
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, a.pd, NULL, 0, rw) ==
	      IBV_REREG_MR_ERR_INPUT && errno == EINVAL, "rereg_mr: access without CHANGE_ACCESS");
	CHECK(ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_CMD && errno == EINVAL,
	      "rereg_mr without flags");
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			   IBV_ACCESS_REMOTE_WRITE) == IBV_REREG_MR_ERR_CMD && errno == EINVAL,
	      "rereg_mr to remote write without local write");
	sge = (struct ibv_sge){ (uintptr_t)two, 32, mr->lkey };
	snprintf(b.buf + 512, 32, "read after rereg");
	CHECK(!post1(a.qp, &wr), "post READ");
	CHECK(!expect_wc(a.cq, 15, IBV_WC_RDMA_READ, &wc), "READ completion");
	CHECK(!strcmp(two, "read after rereg") && !one[0], "got '%.32s'", two);

	CHECK(!ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, rw),
	      "rereg_mr to remote write");
	if (same_keys(mr, lkey, rkey) ||
	    write_from_b(16, (uintptr_t)two + 64, rkey, "write after rereg of access"))
		return -1;
	CHECK(!strcmp(two + 64, "write after rereg of access"), "got '%.32s'", two + 64);

	CHECK(!ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS |
			    IBV_REREG_MR_CHANGE_PD, a.pd, one, 4096, ACCESS),
	      "rereg_mr of everything");
	CHECK(mr->addr == one && mr->pd == a.pd, "rereg_mr addr %p", mr->addr);
	if (same_keys(mr, lkey, rkey) ||
	    write_from_b(17, (uintptr_t)one + 128, rkey, "write after moving back"))
		return -1;
	CHECK(!strcmp(one + 128, "write after moving back") && !one[64], "got '%.32s'", one + 128);
	CHECK(!ibv_dereg_mr(mr), "dereg_mr");
	free(one);
	free(two);
	return 0;
}

/* reconnect takes a.qp and b.qp through RESET back to RTS, after an error. */
static int reconnect(void)
{
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_RESET };

	CHECK(!ibv_modify_qp(a.qp, &at, IBV_QP_STATE), "a to RESET");
	CHECK(!ibv_modify_qp(b.qp, &at, IBV_QP_STATE), "b to RESET");
	CHECK(!connect_rc(a.qp, &a, b.qp, &b) && !connect_rc(b.qp, &b, a.qp, &a), "reconnect");
	return 0;
}

/* test_rereg_pd: an MR moved to another PD is refused by a.qp (local
 * protection error on a.qp, which then goes through RESET back to RTS), and
 * moved back it works again. */
static int test_rereg_pd(void)
{
	struct ibv_pd *pd = ibv_alloc_pd(a.ctx);
	struct ibv_sge sge = { (uintptr_t)a.buf + 3072, 32, 0 };
	struct ibv_send_wr wr = {
		.wr_id = 22, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { (uintptr_t)b.buf + 3072, b.mr->rkey },
	};
	uint32_t lkey = a.mr->lkey, rkey = a.mr->rkey;
	struct ibv_wc wc;

	CHECK(pd, "alloc_pd");
	CHECK(!ibv_rereg_mr(a.mr, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, 0), "rereg_mr to a new PD");
	CHECK(a.mr->pd == pd, "mr pd %p", (void *)a.mr->pd);
	CHECK(a.mr->lkey == lkey && a.mr->rkey == rkey, "keys changed");
	sge.lkey = a.mr->lkey;
	CHECK(!post1(a.qp, &wr), "post READ");
	CHECK(!wait_wc(a.cq, &wc) && wc.status == IBV_WC_LOC_PROT_ERR,
	      "READ into an MR of another PD: status %s", ibv_wc_status_str(wc.status));
	if (reconnect())
		return -1;
	CHECK(!ibv_rereg_mr(a.mr, IBV_REREG_MR_CHANGE_PD, a.pd, NULL, 0, 0), "rereg_mr back");
	sge.lkey = a.mr->lkey;
	snprintf(b.buf + 3072, 32, "read after the PD came back");
	CHECK(!post1(a.qp, &wr), "post READ");
	CHECK(!expect_wc(a.cq, 22, IBV_WC_RDMA_READ, &wc), "READ completion");
	CHECK(!strcmp(a.buf + 3072, "read after the PD came back"), "got '%.32s'", a.buf + 3072);
	CHECK(!ibv_dealloc_pd(pd), "dealloc_pd");
	return 0;
}

/* test_mw: memory windows on a region of a's. A type 1 window bound by
 * ibv_bind_mw (which gives it the next key) takes b's WRITE through its
 * rkey, and keeps the region from being deregistered; a type 2 window is
 * bound by ibv_wr_bind_mw, invalidated by LOCAL_INV and bound again by a
 * BIND_MW posted with ibv_post_send; once the type 1 window is unbound, a
 * WRITE through its key fails with a remote access error (the QPs are then
 * reconnected). */
static int test_mw(void)
{
	const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(a.pd, buf, 4096, rw | IBV_ACCESS_MW_BIND);
	struct ibv_mw *mw1 = ibv_alloc_mw(a.pd, IBV_MW_TYPE_1);
	struct ibv_mw *mw2 = ibv_alloc_mw(a.pd, IBV_MW_TYPE_2);
	struct ibv_mw_bind bind = {
		.wr_id = 40, .send_flags = IBV_SEND_SIGNALED,
		.bind_info = { mr, (uintptr_t)buf + 1024, 256, IBV_ACCESS_REMOTE_WRITE },
	};
	struct ibv_mw_bind_info info = { mr, (uintptr_t)buf + 2048, 128, IBV_ACCESS_REMOTE_WRITE };
	struct ibv_qp_ex *qpx = ibv_qp_to_qp_ex(a.qp);
	struct ibv_send_wr wr = { .wr_id = 44, .opcode = IBV_WR_BIND_MW,
				  .send_flags = IBV_SEND_SIGNALED };
	struct ibv_sge sge = { (uintptr_t)b.buf + 1024, 8, b.mr->lkey };
	struct ibv_send_wr wwr = {
		.wr_id = 46, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED,
	};
	struct ibv_wc wc;
	uint32_t key;

	CHECK(buf && mr, "reg_mr with MW_BIND");
	CHECK(mw1 && mw2, "alloc_mw");
	CHECK(mw1->type == IBV_MW_TYPE_1 && mw2->type == IBV_MW_TYPE_2 && mw1->pd == a.pd &&
	      mw1->context == a.ctx && mw1->rkey && mw2->rkey && mw1->rkey != mw2->rkey,
	      "windows: types %d %d, rkeys %#x %#x", mw1->type, mw2->type, mw1->rkey, mw2->rkey);

	/* Type 1: ibv_bind_mw. */
	key = mw1->rkey;
	CHECK(!ibv_bind_mw(a.qp, mw1, &bind), "bind_mw");
	CHECK(mw1->rkey == ibv_inc_rkey(key), "rkey %#x after bind, was %#x", mw1->rkey, key);
	if (expect_wc(a.cq, 40, IBV_WC_BIND_MW, &wc) ||
	    write_from_b(41, (uintptr_t)buf + 1024 + 16, mw1->rkey, "through a type 1 window"))
		return -1;
	CHECK(!strcmp(buf + 1024 + 16, "through a type 1 window"), "got '%.32s'", buf + 1024 + 16);
	CHECK(ibv_bind_mw(a.qp, mw2, &bind) == EINVAL, "bind_mw of a type 2 window");
	CHECK(ibv_dereg_mr(mr) == EBUSY, "dereg_mr of a region under a window");

	/* Type 2: ibv_wr_bind_mw, LOCAL_INV, then ibv_post_send. As with rxe,
	 * the program keeps the key it gave the window in mw->rkey. */
	key = ibv_inc_rkey(mw2->rkey);
	ibv_wr_start(qpx);
	qpx->wr_id = 42;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_bind_mw(qpx, mw2, key, &info);
	CHECK(!ibv_wr_complete(qpx), "wr_bind_mw");
	if (expect_wc(a.cq, 42, IBV_WC_BIND_MW, &wc) ||
	    write_from_b(43, (uintptr_t)buf + 2048, key, "through a type 2 window"))
		return -1;
	CHECK(!strcmp(buf + 2048, "through a type 2 window"), "got '%.32s'", buf + 2048);
	mw2->rkey = key;
	wr.opcode = IBV_WR_LOCAL_INV;
	wr.invalidate_rkey = key;
	CHECK(!post1(a.qp, &wr), "post LOCAL_INV");
	if (expect_wc(a.cq, 44, IBV_WC_LOCAL_INV, &wc))
		return -1;
	wr.wr_id = 45;
	wr.opcode = IBV_WR_BIND_MW;
	wr.bind_mw.mw = mw2;
	wr.bind_mw.rkey = ibv_inc_rkey(key);
	wr.bind_mw.bind_info = info;
	wr.bind_mw.bind_info.addr = (uintptr_t)buf + 3072;
	CHECK(!post1(a.qp, &wr), "post BIND_MW");
	if (expect_wc(a.cq, 45, IBV_WC_BIND_MW, &wc) ||
	    write_from_b(46, (uintptr_t)buf + 3072 + 8, wr.bind_mw.rkey, "bound again"))
		return -1;
	CHECK(!strcmp(buf + 3072 + 8, "bound again"), "got '%.32s'", buf + 3072 + 8);
	CHECK(!ibv_dealloc_mw(mw2), "dealloc_mw type 2");

	/* Unbind the type 1 window: its key then fails. */
	bind = (struct ibv_mw_bind){ .wr_id = 47, .send_flags = IBV_SEND_SIGNALED };
	CHECK(!ibv_bind_mw(a.qp, mw1, &bind), "unbind");
	if (expect_wc(a.cq, 47, IBV_WC_BIND_MW, &wc))
		return -1;
	wwr.wr.rdma.remote_addr = (uintptr_t)buf + 1024;
	wwr.wr.rdma.rkey = mw1->rkey;
	memcpy(b.buf + 1024, "unbound", 8);
	CHECK(!post1(b.qp, &wwr), "post WRITE");
	CHECK(!wait_wc(b.cq, &wc) && wc.status == IBV_WC_REM_ACCESS_ERR,
	      "WRITE through an unbound window: status %s", ibv_wc_status_str(wc.status));
	CHECK(!buf[1024], "the unbound window was written: '%.8s'", buf + 1024);
	if (reconnect())
		return -1;
	CHECK(!ibv_dealloc_mw(mw1), "dealloc_mw type 1");
	CHECK(!ibv_dereg_mr(mr), "dereg_mr");
	free(buf);
	return 0;
}

/* test_reset_cleans_cq: a QP taken to RESET leaves none of its completions
 * in its CQ (here a flushed receive), while another QP's completion on the
 * same CQ stays. */
static int test_reset_cleans_cq(void)
{
	struct ibv_qp *qa = make_qp(&a, IBV_QPT_RC, NULL), *qb = make_qp(&b, IBV_QPT_RC, NULL);
	struct ibv_sge rsge = { (uintptr_t)b.buf + 7168, 64, b.mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 20, .sg_list = &rsge, .num_sge = 1 }, *rbad;
	struct ibv_sge sge = { (uintptr_t)a.buf + 7168, 16, a.mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = 21, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	};
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_ERR };
	struct ibv_wc wc;
	int rc = -1;

	CHECK(qa && qb, "create QPs");
	if (connect_rc(qa, &a, qb, &b) || connect_rc(qb, &b, qa, &a))
		goto out;
	CHECK(!ibv_post_recv(qb, &rwr, &rbad), "post_recv on qb");
	rwr.wr_id = 21;
	rsge.addr += 64;
	CHECK(!ibv_post_recv(b.qp, &rwr, &rbad), "post_recv on b.qp");
	CHECK(!post1(a.qp, &wr), "post SEND");
	if (expect_wc(a.cq, 21, IBV_WC_SEND, &wc))
		goto out;
	CHECK(!ibv_modify_qp(qb, &at, IBV_QP_STATE), "qb to ERR");
	at.qp_state = IBV_QPS_RESET;
	CHECK(!ibv_modify_qp(qb, &at, IBV_QP_STATE), "qb to RESET");
	if (expect_wc(b.cq, 21, IBV_WC_RECV, &wc))
		goto out;
	CHECK(wc.qp_num == b.qp->qp_num, "qp_num %u", wc.qp_num);
	CHECK(ibv_poll_cq(b.cq, 1, &wc) == 0, "left in the CQ: wr %" PRIu64 " status %s",
	      wc.wr_id, ibv_wc_status_str(wc.status));
	rc = 0;
out:
	rc = destroy_pair(rc, qa, qb);
	return rc;
}

/* test_recv_flush_after_error: a receive posted through the ring to a QP
 * in the error state is flushed while the daemon's poller sleeps, however
 * the QP got there: by running out of retries towards a QP that is gone,
 * which the daemon learns of from the completion, well after the post, or
 * by a modify. A receive ring asks for no doorbell while its QP works, so
 * the daemon must say when it does. */
static int test_recv_flush_after_error(void)
{
	struct ibv_qp *qa = make_qp(&a, IBV_QPT_RC, NULL), *qb = make_qp(&b, IBV_QPT_RC, NULL);
	struct ibv_sge rsge = { (uintptr_t)a.buf + 7168, 64, a.mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 40, .sg_list = &rsge, .num_sge = 1 }, *rbad;
	struct ibv_sge sge = { (uintptr_t)a.buf + 7168, 16, a.mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = 41, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	};
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_RTS, .timeout = 8, .retry_cnt = 1,
				  .rnr_retry = 7, .sq_psn = 100, .max_rd_atomic = 1 };
	struct timespec nap = { 0, 50000000 }; /* the poller goes to sleep */
	struct ibv_wc wc;
	int rc = -1;

	CHECK_OUT(qa && qb, "create QPs");
	/* qa towards qb, with a 1 ms ACK timeout and one retry; then qb goes,
	 * so that nothing answers. */
	if (connect_rc(qb, &b, qa, &a) || connect_rc_rd(qa, &a, qb, &b, -1))
		goto out;
	CHECK_OUT(!ibv_modify_qp(qa, &at, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				 IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC), "qa to RTS");
	CHECK_OUT(!ibv_destroy_qp(qb), "destroy qb");
	qb = NULL;
	CHECK_OUT(!post1(qa, &wr), "post a SEND nothing will answer");
	CHECK_OUT(!wait_wc(a.cq, &wc), "no completion for the SEND");
	CHECK_OUT(wc.wr_id == 41 && wc.status == IBV_WC_RETRY_EXC_ERR, "wr %" PRIu64 " status %s",
		  wc.wr_id, ibv_wc_status_str(wc.status));
	nanosleep(&nap, NULL);
	CHECK_OUT(!ibv_post_recv(qa, &rwr, &rbad), "post_recv to qa in the error state");
	CHECK_OUT(!wait_wc(a.cq, &wc), "the receive posted after the error is not flushed");
	CHECK_OUT(wc.wr_id == 40 && wc.status == IBV_WC_WR_FLUSH_ERR, "wr %" PRIu64 " status %s",
		  wc.wr_id, ibv_wc_status_str(wc.status));

	qb = make_qp(&b, IBV_QPT_RC, NULL);
	CHECK_OUT(qb, "create qb again");
	if (connect_rc(qb, &b, qa, &a))
		goto out;
	nanosleep(&nap, NULL);
	at.qp_state = IBV_QPS_ERR;
	CHECK_OUT(!ibv_modify_qp(qb, &at, IBV_QP_STATE), "qb to ERR");
	nanosleep(&nap, NULL);
	rwr.wr_id = 42;
	rsge.addr = (uintptr_t)b.buf + 7168;
	rsge.lkey = b.mr->lkey;
	CHECK_OUT(!ibv_post_recv(qb, &rwr, &rbad), "post_recv to qb in the error state");
	CHECK_OUT(!wait_wc(b.cq, &wc), "the receive posted after the modify is not flushed");
	CHECK_OUT(wc.wr_id == 42 && wc.status == IBV_WC_WR_FLUSH_ERR, "wr %" PRIu64 " status %s",
		  wc.wr_id, ibv_wc_status_str(wc.status));
	rc = 0;
out:
	return destroy_pair(rc, qa, qb);
}

/* test_destroy_keeps_cq: the completions a QP's CQ holds when the QP is
 * destroyed (here the flushes of receives posted through its ring) are
 * still there to poll, in order, as with rxe: libfabric's verbs provider
 * polls them after rdma_destroy_ep. */
static int test_destroy_keeps_cq(void)
{
	struct ibv_qp *q = make_qp(&a, IBV_QPT_RC, NULL);
	struct ibv_sge sge = { (uintptr_t)a.buf + 7168, 64, a.mr->lkey };
	struct ibv_recv_wr rwr = { .sg_list = &sge, .num_sge = 1 }, *rbad;
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				  .qp_access_flags = ACCESS };
	struct ibv_wc wc;
	uint32_t qpn;
	int i;

	CHECK(q, "create QP");
	qpn = q->qp_num;
	CHECK(!ibv_modify_qp(q, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			     IBV_QP_ACCESS_FLAGS), "modify INIT");
	for (i = 0; i < 4; i++) {
		rwr.wr_id = 30 + i;
		CHECK(!ibv_post_recv(q, &rwr, &rbad), "post_recv %d", i);
	}
	at.qp_state = IBV_QPS_ERR;
	CHECK(!ibv_modify_qp(q, &at, IBV_QP_STATE), "to ERR");
	CHECK(!ibv_destroy_qp(q), "destroy_qp");
	for (i = 0; i < 4; i++) {
		CHECK(ibv_poll_cq(a.cq, 1, &wc) == 1, "flush %d of the destroyed QP gone", i);
		CHECK(wc.wr_id == 30 + (uint64_t)i && wc.status == IBV_WC_WR_FLUSH_ERR &&
		      wc.qp_num == qpn, "flush %d: wr %" PRIu64 " status %s qp %u",
		      i, wc.wr_id, ibv_wc_status_str(wc.status), wc.qp_num);
	}
	CHECK(ibv_poll_cq(a.cq, 1, &wc) == 0, "more in the CQ: wr %" PRIu64, wc.wr_id);
	return 0;
}

/* test_cq_ring: a CQ read from its shared ring keeps its completions in
 * order across ibv_resize_cq, an overflow is reported as rxe does
 * (IBV_EVENT_CQ_ERR), a resize below what waits is refused, and a drained
 * overflowed CQ polls EOVERFLOW. */
static int test_cq_ring(void)
{
	struct ibv_cq *cq = ibv_create_cq(a.ctx, 2, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = {
		.cap = { .max_send_wr = 16, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_sge sge = { (uintptr_t)a.buf + 6144, 8, a.mr->lkey };
	struct ibv_send_wr wr = {
		.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED,
		.wr = { .rdma = { (uintptr_t)b.buf + 6144, b.mr->rkey } },
	};
	struct ibv_qp *qa = NULL, *qb = make_qp(&b, IBV_QPT_RC, NULL);
	struct ibv_async_event ev;
	struct pollfd pfd = { .fd = a.ctx->async_fd, .events = POLLIN };
	struct ibv_wc wc[16];
	int rc = -1, i, n, got;

	CHECK(cq, "create_cq");
	ia.send_cq = ia.recv_cq = cq;
	qa = ibv_create_qp(a.pd, &ia);
	CHECK(qa && qb, "create QPs");
	if (connect_rc(qa, &a, qb, &b) || connect_rc(qb, &b, qa, &a))
		goto out;
	for (i = 1; i <= 2; i++) {
		wr.wr_id = i;
		CHECK(!post1(qa, &wr), "post write %d", i);
	}
	CHECK(ibv_resize_cq(cq, 8) == 0 && cq->cqe >= 8, "resize to 8: cqe %d", cq->cqe);
	for (i = 3; i <= 5; i++) {
		wr.wr_id = i;
		CHECK(!post1(qa, &wr), "post write %d", i);
	}
	for (got = 0, i = 0; got < 5 && i < 100000; i++) {
		struct timespec ts = { 0, 100000 };

		n = ibv_poll_cq(cq, 16, wc + got);
		CHECK(n >= 0, "poll: %s", strerror(errno));
		got += n;
		if (!n)
			nanosleep(&ts, NULL);
	}
	CHECK(got == 5, "%d completions after the resize, want 5", got);
	for (i = 0; i < 5; i++)
		CHECK(wc[i].wr_id == (uint64_t)i + 1 && wc[i].status == IBV_WC_SUCCESS,
		      "completion %d: wr %" PRIu64 " status %s", i, wc[i].wr_id,
		      ibv_wc_status_str(wc[i].status));
	/* Nine completions into eight places: an overflow. */
	for (i = 0; i < 9; i++) {
		wr.wr_id = 10 + i;
		CHECK(!post1(qa, &wr), "post write %d", 10 + i);
	}
	/* The QP that found the CQ full may report its own error too. */
	for (i = 0; i < 4; i++) {
		CHECK(poll(&pfd, 1, 10000) == 1, "no IBV_EVENT_CQ_ERR after the overflow");
		CHECK(!ibv_get_async_event(a.ctx, &ev), "get_async_event");
		n = ev.event_type == IBV_EVENT_CQ_ERR && ev.element.cq == cq;
		ibv_ack_async_event(&ev);
		if (n)
			break;
	}
	CHECK(i < 4, "no IBV_EVENT_CQ_ERR among the async events");
	CHECK(ibv_resize_cq(cq, 4) == EINVAL, "a resize to 4 of a CQ holding 8");
	CHECK(ibv_poll_cq(cq, 16, wc) == 8, "the 8 completions the CQ held");
	errno = 0;
	CHECK(ibv_poll_cq(cq, 16, wc) == -1 && errno == EOVERFLOW,
	      "a drained overflowed CQ: %s", strerror(errno));
	rc = 0;
out:
	rc = destroy_pair(rc, qa, qb);
	if (cq && ibv_destroy_cq(cq))
		rc = -1;
	return rc;
}

/* test_peer_cred: a socket whose listener runs as another user (not root)
 * is refused: whoever creates the program's socket path first must not get
 * the program's verbs. Needs root, to listen as nobody. */
static int test_peer_cred(void)
{
	const char *env = getenv("SOFTROCE_SOCKET");
	char *saved = env ? strdup(env) : NULL;
	char dir[] = "/tmp/softroce-peer-XXXXXX", path[108], c;
	struct ibv_device **l = NULL;
	int p[2] = { -1, -1 }, num = -1, err = 0, rc = -1;
	pid_t pid = -1;

	if (getuid() != 0) {
		printf("(not root: test_peer_cred skipped) ");
		free(saved);
		return 0;
	}
	if (!mkdtemp(dir) || chmod(dir, 0777) || pipe(p)) {
		fprintf(stderr, "FAIL test_peer_cred setup: %s\n", strerror(errno));
		goto out;
	}
	snprintf(path, sizeof(path), "%s/s.sock", dir);
	pid = fork();
	if (pid == 0) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		int fd;

		if (setgid(65534) || setuid(65534))
			_exit(1);
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
		fd = socket(AF_UNIX, SOCK_STREAM, 0);
		if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 4) ||
		    write(p[1], "x", 1) != 1)
			_exit(1);
		/* Hang up on whoever connects: a library that talks to this
		 * daemon anyway fails (EPIPE) instead of waiting forever. */
		for (;;) {
			int cfd = accept(fd, NULL, NULL);

			if (cfd >= 0)
				close(cfd);
		}
	}
	close(p[1]);
	p[1] = -1;
	if (pid < 0 || read(p[0], &c, 1) != 1) {
		fprintf(stderr, "FAIL test_peer_cred: no listener as nobody\n");
		goto out;
	}
	setenv("SOFTROCE_SOCKET", path, 1);
	errno = 0;
	l = ibv_get_device_list(&num);
	err = errno;
	if (l || err != ECONNREFUSED) {
		fprintf(stderr, "FAIL test_peer_cred: a daemon of uid 65534 gave %d devices "
			"(errno %s), want ECONNREFUSED\n", num, strerror(err));
		goto out;
	}
	rc = 0;
out:
	if (saved)
		setenv("SOFTROCE_SOCKET", saved, 1);
	else
		unsetenv("SOFTROCE_SOCKET");
	free(saved);
	if (l)
		ibv_free_device_list(l);
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	if (p[0] >= 0)
		close(p[0]);
	if (p[1] >= 0)
		close(p[1]);
	unlink(path);
	rmdir(dir);
	if (rc)
		failures++;
	return rc;
}

static void *cq_waiter(void *arg)
{
	struct ibv_cq *cq;
	void *cq_context;

	return (void *)(intptr_t)ibv_get_cq_event(arg, &cq, &cq_context);
}

/* test_daemon_gone: a context whose daemon goes away (its socket shut
 * down, as when the daemon dies) wakes a thread blocked in
 * ibv_get_cq_event, which fails, as every later one does; the async fd
 * reports IBV_EVENT_DEVICE_FATAL; and every destroy frees its object and
 * succeeds, as after a kernel device's removal. */
static int test_daemon_gone(void)
{
	struct ibv_context *ctx = ibv_open_device(dev);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_ah_attr aa = {
		.is_global = 1, .port_num = 1,
		.grh = { .dgid = a.gid, .sgid_index = a.gid_index, .hop_limit = 1 },
	};
	struct ibv_qp_init_attr qa = {
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_comp_channel *ch;
	struct ibv_async_event ev;
	struct ibv_device_attr da;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_cq *cq, *got;
	struct ibv_qp *qp;
	struct ibv_srq *srq;
	struct ibv_mw *mw;
	struct ibv_ah *ah;
	struct timespec ts;
	struct ibv_wc wc;
	static char buf[4096];
	void *ret, *cq_context;
	pthread_t th;
	int i, n;

	CHECK(ctx, "ibv_open_device");
	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "alloc_pd");
	mr = ibv_reg_mr(pd, buf, sizeof(buf), ACCESS);
	ch = ibv_create_comp_channel(ctx);
	CHECK(mr && ch, "reg_mr, create_comp_channel");
	cq = ibv_create_cq(ctx, 4, NULL, ch, 0);
	CHECK(cq, "create_cq");
	CHECK(!ibv_req_notify_cq(cq, 0), "req_notify_cq");
	qa.send_cq = qa.recv_cq = cq;
	qp = ibv_create_qp(pd, &qa);
	srq = ibv_create_srq(pd, &sa);
	mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	ah = ibv_create_ah(pd, &aa);
	CHECK(qp && srq && mw && ah, "create qp %p srq %p mw %p ah %p",
	      (void *)qp, (void *)srq, (void *)mw, (void *)ah);
	CHECK(!pthread_create(&th, NULL, cq_waiter, ch), "pthread_create");
	CHECK(!shutdown(ctx->cmd_fd, SHUT_RDWR), "shutdown");
	/* A poller that makes no calls (the CQ is a shared ring) notices too,
	 * within a fraction of a second. */
	for (i = 0, n = 0; i < 3000 && n == 0; i++) {
		struct timespec pause = { 0, 1000000 };

		n = ibv_poll_cq(cq, 1, &wc);
		if (n == 0)
			nanosleep(&pause, NULL);
	}
	CHECK(n == -1 && errno == EPIPE, "ibv_poll_cq after the daemon went: %d (%s)", n,
	      strerror(errno));
	CHECK(ibv_query_device(ctx, &da) == EPIPE, "query_device after the daemon went");
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 30;
	CHECK(!pthread_timedjoin_np(th, &ret, &ts), "ibv_get_cq_event still blocked");
	CHECK((intptr_t)ret == -1, "ibv_get_cq_event returned %d", (int)(intptr_t)ret);
	errno = 0;
	CHECK(ibv_get_cq_event(ch, &got, &cq_context) == -1 && errno == EPIPE,
	      "a later ibv_get_cq_event");
	CHECK(!ibv_get_async_event(ctx, &ev), "get_async_event");
	CHECK(ev.event_type == IBV_EVENT_DEVICE_FATAL, "event %s",
	      ibv_event_type_str(ev.event_type));
	ibv_ack_async_event(&ev);
	CHECK(!ibv_destroy_ah(ah), "destroy_ah");
	CHECK(!ibv_dealloc_mw(mw), "dealloc_mw");
	CHECK(!ibv_destroy_qp(qp), "destroy_qp");
	CHECK(!ibv_destroy_srq(srq), "destroy_srq");
	CHECK(!ibv_destroy_cq(cq), "destroy_cq");
	CHECK(!ibv_destroy_comp_channel(ch), "destroy_comp_channel");
	CHECK(!ibv_dereg_mr(mr), "dereg_mr");
	CHECK(!ibv_dealloc_pd(pd), "dealloc_pd");
	CHECK(!ibv_close_device(ctx), "close_device");
	return 0;
}

/* fake_answer reads one request on fd and answers it with hdr and, if
 * pass_fd >= 0, that fd; 0 or -1. */
static int fake_answer(int fd, struct sr_hdr hdr, int pass_fd, uint32_t *op)
{
	char body[256], cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { &hdr, sizeof(hdr) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct sr_hdr req;

	if (recv(fd, &req, sizeof(req), MSG_WAITALL) != sizeof(req) || req.len > sizeof(body) ||
	    (req.len && recv(fd, body, req.len, MSG_WAITALL) != (ssize_t)req.len))
		return -1;
	*op = req.op_or_status;
	if (pass_fd >= 0) {
		struct cmsghdr *c;

		memset(cbuf, 0, sizeof(cbuf));
		m.msg_control = cbuf;
		m.msg_controllen = sizeof(cbuf);
		c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
	}
	return sendmsg(fd, &m, MSG_NOSIGNAL) == sizeof(hdr) ? 0 : -1;
}

/* fake_daemon serves one context: its async eventfd, no doorbell (the
 * library then posts by calls), then an answer longer than SR_MAX_BODY
 * followed by bytes that, read as the next answer, would be a success
 * with no body. */
static void fake_daemon(int lfd)
{
	struct sr_hdr ok = { 0, 0 }, huge = { 0, SR_MAX_BODY + 1 }, nosys = { ENOSYS, 0 };
	int fd = accept(lfd, NULL, NULL), efd = eventfd(0, EFD_SEMAPHORE);
	uint32_t op;
	char b;

	if (fd < 0 || efd < 0 || fake_answer(fd, ok, efd, &op) || op != SR_OP_ASYNC_FD ||
	    fake_answer(fd, nosys, -1, &op) || op != SR_OP_DOORBELL ||
	    fake_answer(fd, huge, -1, &op))
		_exit(1);
	/* The library may have hung up already: that is what it should do. */
	if (send(fd, &ok, sizeof(ok), MSG_NOSIGNAL) < 0 &&
	    errno != EPIPE && errno != ECONNRESET)
		_exit(1);
	while (recv(fd, &b, 1, 0) > 0)
		;
	_exit(0);
}

/* test_misframed: after an answer too long to follow, the library shuts
 * the socket down instead of reading on out of step: that call is EPROTO,
 * every later one EPIPE, and the device reports IBV_EVENT_DEVICE_FATAL. */
static int test_misframed(void)
{
	const char *env = getenv("SOFTROCE_SOCKET");
	char *saved = env ? strdup(env) : NULL;
	char dir[] = "/tmp/softroce-frame-XXXXXX", path[108];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct ibv_context *ctx = NULL;
	struct ibv_device_attr da;
	struct ibv_async_event ev;
	int lfd = -1, err1 = 0, err2 = 0, st = 0, rc = -1;
	pid_t pid = -1;

	if (!mkdtemp(dir)) {
		fprintf(stderr, "FAIL test_misframed: mkdtemp: %s\n", strerror(errno));
		goto out;
	}
	snprintf(path, sizeof(path), "%s/s.sock", dir);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 1)) {
		fprintf(stderr, "FAIL test_misframed: listen: %s\n", strerror(errno));
		goto out;
	}
	pid = fork();
	if (pid == 0)
		fake_daemon(lfd);
	setenv("SOFTROCE_SOCKET", path, 1);
	ctx = ibv_open_device(dev);
	if (saved)
		setenv("SOFTROCE_SOCKET", saved, 1);
	else
		unsetenv("SOFTROCE_SOCKET");
	if (pid < 0 || !ctx) {
		fprintf(stderr, "FAIL test_misframed: open on the fake daemon: %s\n",
			strerror(errno));
		goto out;
	}
	err1 = ibv_query_device(ctx, &da);
	err2 = ibv_query_device(ctx, &da);
	if (err1 != EPROTO || err2 != EPIPE) {
		fprintf(stderr, "FAIL test_misframed: query_device gave %s then %s, "
			"want EPROTO then EPIPE\n", strerror(err1), strerror(err2));
		goto out;
	}
	if (ibv_get_async_event(ctx, &ev) || ev.event_type != IBV_EVENT_DEVICE_FATAL) {
		fprintf(stderr, "FAIL test_misframed: no IBV_EVENT_DEVICE_FATAL\n");
		goto out;
	}
	ibv_ack_async_event(&ev);
	rc = 0;
out:
	if (ctx && ibv_close_device(ctx))
		rc = -1;
	if (pid > 0 && (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))) {
		fprintf(stderr, "FAIL test_misframed: fake daemon status %d\n", st);
		rc = -1;
	}
	if (lfd >= 0)
		close(lfd);
	free(saved);
	unlink(path);
	rmdir(dir);
	if (rc)
		failures++;
	return rc;
}

/* test_unsupported: what softroce lacks fails with EOPNOTSUPP, which
 * programs (and pyverbs) take for "not supported", never ENOSYS. */
static int test_unsupported(void)
{
	struct ibv_qp_init_attr qa = {
		.send_cq = a.cq, .recv_cq = a.cq, .qp_type = IBV_QPT_RAW_PACKET,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	int fd;

	errno = 0;
	CHECK(!ibv_create_qp(a.pd, &qa) && errno == EOPNOTSUPP, "create RAW_PACKET QP");
	fd = dup(a.ctx->cmd_fd);
	CHECK(fd >= 0, "dup cmd_fd");
	errno = 0;
	CHECK(!ibv_import_device(fd) && errno == EOPNOTSUPP, "import_device");
	close(fd);
	errno = 0;
	CHECK(!ibv_import_pd(a.ctx, 0) && errno == EOPNOTSUPP, "import_pd");
	errno = 0;
	CHECK(!ibv_import_mr(a.pd, 0) && errno == EOPNOTSUPP, "import_mr");
	return 0;
}

static int test_errors(void)
{
	struct ibv_pd *pd;

	errno = 0;
	CHECK(!ibv_reg_mr(a.pd, (void *)4096, 4096, ACCESS) && errno == EFAULT,
	      "reg_mr of unmapped memory");
	pd = ibv_alloc_pd(a.ctx);
	CHECK(pd, "alloc_pd");
	CHECK(!ibv_dealloc_pd(pd), "dealloc_pd");
	return 0;
}

/* test_fork: a child gets its own copy of registered memory (as with a
 * current kernel), so its writes do not reach the parent, and the parent's
 * MR keeps working. */
static int test_fork(void)
{
	pid_t pid;
	int st;

	CHECK(ibv_is_fork_initialized() == IBV_FORK_UNNEEDED, "fork status %d",
	      ibv_is_fork_initialized());
	snprintf(b.buf + 64, 32, "before fork");
	pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		int ok = !strcmp(b.buf + 64, "before fork");

		strcpy(b.buf + 64, "child wrote");
		_exit(ok ? 0 : 1);
	}
	CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child saw other data (status %d)", st);
	CHECK(!strcmp(b.buf + 64, "before fork"), "parent sees '%.32s'", b.buf + 64);
	return test_write();
}

static int setup(void)
{
	CHECK(!open_end(&a, 1, 0), "end a");
	CHECK(!open_end(&b, 0, 1), "end b");
	a.qp = make_qp(&a, IBV_QPT_RC, NULL);
	CHECK(a.qp, "create_qp a");
	b.qp = make_qp(&b, IBV_QPT_RC, NULL);
	CHECK(b.qp, "create_qp b");
	CHECK(!connect_rc(a.qp, &a, b.qp, &b), "connect a");
	CHECK(!connect_rc(b.qp, &b, a.qp, &a), "connect b");
	return 0;
}

int main(void)
{
	struct ibv_device **list;
	int num;

	setvbuf(stdout, NULL, _IONBF, 0);
	list = ibv_get_device_list(&num);
	if (!list || num < 1) {
		perror("ibv_get_device_list");
		return 1;
	}
	dev = list[0];
	RUN(setup());
	RUN(test_write());
	RUN(test_read());
	RUN(test_send_imm());
	RUN(test_inline());
	RUN(test_atomics());
	RUN(test_read_needs_rd_atomic());
	RUN(test_wr_api());
	RUN(test_wr_overflow());
	RUN(test_query_qp());
	RUN(test_ud());
	RUN(test_srq());
	RUN(test_stack_mr());
	RUN(test_rereg());
	RUN(test_rereg_pd());
	RUN(test_mw());
	RUN(test_reset_cleans_cq());
	RUN(test_recv_flush_after_error());
	RUN(test_cq_ring());
	RUN(test_destroy_keeps_cq());
	RUN(test_peer_cred());
	RUN(test_daemon_gone());
	RUN(test_misframed());
	RUN(test_unsupported());
	RUN(test_errors());
	RUN(test_fork());
out:
	close_end(&a);
	close_end(&b);
	ibv_free_device_list(list);
	printf("%s\n", failures ? "FAILED" : "PASS");
	return failures ? 1 : 0;
}
