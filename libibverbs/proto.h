/* proto.h: the control protocol between libibverbs.so.1 and the softroce
 * daemon, over a Unix stream socket. The Go side is cmd/softroce/daemon.go;
 * the two must change together.
 *
 * A request is a struct sr_req; the answer is a struct sr_resp_hdr followed by
 * len bytes: one of the packed structs below, or nothing when status (an errno
 * value) is not 0. Integers are little-endian, GUIDs and GIDs in network order.
 */
#ifndef SOFTROCE_PROTO_H
#define SOFTROCE_PROTO_H

#include <stdint.h>

enum sr_op {
	SR_OP_LIST = 1,         /* -> n x struct sr_dev_entry */
	SR_OP_QUERY_DEVICE = 2, /* dev -> struct sr_device_attr */
	SR_OP_QUERY_PORT = 3,   /* dev, port -> struct sr_port_attr */
	SR_OP_QUERY_GID = 4,    /* dev, port, index -> struct sr_gid */
	SR_OP_QUERY_PKEY = 5,   /* dev, port, index -> uint16_t pkey */
};

struct sr_req {
	uint32_t op, dev, port, index;
} __attribute__((packed));

struct sr_resp_hdr {
	uint32_t status, len;
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

/* client.c */
int sr_connect(void);
int sr_call(int fd, uint32_t op, uint32_t dev, uint32_t port, uint32_t index,
	    void *out, uint32_t outlen);
int sr_call_list(int fd, struct sr_dev_entry **out, int *n);

#endif
