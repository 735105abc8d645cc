/* proto.h: the protocol between libibverbs.so.1 and the softroce daemon, over
 * a Unix stream socket (one per ibv_context; the device list uses a short-lived
 * one). The Go side is dropin/proto.go (package dropin); the two must change
 * together (TestWireStructSizes compares the sizes).
 *
 * Framing. A request is a struct sr_hdr {op, len} followed by len bytes of
 * body; the answer is a struct sr_hdr {status, len} followed by len bytes.
 * status is 0 or an errno value; a failed answer may still carry a body where
 * the op says so (POST_*: struct sr_post_resp). Any other failed answer may
 * carry, with SR_REASON set in len, the server's reason as text (at most
 * SR_MAX_REASON bytes, not NUL-terminated), which the library prints when
 * SOFTROCE_DEBUG is set; the errno is the call's result either way. File descriptors travel as
 * SCM_RIGHTS on the header's sendmsg: REG_MR's and REREG_MR's memfds from
 * the library, the eventfds of ASYNC_FD and CREATE_COMP_CHANNEL from the
 * daemon. Calls on one socket are strictly one at a time.
 *
 * Encoding. Little-endian integers, packed structs; GUIDs and GIDs in network
 * order; imm_data as the program gave it (network order). "handle" is the
 * daemon's name for an object, unique per connection; SR_NONE is "no object".
 * Enum values (access flags, QP types, states, attribute masks, WR and WC
 * opcodes, WC status and flags, event types) are libibverbs' own.
 */
#ifndef SOFTROCE_PROTO_H
#define SOFTROCE_PROTO_H

#include <stdint.h>

#define SR_NONE 0xffffffffu
#define SR_MAX_BODY (1u << 20) /* largest body either side accepts */
#define SR_MAX_MR_PIECES 64    /* memfd pieces (and fds) per REG_MR */

/* SR_PROTO_VERSION changes whenever a change here breaks either side. The
 * library sends it with SR_OP_LIST (struct sr_hello); a daemon that speaks
 * another version answers EPROTONOSUPPORT, so a stale daemon or library is
 * named instead of misread. */
#define SR_PROTO_VERSION 5

#define SR_REASON 0x80000000u /* in a failed answer's len: the body is a reason */
#define SR_MAX_REASON 256

enum sr_op {
	/* queries: body struct sr_query */
	SR_OP_LIST = 1,         /* struct sr_hello (or no body) -> n x struct sr_dev_entry */
	SR_OP_QUERY_DEVICE = 2, /* -> struct sr_device_attr */
	SR_OP_QUERY_PORT = 3,   /* port -> struct sr_port_attr */
	SR_OP_QUERY_GID = 4,    /* port, index -> struct sr_gid */
	SR_OP_QUERY_PKEY = 5,   /* port, index -> uint16_t pkey */

	SR_OP_ASYNC_FD = 10,        /* -> (no body) + 1 fd: the async eventfd */
	SR_OP_GET_ASYNC_EVENT = 11, /* -> struct sr_async_event, EAGAIN if none */

	SR_OP_ALLOC_PD = 20,   /* -> struct sr_handle */
	SR_OP_DEALLOC_PD = 21, /* struct sr_handle */

	SR_OP_REG_MR = 30,   /* struct sr_reg_mr + pieces + fds -> struct sr_mr */
	SR_OP_DEREG_MR = 31, /* struct sr_handle */
	SR_OP_REREG_MR = 32, /* struct sr_rereg_mr + pieces + fds -> struct sr_mr */

	SR_OP_ALLOC_MW = 35,   /* struct sr_alloc_mw -> struct sr_mw */
	SR_OP_DEALLOC_MW = 36, /* struct sr_handle */

	SR_OP_CREATE_COMP_CHANNEL = 40,  /* -> struct sr_handle + 1 fd (eventfd) */
	SR_OP_DESTROY_COMP_CHANNEL = 41, /* struct sr_handle */
	SR_OP_GET_CQ_EVENT = 42,         /* struct sr_handle (channel) -> struct sr_handle (cq), EAGAIN if none */

	SR_OP_CREATE_CQ = 50,     /* struct sr_create_cq -> struct sr_cq + the ring's fd */
	SR_OP_DESTROY_CQ = 51,    /* struct sr_handle -> struct sr_destroy_cq_resp */
	SR_OP_RESIZE_CQ = 52,     /* struct sr_resize_cq -> struct sr_cq + the new ring's fd */
	SR_OP_POLL_CQ = 53,       /* struct sr_poll_cq -> n x struct sr_wc (n <= max); rings make it idle */
	SR_OP_REQ_NOTIFY_CQ = 54, /* struct sr_req_notify */

