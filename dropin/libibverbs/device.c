/* device.c: device discovery, open/close and the query verbs, answered by the
 * softroce daemon over the context's control socket (cmd_fd). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "context.h"
#include "proto.h"

/* Devices live as long as the process, as rdma-core's do while any context
 * refers to them: contexts keep pointers into them after the list is freed. */
static pthread_mutex_t devices_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sr_device *devices[64];
static int ndevices;

static struct sr_device *device_for(const struct sr_dev_entry *e, uint32_t index)
{
	struct sr_device *d;
	int i;

	for (i = 0; i < ndevices; i++)
		if (devices[i]->index == index &&
		    !strncmp(devices[i]->dev.name, e->name, sizeof(e->name)))
			return devices[i];
	if (ndevices == (int)(sizeof(devices) / sizeof(devices[0])))
		return NULL;
	d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	d->index = index;
	memcpy(d->node_guid, e->node_guid, 8);
	d->dev.node_type = IBV_NODE_CA;
	d->dev.transport_type = IBV_TRANSPORT_IB;
	snprintf(d->dev.name, sizeof(d->dev.name), "%.*s", (int)sizeof(e->name), e->name);
	snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "uverbs%u", index);
	/* The daemon's sysfs view (see sysfs.c), laid out as the kernel's. */
	snprintf(d->dev.dev_path, sizeof(d->dev.dev_path), "%s/class/infiniband_verbs/%s",
		 sr_sysfs_root(), d->dev.dev_name);
	snprintf(d->dev.ibdev_path, sizeof(d->dev.ibdev_path), "%s/class/infiniband/%s",
		 sr_sysfs_root(), d->dev.name);
	devices[ndevices++] = d;
	return d;
}

struct ibv_device **ibv_get_device_list(int *num)
{
	struct sr_dev_entry *ents = NULL;
	struct ibv_device **list;
	int fd, n = 0, i, err;

	if (num)
		*num = 0;
	fd = sr_connect();
	if (fd < 0)
		return NULL;
	err = sr_call_list(fd, &ents, &n);
	close(fd);
	if (err) {
		errno = err;
		return NULL;
	}
	list = calloc(n + 1, sizeof(*list));
	if (!list) {
		free(ents);
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&devices_lock);
	for (i = 0; i < n; i++) {
		struct sr_device *d = device_for(&ents[i], i);

		if (!d)
			break;
		list[i] = &d->dev;
	}
	pthread_mutex_unlock(&devices_lock);
	free(ents);
	if (i < n) {
		free(list);
		errno = ENOMEM;
		return NULL;
	}
	if (num)
		*num = n;
	return list;
}

void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

const char *ibv_get_device_name(struct ibv_device *device)
{
	return device->name;
}

__be64 ibv_get_device_guid(struct ibv_device *device)
{
	__be64 guid;

	memcpy(&guid, to_srdev(device)->node_guid, sizeof(guid));
	return guid;
}

int ibv_get_device_index(struct ibv_device *device)
{
	return to_srdev(device)->index;
}

