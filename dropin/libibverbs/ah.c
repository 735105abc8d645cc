/* ah.c: address handles, and building their attributes from a received
 * UD completion. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"

void sr_ah_to_wire(struct sr_ah_attr *w, const struct ibv_ah_attr *a)
{
	memset(w, 0, sizeof(*w));
	memcpy(w->dgid, a->grh.dgid.raw, 16);
	w->flow_label = a->grh.flow_label;
	w->sgid_index = a->grh.sgid_index;
	w->hop_limit = a->grh.hop_limit;
	w->traffic_class = a->grh.traffic_class;
	w->is_global = a->is_global;
	w->dlid = a->dlid;
	w->sl = a->sl;
	w->src_path_bits = a->src_path_bits;
	w->static_rate = a->static_rate;
	w->port_num = a->port_num;
}

void sr_ah_from_wire(struct ibv_ah_attr *a, const struct sr_ah_attr *w)
{
	memset(a, 0, sizeof(*a));
	memcpy(a->grh.dgid.raw, w->dgid, 16);
	a->grh.flow_label = w->flow_label;
	a->grh.sgid_index = w->sgid_index;
	a->grh.hop_limit = w->hop_limit;
	a->grh.traffic_class = w->traffic_class;
	a->is_global = w->is_global;
	a->dlid = w->dlid;
	a->sl = w->sl;
	a->src_path_bits = w->src_path_bits;
	a->static_rate = w->static_rate;
	a->port_num = w->port_num;
}

struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct sr_create_ah req = { .pd = pd->handle };
	struct sr_handle h;
	struct ibv_ah *ah;
	int err;

	ah = calloc(1, sizeof(*ah));
	if (!ah) {
		errno = ENOMEM;
		return NULL;
	}
	sr_ah_to_wire(&req.attr, attr);
	err = sr_ctx_call(pd->context, SR_OP_CREATE_AH, &req, sizeof(req), &h, sizeof(h));
	if (err) {
		free(ah);
		errno = err;
		return NULL;
	}
	ah->context = pd->context;
	ah->pd = pd;
	ah->handle = h.handle;
	return ah;
}

int ibv_destroy_ah(struct ibv_ah *ah)
{
	struct sr_handle h = { ah->handle };
	int err = sr_ctx_call(ah->context, SR_OP_DESTROY_AH, &h, sizeof(h), NULL, 0);

	if (err && !sr_ctx_gone(ah->context, err))
		return errno = err, err;
	free(ah);
	return 0;
}

/* find_sgid_index: the index of gid in port's table, preferring a RoCE v2
 * entry (the same address is often listed as v1 and v2), or -1. */
static int find_sgid_index(struct ibv_context *ctx, uint8_t port, const union ibv_gid *gid)
{
	struct ibv_port_attr pa;
	struct ibv_gid_entry e;
	int i, any = -1;

	if (ibv_query_port(ctx, port, &pa))
		return -1;
	for (i = 0; i < pa.gid_tbl_len; i++) {
		if (ibv_query_gid_ex(ctx, port, i, &e, 0))
			continue;
		if (memcmp(&e.gid, gid, sizeof(*gid)))
			continue;
		if (e.gid_type == IBV_GID_TYPE_ROCE_V2)
			return i;
		if (any < 0)
			any = i;
	}
	return any;
}

/* ipv4_header_ok tells an IPv4 header (RoCE v2 over IPv4 puts one in the
 * last 20 bytes of the 40-byte GRH area) by version, length and checksum. */
static int ipv4_header_ok(const uint8_t *h)
{
	uint32_t sum = 0;
	int i;

	if (h[0] != 0x45)
		return 0;
	for (i = 0; i < 20; i += 2)
		sum += (h[i] << 8) | h[i + 1];
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return sum == 0xffff;
}

static void v4_mapped(union ibv_gid *g, const uint8_t *addr)
{
	memset(g, 0, sizeof(*g));
	g->raw[10] = 0xff;
	g->raw[11] = 0xff;
	memcpy(g->raw + 12, addr, 4);
}

/* ibv_init_ah_from_wc builds the attributes that answer the sender of wc, as
 * rdma-core does: the GRH (IPv6, or an IPv4 header in its last 20 bytes for
 * RoCE v2 over IPv4) gives the destination GID and the local GID's index. */
int ibv_init_ah_from_wc(struct ibv_context *ctx, uint8_t port_num, struct ibv_wc *wc,
			struct ibv_grh *grh, struct ibv_ah_attr *ah_attr)
{
	union ibv_gid sgid;
	int idx;

	memset(ah_attr, 0, sizeof(*ah_attr));
	ah_attr->dlid = wc->slid;
	ah_attr->sl = wc->sl;
	ah_attr->src_path_bits = wc->dlid_path_bits;
	ah_attr->port_num = port_num;
	if (!(wc->wc_flags & IBV_WC_GRH))
		return 0;
	ah_attr->is_global = 1;
	if (ipv4_header_ok((const uint8_t *)grh + 20)) {
		const uint8_t *ip = (const uint8_t *)grh + 20;

		v4_mapped(&ah_attr->grh.dgid, ip + 12);
		v4_mapped(&sgid, ip + 16);
		ah_attr->grh.traffic_class = ip[1];
	} else {
		uint32_t vtf = ntohl(grh->version_tclass_flow);

		ah_attr->grh.dgid = grh->sgid;
		sgid = grh->dgid;
		ah_attr->grh.flow_label = vtf & 0xfffff;
		ah_attr->grh.traffic_class = (vtf >> 20) & 0xff;
	}
	ah_attr->grh.hop_limit = 0xff;
	idx = find_sgid_index(ctx, port_num, &sgid);
	if (idx < 0) {
		errno = ENOENT;
		return -1;
	}
	ah_attr->grh.sgid_index = idx;
	return 0;
}

struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc,
				     struct ibv_grh *grh, uint8_t port_num)
{
	struct ibv_ah_attr a;

	if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &a))
		return NULL;
	return ibv_create_ah(pd, &a);
}