	SR_OP_CREATE_QP = 60,  /* struct sr_create_qp -> struct sr_qp + the rings' fd */
	SR_OP_MODIFY_QP = 61,  /* struct sr_modify_qp */
	SR_OP_QUERY_QP = 62,   /* struct sr_handle -> struct sr_query_qp_resp */
	SR_OP_DESTROY_QP = 63, /* struct sr_handle -> struct sr_destroy_qp_resp */
	SR_OP_POST_SEND = 64,  /* struct sr_post + WRs -> struct sr_post_resp */
	SR_OP_POST_RECV = 65,  /* struct sr_post + WRs -> struct sr_post_resp */
	SR_OP_DOORBELL = 66,   /* -> the context's doorbell, an eventfd (struct sr_wq_ring) */

	SR_OP_CREATE_SRQ = 70,    /* struct sr_create_srq -> struct sr_srq + its ring's fd (one
				   * struct sr_wq_ring; sleeping stays clear: no doorbell) */
	SR_OP_MODIFY_SRQ = 71,    /* struct sr_modify_srq */
	SR_OP_QUERY_SRQ = 72,     /* struct sr_handle -> struct sr_srq */
	SR_OP_DESTROY_SRQ = 73,   /* struct sr_handle -> struct sr_destroy_srq_resp */
	SR_OP_POST_SRQ_RECV = 74, /* struct sr_post (handle = srq) + WRs -> struct sr_post_resp */

	SR_OP_CREATE_AH = 80,  /* struct sr_create_ah -> struct sr_handle */
	SR_OP_DESTROY_AH = 81, /* struct sr_handle */

	/* The RDMA connection manager, for librdmacm.so.1 (dropin/librdmacm),
	 * on a connection of its own. Ids and event channels are handles like
	 * the verbs objects'; an id belongs to one channel, whose eventfd
	 * counts its queued events (semaphore mode, as a completion channel).
	 * Ids live in the daemon (ucma's job); QPs are the program's, which
	 * it moves through INIT, RTR and RTS itself with INIT_QP_ATTR's
	 * answer, as librdmacm does with the kernel's. */
	SR_OP_CM_CREATE_CHANNEL = 100,  /* -> struct sr_handle + 1 fd (eventfd) */
	SR_OP_CM_DESTROY_CHANNEL = 101, /* struct sr_handle */
	SR_OP_CM_CREATE_ID = 102,       /* struct sr_cm_create_id -> struct sr_handle */
	SR_OP_CM_DESTROY_ID = 103,      /* struct sr_handle */
	SR_OP_CM_BIND = 104,            /* struct sr_cm_bind -> struct sr_cm_route */
	SR_OP_CM_RESOLVE_ADDR = 105,    /* struct sr_cm_resolve (event ADDR_RESOLVED or ADDR_ERROR) */
	SR_OP_CM_RESOLVE_ROUTE = 106,   /* struct sr_handle (event ROUTE_RESOLVED) */
	SR_OP_CM_QUERY_ROUTE = 107,     /* struct sr_handle -> struct sr_cm_route */
	SR_OP_CM_LISTEN = 108,          /* struct sr_cm_listen */
	SR_OP_CM_CONNECT = 109,         /* struct sr_cm_conn */
	SR_OP_CM_ACCEPT = 110,          /* struct sr_cm_conn: REP (passive) or RTU (active) */
	SR_OP_CM_REJECT = 111,          /* struct sr_cm_reject */
	SR_OP_CM_DISCONNECT = 112,      /* struct sr_handle */
	SR_OP_CM_ESTABLISH = 113,       /* struct sr_handle: RTU for an id without a QP */
	SR_OP_CM_INIT_QP_ATTR = 114,    /* struct sr_cm_init_qp_attr -> struct sr_modify_qp */
	SR_OP_CM_GET_EVENT = 115,       /* struct sr_handle (channel) -> struct sr_cm_event, EAGAIN if none */
	SR_OP_CM_SET_OPTION = 116,      /* struct sr_cm_option */
	SR_OP_CM_MIGRATE = 117,         /* struct sr_cm_migrate */
};

struct sr_hdr {
	uint32_t op_or_status, len;
} __attribute__((packed));

