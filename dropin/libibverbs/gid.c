/* gid.c: reading the GID table, one entry or all of it. */
#include <errno.h>
#include <string.h>
#include <sys/types.h>

#include "context.h"
#include "proto.h"

/* From rdma-core's driver.h (IBVERBS_PRIVATE_34), which is not installed. */
enum ibv_gid_type_sysfs {
	IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
	IBV_GID_TYPE_SYSFS_ROCE_V2,
};

static int query_gid(struct ibv_context *ctx, uint32_t port, int index, struct sr_gid *g)
{
	if (index < 0)
		return EINVAL;
	return sr_ctx_query(ctx, SR_OP_QUERY_GID, port, index, g, sizeof(*g));
}

/* ibv_query_gid returns -1 on failure, as rdma-core's does. An empty entry
 * is an all-zero GID. */
int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
	struct sr_gid g;
	int err = query_gid(ctx, port, index, &g);

	if (err)
		return errno = err, -1;
	memcpy(gid->raw, g.gid, 16);
	return 0;
}

/* ibv_query_gid_type (IBVERBS_PRIVATE_34, used by ibv_devinfo): an empty
 * entry reads as RoCE v1, as rdma-core reports entries without a type. */
int ibv_query_gid_type(struct ibv_context *ctx, uint8_t port, unsigned int index,
		       enum ibv_gid_type_sysfs *type)
{
	struct sr_gid g;
	int err = query_gid(ctx, port, index, &g);

	if (err)
		return errno = err, -1;
	*type = g.type == SR_GID_ROCE_V2 ? IBV_GID_TYPE_SYSFS_ROCE_V2 : IBV_GID_TYPE_SYSFS_IB_ROCE_V1;
	return 0;
}

static void fill_entry(struct ibv_gid_entry *e, const struct sr_gid *g,
		       uint32_t port, uint32_t index)
{
	memset(e, 0, sizeof(*e));
	memcpy(e->gid.raw, g->gid, 16);
	e->gid_index = index;
	e->port_num = port;
	e->gid_type = g->type == SR_GID_ROCE_V2 ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
	e->ndev_ifindex = 0; /* no kernel netdev behind a softroce device */
}

/* _ibv_query_gid_ex (behind the inline ibv_query_gid_ex): 0, ENODATA for an
 * empty entry, or another errno value. */
int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
		      struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	struct sr_gid g;
	int err;

	if (flags || entry_size < sizeof(*entry) || index > INT32_MAX)
		return EINVAL;
	err = query_gid(ctx, port, index, &g);
	if (err)
		return err;
	if (g.type == SR_GID_NONE)
		return ENODATA;
	fill_entry(entry, &g, port, index);
	return 0;
}

/* _ibv_query_gid_table (behind the inline ibv_query_gid_table): the valid
 * entries of every port, their number, or a negative errno value. */
ssize_t _ibv_query_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *entries,
			     size_t max_entries, uint32_t flags, size_t entry_size)
{
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	struct sr_gid g;
	size_t n = 0;
	int port, i, err;

	if (flags || entry_size < sizeof(*entries))
		return -EINVAL;
	if (ibv_query_device(ctx, &da))
		return -errno;
	for (port = 1; port <= da.phys_port_cnt; port++) {
		if (ibv_query_port(ctx, port, &pa))
			return -errno;
		for (i = 0; i < pa.gid_tbl_len; i++) {
			err = query_gid(ctx, port, i, &g);
			if (err)
				return -err;
			if (g.type == SR_GID_NONE)
				continue;
			if (n == max_entries)
				return -EINVAL;
			fill_entry((struct ibv_gid_entry *)((char *)entries + n * entry_size), &g, port, i);
			n++;
		}
	}
	return n;
}