static int query_port_sized(struct ibv_context *ctx, uint8_t port,
			    struct ibv_port_attr *out, size_t len);

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct sr_context *c;
	struct ibv_context *ctx;
	int err;

	c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	ctx = &c->vctx.context;
	c->index = to_srdev(device)->index;
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->objs_lock, NULL);
	/* sz covers the whole verbs_context: verbs_get_ctx_op finds every op
	 * set here and sees NULL (EOPNOTSUPP) for the others. */
	c->vctx.sz = sizeof(c->vctx);
	c->vctx.query_port = query_port_sized;
	c->vctx.query_device_ex = sr_query_device_ex;
	c->vctx.create_cq_ex = sr_create_cq_ex;
	c->vctx.create_qp_ex = sr_create_qp_ex;
	/* The data path the inline verbs.h functions call. */
	ctx->ops.poll_cq = sr_poll_cq;
	ctx->ops.req_notify_cq = sr_req_notify_cq;
	ctx->ops.post_send = sr_post_send;
	ctx->ops.post_recv = sr_post_recv;
	ctx->ops.post_srq_recv = sr_post_srq_recv;
	/* Memory windows, called by verbs.h's inline ibv_*_mw. */
	ctx->ops.alloc_mw = sr_alloc_mw;
	ctx->ops.bind_mw = sr_bind_mw;
	ctx->ops.dealloc_mw = sr_dealloc_mw;
	ctx->device = device;
	ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
	ctx->num_comp_vectors = 1;
	pthread_mutex_init(&ctx->mutex, NULL);
	ctx->async_fd = -1;
	ctx->cmd_fd = sr_connect();
	if (ctx->cmd_fd < 0)
		goto fail;
	/* async_fd is the daemon's eventfd: readable when an event waits. */
	err = sr_call(ctx->cmd_fd, SR_OP_ASYNC_FD, NULL, 0, NULL, 0, NULL, 0, NULL,
		      &ctx->async_fd);
	if (!err && ctx->async_fd < 0)
		err = EPROTO;
	if (err) {
		errno = err;
		goto fail;
	}
	/* The doorbell of the QPs' rings (wq.c); without one every post is a
	 * call. */
	c->doorbell = -1;
	if (sr_call(ctx->cmd_fd, SR_OP_DOORBELL, NULL, 0, NULL, 0, NULL, 0, NULL, &c->doorbell))
		c->doorbell = -1;
	return ctx;
fail:
	err = errno;
	if (ctx->cmd_fd >= 0)
		close(ctx->cmd_fd);
	free(c);
	errno = err;
	return NULL;
}

/* ibv_close_device closes the socket: the daemon then destroys whatever the
 * context still owns, as closing a uverbs fd does. */
int ibv_close_device(struct ibv_context *ctx)
{
	struct sr_context *c = to_sr(ctx);

	close(ctx->cmd_fd);
	close(ctx->async_fd);
	if (c->doorbell >= 0)
		close(c->doorbell);
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->objs_lock);
	free(c->objs);
	free(c);
	return 0;
}

int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *a)
{
	struct sr_device_attr w;
	int err = sr_ctx_query(ctx, SR_OP_QUERY_DEVICE, 0, 0, &w, sizeof(w));

	if (err)
		return errno = err, err;
	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "%.*s", (int)sizeof(w.fw_ver), w.fw_ver);
	memcpy(&a->node_guid, w.node_guid, 8);
	memcpy(&a->sys_image_guid, w.sys_image_guid, 8);
	a->max_mr_size = w.max_mr_size;
	a->page_size_cap = w.page_size_cap;
	a->vendor_id = w.vendor_id;
	a->vendor_part_id = w.vendor_part_id;
	a->hw_ver = w.hw_ver;
	a->max_qp = w.max_qp;
	a->max_qp_wr = w.max_qp_wr;
	a->device_cap_flags = w.device_cap_flags;
	a->max_sge = w.max_sge;
	a->max_sge_rd = w.max_sge_rd;
	a->max_cq = w.max_cq;
	a->max_cqe = w.max_cqe;
	a->max_mr = w.max_mr;
	a->max_pd = w.max_pd;
	a->max_qp_rd_atom = w.max_qp_rd_atom;
	a->max_ee_rd_atom = w.max_ee_rd_atom;
	a->max_res_rd_atom = w.max_res_rd_atom;
	a->max_qp_init_rd_atom = w.max_qp_init_rd_atom;
	a->max_ee_init_rd_atom = w.max_ee_init_rd_atom;
	a->atomic_cap = w.atomic_cap;
	a->max_ee = w.max_ee;
	a->max_rdd = w.max_rdd;
	a->max_mw = w.max_mw;
	a->max_raw_ipv6_qp = w.max_raw_ipv6_qp;
	a->max_raw_ethy_qp = w.max_raw_ethy_qp;
	a->max_mcast_grp = w.max_mcast_grp;
	a->max_mcast_qp_attach = w.max_mcast_qp_attach;
	a->max_total_mcast_qp_attach = w.max_total_mcast_qp_attach;
	a->max_ah = w.max_ah;
	a->max_fmr = w.max_fmr;
	a->max_map_per_fmr = w.max_map_per_fmr;
	a->max_srq = w.max_srq;
	a->max_srq_wr = w.max_srq_wr;
	a->max_srq_sge = w.max_srq_sge;
	a->max_pkeys = w.max_pkeys;
	a->local_ca_ack_delay = w.local_ca_ack_delay;
	a->phys_port_cnt = w.phys_port_cnt;
	return 0;
}