struct sr_query {
	uint32_t dev, port, index;
} __attribute__((packed));

struct sr_handle {
	uint32_t handle;
} __attribute__((packed));

struct sr_hello {
	uint32_t version; /* SR_PROTO_VERSION */
} __attribute__((packed));

struct sr_dev_entry {
	char name[64];
	uint8_t node_guid[8];
} __attribute__((packed));

struct sr_device_attr {
	char fw_ver[64];
	uint8_t node_guid[8], sys_image_guid[8];
	uint64_t max_mr_size, page_size_cap;
	uint32_t vendor_id, vendor_part_id, hw_ver, device_cap_flags;
	int32_t max_qp, max_qp_wr, max_sge, max_sge_rd, max_cq, max_cqe, max_mr, max_pd;
	int32_t max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom, max_qp_init_rd_atom;
	int32_t max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd, max_mw;
	int32_t max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach;
	int32_t max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr;
	int32_t max_srq, max_srq_wr, max_srq_sge;
	uint16_t max_pkeys;
	uint8_t local_ca_ack_delay, phys_port_cnt;
} __attribute__((packed));

struct sr_port_attr {
	uint32_t state, max_mtu, active_mtu;
	int32_t gid_tbl_len;
	uint32_t port_cap_flags, max_msg_sz, bad_pkey_cntr, qkey_viol_cntr;
	uint16_t pkey_tbl_len, lid, sm_lid;
	uint8_t lmc, max_vl_num, sm_sl, subnet_timeout, init_type_reply;
	uint8_t active_width, active_speed, phys_state, link_layer;
} __attribute__((packed));

enum sr_gid_type {
	SR_GID_NONE = 0, /* empty entry: the GID is all zeros */
	SR_GID_ROCE_V1 = 1,
	SR_GID_ROCE_V2 = 2,
};

struct sr_gid {
	uint8_t gid[16];
	uint32_t type;
} __attribute__((packed));

/* Asynchronous events. element is the handle of the QP, CQ or SRQ the event
 * is about (kind says which), or the port number for port events. */
enum sr_elem_kind {
	SR_ELEM_NONE = 0,
	SR_ELEM_QP = 1,
	SR_ELEM_CQ = 2,
	SR_ELEM_SRQ = 3,
	SR_ELEM_PORT = 4,
};

struct sr_async_event {
	uint32_t event_type, kind, element;
} __attribute__((packed));

/* Memory regions. The library moves the pages of [addr, addr+length) (rounded
 * out to pages) into memfds mapped MAP_SHARED at the same addresses, so the
 * daemon maps the very same pages: no copies, and atomics are real atomics on
 * the program's memory. A REG_MR lists the pieces covering the rounded range
 * in address order; piece i uses the i-th fd sent with the request. */
struct sr_reg_mr {
	uint32_t pd, access;
	uint64_t addr, length, iova;
	uint32_t npieces, pad;
	/* then npieces x struct sr_mr_piece */
} __attribute__((packed));

struct sr_mr_piece {
	uint64_t vaddr;  /* page-aligned start in the program */
	uint64_t len;    /* page multiple */
	uint64_t offset; /* into the memfd, page-aligned */
} __attribute__((packed));

/* The keys: rkey is lkey, as in rxe, even for an MR without remote access
 * (a remote access under it fails until a REREG_MR grants one). */
struct sr_mr {
	uint32_t handle, lkey, rkey;
} __attribute__((packed));

/* REREG_MR changes the MR handle in place (ibv_rereg_mr): flags are
 * IBV_REREG_MR_CHANGE_*; pd is used with CHANGE_PD, access with
 * CHANGE_ACCESS, and addr, length, iova and the pieces (as in REG_MR) with
 * CHANGE_TRANSLATION; without it npieces is 0 and no fds come. The MR keeps
 * its handle and its keys, as rxe's do, so a peer's rkey stays valid across
 * a change of access; a failure leaves the MR as it was. Answered by struct
 * sr_mr. */
struct sr_rereg_mr {
	uint32_t handle, flags, pd, access;
	uint64_t addr, length, iova;
	uint32_t npieces, pad;
	/* then npieces x struct sr_mr_piece */
} __attribute__((packed));

/* Memory windows (type 1 and 2B, as rxe). A window is bound by a
 * BIND_MW work request in a POST_SEND (struct sr_bind_mw below), for
 * ibv_bind_mw too: the library posts it with ibv_inc_rkey(mw->rkey) as the
 * new key, as rdma-core's rxe provider does. */
struct sr_alloc_mw {
	uint32_t pd, type; /* type: enum ibv_mw_type */
} __attribute__((packed));

struct sr_mw {
	uint32_t handle, rkey;
} __attribute__((packed));

/* Completion queues. */
struct sr_create_cq {
	uint32_t cqe;
	uint32_t channel; /* comp channel handle or SR_NONE */
	uint32_t comp_vector;
} __attribute__((packed));

struct sr_cq {
	uint32_t handle, cqe; /* cqe: the depth granted */
} __attribute__((packed));

struct sr_resize_cq {
	uint32_t handle, cqe;
} __attribute__((packed));

struct sr_destroy_cq_resp {
	uint32_t comp_events, async_events; /* delivered, for ibv_ack_* accounting */
} __attribute__((packed));

struct sr_poll_cq {
	uint32_t handle, max;
} __attribute__((packed));

struct sr_wc {
	uint64_t wr_id;
	uint32_t status, opcode, vendor_err, byte_len;
	uint32_t imm_data; /* or the invalidated rkey */
	uint32_t qp_num, src_qp, wc_flags;
	uint16_t pkey_index, slid;
	uint8_t sl, dlid_path_bits, pad[2];
} __attribute__((packed));

/* A CQ's ring: a sealed memfd the daemon sends with CREATE_CQ's and
 * RESIZE_CQ's answer, mapped shared by both sides. The device writes each
 * completion into it as it happens and ibv_poll_cq reads it without a call,
 * as a kernel provider reads its mapped CQ. prod counts the completions
 * written (only the daemon writes it), cons those consumed (only the library
 * writes it), each on a cache line of its own; entry k lives in
 * wc[k % cqe]. The daemon takes no more from cons than how much room is
 * left. After a resize the daemon writes only to the new ring; the old one
 * holds what came before, to be read first. */
#define SR_CQ_RING_HEADER 256
#define SR_CQ_RING_OVERFLOW 1u /* in flags: the CQ overflowed, completions were lost */

struct sr_cq_ring {
	uint32_t prod;
	uint8_t pad0[60];
	uint32_t cons;
	uint8_t pad1[60];
	uint32_t flags;
	uint8_t pad2[SR_CQ_RING_HEADER - 132];
	struct sr_wc wc[];
};
_Static_assert(__builtin_offsetof(struct sr_cq_ring, cons) == 64 &&
	       __builtin_offsetof(struct sr_cq_ring, flags) == 128 &&
	       __builtin_offsetof(struct sr_cq_ring, wc) == SR_CQ_RING_HEADER,
	       "struct sr_cq_ring's layout");

/* A QP's work rings: a sealed memfd the daemon sends with CREATE_QP's
 * answer, mapped shared by both sides: the send ring at offset 0, then the
 * receive ring (none on an SRQ) at the send ring's size rounded up to 16.
 * Slot k (of slots, each slot_size bytes) holds one WR laid out as in a
 * POST_SEND or POST_RECV body after its struct sr_post (no binds). prod
 * counts WRs written (only the library writes it), cons WRs the daemon
 * took into the QP, done those of them the QP has finished with
 * (completed or flushed; it may lag), sleeping whether a post must wake
 * the daemon's poller: set in a send ring while the poller sleeps, in a
 * receive ring only while it sleeps and the QP is in the error state (the
 * device takes receive WRs when a message needs one); after publishing
 * prod, the library rings the doorbell (SR_OP_DOORBELL's eventfd) when it
 * reads sleeping set. The library
 * posts through a ring only while prod - cons leaves a slot and
 * prod - done stays within the QP's depth; otherwise it calls POST_*,
 * which takes what waits in the rings first. */
#define SR_WQ_RING_HEADER 256

struct sr_wq_ring {
	uint32_t prod;
	uint8_t pad0[60];
	uint32_t cons;
	uint8_t pad1[60];
	uint32_t done;
	uint8_t pad2[60];
	uint32_t sleeping;
	uint32_t slots, slot_size;
	uint8_t pad3[SR_WQ_RING_HEADER - 204];
	uint8_t slot[];
};
_Static_assert(__builtin_offsetof(struct sr_wq_ring, cons) == 64 &&
	       __builtin_offsetof(struct sr_wq_ring, done) == 128 &&
	       __builtin_offsetof(struct sr_wq_ring, sleeping) == 192 &&
	       __builtin_offsetof(struct sr_wq_ring, slot) == SR_WQ_RING_HEADER,
	       "struct sr_wq_ring's layout");