/* query_port_sized fills the first len bytes of an ibv_port_attr: the
 * verbs_context query_port op that the inline ibv_query_port calls. */
static int query_port_sized(struct ibv_context *ctx, uint8_t port,
			    struct ibv_port_attr *out, size_t len)
{
	struct ibv_port_attr a = { 0 };
	struct sr_port_attr w;
	int err = sr_ctx_query(ctx, SR_OP_QUERY_PORT, port, 0, &w, sizeof(w));

	if (err)
		return errno = err, err;
	a.state = w.state;
	a.max_mtu = w.max_mtu;
	a.active_mtu = w.active_mtu;
	a.gid_tbl_len = w.gid_tbl_len;
	a.port_cap_flags = w.port_cap_flags;
	a.max_msg_sz = w.max_msg_sz;
	a.bad_pkey_cntr = w.bad_pkey_cntr;
	a.qkey_viol_cntr = w.qkey_viol_cntr;
	a.pkey_tbl_len = w.pkey_tbl_len;
	a.lid = w.lid;
	a.sm_lid = w.sm_lid;
	a.lmc = w.lmc;
	a.max_vl_num = w.max_vl_num;
	a.sm_sl = w.sm_sl;
	a.subnet_timeout = w.subnet_timeout;
	a.init_type_reply = w.init_type_reply;
	a.active_width = w.active_width;
	a.active_speed = w.active_speed;
	a.phys_state = w.phys_state;
	a.link_layer = w.link_layer;
	memcpy(out, &a, len < sizeof(a) ? len : sizeof(a));
	return 0;
}

/* The exported ibv_query_port takes the pre-2018 struct, which ends after
 * link_layer and one reserved byte; programs built since call the op. */
#undef ibv_query_port
int ibv_query_port(struct ibv_context *ctx, uint8_t port,
		   struct _compat_ibv_port_attr *attr)
{
	return query_port_sized(ctx, port, (struct ibv_port_attr *)attr,
				offsetof(struct ibv_port_attr, flags) + 1);
}

int ibv_query_pkey(struct ibv_context *ctx, uint8_t port, int index, __be16 *pkey)
{
	uint16_t p;
	int err;

	if (index < 0)
		return errno = EINVAL, -1;
	err = sr_ctx_query(ctx, SR_OP_QUERY_PKEY, port, index, &p, sizeof(p));
	if (err)
		return errno = err, -1;
	*pkey = htobe16(p);
	return 0;
}

/* sr_query_device_ex: the verbs_context op behind the inline
 * ibv_query_device_ex. softroce has no extended capabilities beyond the
 * basic attributes: the rest reads as zero, as for a device that lacks them. */
int sr_query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *input,
		       struct ibv_device_attr_ex *attr, size_t attr_size)
{
	struct ibv_device_attr_ex a;
	int err;

	if (input && input->comp_mask)
		return EINVAL;
	if (attr_size < sizeof(a.orig_attr))
		return EINVAL;
	memset(&a, 0, sizeof(a));
	err = ibv_query_device(ctx, &a.orig_attr);
	if (err)
		return err;
	a.phys_port_cnt_ex = a.orig_attr.phys_port_cnt;
	memcpy(attr, &a, attr_size < sizeof(a) ? attr_size : sizeof(a));
	return 0;
}

/* ibv_get_pkey_index: the index of pkey in port's table, or -1. */
int ibv_get_pkey_index(struct ibv_context *ctx, uint8_t port, __be16 pkey)
{
	struct ibv_port_attr pa;
	__be16 p;
	int i;

	if (query_port_sized(ctx, port, &pa, sizeof(pa)))
		return -1;
	for (i = 0; i < pa.pkey_tbl_len; i++) {
		if (ibv_query_pkey(ctx, port, i, &p))
			return -1;
		if (p == pkey)
			return i;
	}
	errno = ENOENT;
	return -1;
}