struct sr_req_notify {
	uint32_t handle, solicited_only;
} __attribute__((packed));

/* Queue pairs. */
struct sr_qp_cap {
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data;
} __attribute__((packed));

struct sr_create_qp {
	uint32_t pd, send_cq, recv_cq, srq; /* srq: SR_NONE for none */
	uint32_t qp_type, sq_sig_all;
	struct sr_qp_cap cap;
} __attribute__((packed));

struct sr_qp {
	uint32_t handle, qp_num;
	struct sr_qp_cap cap; /* granted */
} __attribute__((packed));

struct sr_ah_attr {
	uint8_t dgid[16];
	uint32_t flow_label;
	uint8_t sgid_index, hop_limit, traffic_class, is_global;
	uint16_t dlid;
	uint8_t sl, src_path_bits, static_rate, port_num, pad[2];
} __attribute__((packed));

struct sr_qp_attr {
	uint32_t qp_state, cur_qp_state, path_mtu, path_mig_state;
	uint32_t qkey, rq_psn, sq_psn, dest_qp_num;
	uint32_t qp_access_flags;
	struct sr_qp_cap cap;
	struct sr_ah_attr ah_attr;
	uint16_t pkey_index;
	uint8_t en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic;
	uint8_t min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry, pad;
} __attribute__((packed));

struct sr_modify_qp {
	uint32_t handle, mask; /* mask: enum ibv_qp_attr_mask */
	struct sr_qp_attr attr;
} __attribute__((packed));

struct sr_query_qp_resp {
	struct sr_qp_attr attr;
	struct sr_create_qp init; /* pd..srq are handles; cap as granted */
} __attribute__((packed));

struct sr_destroy_qp_resp {
	uint32_t events_reported;
} __attribute__((packed));

/* Posting. A POST_SEND body is struct sr_post, then nwr x (struct sr_send_wr,
 * num_sge x struct sr_sge, inline_len bytes). For IBV_SEND_INLINE the library
 * gathers the data itself: num_sge is 0 and the bytes follow. A WR whose
 * opcode is IBV_WR_BIND_MW is followed by one struct sr_bind_mw instead
 * (num_sge and inline_len 0). A POST_RECV or
 * POST_SRQ_RECV body is struct sr_post, then nwr x (struct sr_recv_wr,
 * num_sge x struct sr_sge). The answer always carries struct sr_post_resp;
 * on failure status is the errno and bad is the index of the first WR not
 * posted (the ones before it were). */
struct sr_post {
	uint32_t handle, nwr;
} __attribute__((packed));

struct sr_sge {
	uint64_t addr;
	uint32_t length, lkey;
} __attribute__((packed));

struct sr_send_wr {
	uint64_t wr_id;
	uint32_t opcode, send_flags, imm_data, invalidate_rkey;
	uint32_t num_sge, inline_len;
	uint64_t remote_addr;
	uint32_t rkey, pad;
	uint64_t compare_add, swap;
	uint32_t ah, remote_qpn, remote_qkey, pad2; /* UD */
} __attribute__((packed));

/* What a BIND_MW binds (ibv_send_wr's bind_mw). The window is named by its
 * handle and by its rkey as the program knows it (ibv_mw's rkey), which the
 * device checks against the window's current key; rkey is the key the
 * window gets (only its low byte counts); the region is named by its lkey
 * (0, with length 0, for no region: a type 1 unbind). */
struct sr_bind_mw {
	uint32_t mw, mw_rkey, rkey, mr_lkey;
	uint64_t addr, length;
	uint32_t access, pad; /* access: the window's mw_access_flags */
} __attribute__((packed));

struct sr_recv_wr {
	uint64_t wr_id;
	uint32_t num_sge, pad;
} __attribute__((packed));

struct sr_post_resp {
	uint32_t bad;
} __attribute__((packed));

/* Shared receive queues. */
struct sr_create_srq {
	uint32_t pd, max_wr, max_sge, srq_limit;
} __attribute__((packed));

struct sr_srq {
	uint32_t handle, max_wr, max_sge, srq_limit;
} __attribute__((packed));

struct sr_modify_srq {
	uint32_t handle, mask, max_wr, srq_limit; /* mask: enum ibv_srq_attr_mask */
} __attribute__((packed));

struct sr_destroy_srq_resp {
	uint32_t events_reported;
} __attribute__((packed));

/* Address handles. */
struct sr_create_ah {
	uint32_t pd;
	struct sr_ah_attr attr;
} __attribute__((packed));

/* The RDMA connection manager. Addresses carry the family (AF_INET,
 * AF_INET6), the port in host order and the address in network order (IPv4
 * in addr[0..3]). */
struct sr_cm_sockaddr {
	uint16_t family, port;
	uint8_t addr[16];
	uint32_t scope_id;
} __attribute__((packed));

struct sr_cm_create_id {
	uint32_t channel, ps, qp_type; /* enum rdma_port_space, enum ibv_qp_type */
} __attribute__((packed));

struct sr_cm_bind {
	uint32_t id;
	struct sr_cm_sockaddr addr;
} __attribute__((packed));

struct sr_cm_resolve {
	uint32_t id, timeout_ms;
	struct sr_cm_sockaddr src, dst; /* src.family 0: any */
} __attribute__((packed));

/* The path an id's QP will use (struct ibv_sa_path_rec's RoCE part). */
struct sr_cm_path {
	uint8_t sgid[16], dgid[16];
	uint32_t flow_label;
	uint16_t pkey;
	uint8_t hop_limit, traffic_class, sl, mtu, rate, packet_life_time;
} __attribute__((packed));

/* An id's addresses and device: dev_name is empty until the id is bound to
 * a device (bind to a device address, resolved, or a request's child). */
struct sr_cm_route {
	struct sr_cm_sockaddr src, dst;
	uint8_t node_guid[8];
	char dev_name[64];
	uint8_t port_num, num_paths, sgid_index, pad;
	struct sr_cm_path path;
} __attribute__((packed));

struct sr_cm_listen {
	uint32_t id;
	int32_t backlog;
} __attribute__((packed));

/* struct rdma_conn_param, with the private data inline. */
struct sr_cm_conn_param {
	uint32_t qp_num;
	uint8_t private_data_len, responder_resources, initiator_depth, flow_control;
	uint8_t retry_count, rnr_retry_count, srq, pad;
	uint8_t private_data[196];
} __attribute__((packed));

struct sr_cm_conn {
	uint32_t id;
	struct sr_cm_conn_param param;
} __attribute__((packed));

struct sr_cm_reject {
	uint32_t id;
	uint8_t private_data_len, pad[3];
	uint8_t private_data[148];
} __attribute__((packed));

struct sr_cm_init_qp_attr {
	uint32_t id, qp_state; /* enum ibv_qp_state */
} __attribute__((packed));

/* struct rdma_ud_param without the private data (in conn). */
struct sr_cm_ud_param {
	uint32_t qp_num, qkey;
	struct sr_ah_attr ah_attr;
} __attribute__((packed));

/* An event: id is the id it is about (for CONNECT_REQUEST a new id, on the
 * listener's channel, whose route is route), listen_id the listener's or
 * SR_NONE; event is enum rdma_cm_event_type, status as librdmacm reports it
 * (a REJ reason, or a negative errno). */
struct sr_cm_event {
	uint32_t id, listen_id, event;
	int32_t status;
	struct sr_cm_conn_param conn;
	struct sr_cm_ud_param ud;
	struct sr_cm_route route;
} __attribute__((packed));

struct sr_cm_option {
	uint32_t id, level, name, value; /* rdma_set_option's, the value as an integer */
} __attribute__((packed));

struct sr_cm_migrate {
	uint32_t id, channel;
} __attribute__((packed));

/* client.c */
int sr_connect(void);
void sr_socket_path(char *buf, size_t len);
const char *sr_sysfs_root(void);
/* sr_call sends op with body (and nfds fds) and reads the answer's body into
 * out. With got NULL the body must be exactly outlen bytes (on failure: empty
 * or exactly outlen); with got set it may be shorter and *got is its length.
 * A longer body is EPROTO. One fd the daemon sends lands in *fd_out (or is
 * closed when fd_out is NULL). Returns 0 or an errno value (the daemon's,
 * EPROTO for a malformed answer, EPIPE when the daemon is gone). */
int sr_call(int fd, uint32_t op, const void *body, uint32_t len,
	    const int *fds, int nfds, void *out, uint32_t outlen,
	    uint32_t *got, int *fd_out);
int sr_call_list(int fd, struct sr_dev_entry **out, int *n);

#endif
