/* rs_iomap.c: rsockets' zero-copy extension. riomap registers a buffer
 * and, writable, advertises it to the peer by RDMA-writing a struct
 * rs_iomap into the peer's target iomap (an entry per index, as many as
 * the peer's connection data allowed); riowrite writes straight into a
 * buffer the peer advertised to us, by offset, with plain RDMA WRITEs. */
#define _GNU_SOURCE
#include <byteswap.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "rs.h"

/* rs_send_iomaps writes every queued mapping into the peer's target
 * iomap. The caller holds slock. */
int rs_send_iomaps(struct rsock *rs, int flags)
{
	struct rs_iomr *m;
	struct rs_iomap iom;
	int ret = 0;

	for (m = rs->iomaps; m; m = m->next) {
		if (!m->queued)
			continue;
		if (!rs_can_send(rs)) {
			ret = rs_wait(rs, rs_nonblocking(rs, flags), rs_conn_can_send);
			if (ret)
				return ret;
			if (!(rs->state & RS_WRITABLE))
				return rs_err(ECONNRESET);
		}
		iom.offset = m->offset;
		iom.sge.addr = (uintptr_t)m->mr->addr;
		iom.sge.length = m->mr->length;
		iom.sge.key = m->mr->rkey;
		if (rs->swap) {
			iom.offset = bswap_64(iom.offset);
			iom.sge.addr = bswap_64(iom.sge.addr);
			iom.sge.length = bswap_32(iom.sge.length);
			iom.sge.key = bswap_32(iom.sge.key);
		}
		pthread_mutex_lock(&rs->lock);
		ret = rs_stage_send(rs, &iom, sizeof(iom), 0,
				    rs->remote_iomap.addr + (uint64_t)m->index * sizeof(struct rs_iomap),
				    rs->remote_iomap.key, RS_MSG(RS_OP_IOMAP_SGL, m->index));
		pthread_mutex_unlock(&rs->lock);
		m->queued = 0;
		if (ret)
			return ret;
	}
	rs->iomap_pending = 0;
	return 0;
}

void rs_free_iomaps(struct rsock *rs)
{
	struct rs_iomr *m, *next;

	for (m = rs->iomaps; m; m = next) {
		next = m->next;
		ibv_dereg_mr(m->mr);
		free(m);
	}
	rs->iomaps = NULL;
}

/* rs_free_index is the lowest index of the peer's target iomap no mapping
 * of ours holds, or -1. */
static int rs_free_index(struct rsock *rs)
{
	struct rs_iomr *m;
	uint32_t i;

	for (i = 0; i < rs->remote_iomap.length; i++) {
		for (m = rs->iomaps; m; m = m->next)
			if (m->index == (int)i)
				break;
		if (!m)
			return i;
	}
	return -1;
}

off_t riomap(int socket, void *buf, size_t len, int prot, int flags, off_t offset)
{
	struct rsock *rs = rs_get(socket);
	int access = IBV_ACCESS_LOCAL_WRITE;
	struct rs_iomr *m;

	if (!rs)
		return rs_err(EBADF);
	if (rs->type == SOCK_DGRAM || !rs->id->pd || (prot & ~(PROT_WRITE | PROT_NONE)))
		return rs_err(EINVAL);
	m = calloc(1, sizeof(*m));
	if (!m)
		return rs_err(ENOMEM);
	pthread_mutex_lock(&rs->slock);
	m->index = -1;
	if (prot & PROT_WRITE) {
		m->index = rs_free_index(rs);
		if (m->index < 0) {
			pthread_mutex_unlock(&rs->slock);
			free(m);
			return rs_err(ENOMEM);
		}
		access |= IBV_ACCESS_REMOTE_WRITE;
	}
	m->mr = ibv_reg_mr(rs->id->pd, buf, len, access);
	if (!m->mr) {
		pthread_mutex_unlock(&rs->slock);
		free(m);
		return -1;
	}
	m->offset = offset == -1 ? (uintptr_t)buf : (uint64_t)offset;
	if (m->index >= 0) {
		m->queued = 1;
		rs->iomap_pending = 1;
	}
	m->next = rs->iomaps;
	rs->iomaps = m;
	pthread_mutex_unlock(&rs->slock);
	return m->offset;
}

int riounmap(int socket, void *buf, size_t len)
{
	struct rsock *rs = rs_get(socket);
	struct rs_iomr **pm, *m;

	if (!rs)
		return rs_err(EBADF);
	pthread_mutex_lock(&rs->slock);
	for (pm = &rs->iomaps; (m = *pm); pm = &m->next) {
		if (m->mr->addr == buf && m->mr->length == len) {
			*pm = m->next;
			pthread_mutex_unlock(&rs->slock);
			ibv_dereg_mr(m->mr);
			free(m);
			return 0;
		}
	}
	pthread_mutex_unlock(&rs->slock);
	return rs_err(EINVAL);
}

/* rs_find_iomap: the peer's mapping holding offset, copied out of the
 * target iomap the peer writes (so it cannot change under us). */
static int rs_find_iomap(struct rsock *rs, uint64_t offset, struct rs_iomap *out)
{
	int i;

	for (i = 0; i < rs->target_iomap_size; i++) {
		struct rs_iomap e;

		memcpy(&e, (const void *)&rs->target_iomap[i], sizeof(e));
		if (e.sge.length && offset >= e.offset && offset - e.offset < e.sge.length) {
			*out = e;
			return 1;
		}
	}
	return 0;
}

size_t riowrite(int socket, const void *buf, size_t count, off_t offset, int flags)
{
	struct rsock *rs = rs_get(socket);
	uint32_t olen = RS_FIRST_XFER, xfer;
	const uint8_t *p = buf;
	struct rs_iomap iom;
	size_t left = count;
	int have = 0, ret = 0;

	if (!rs)
		return rs_err(EBADF);
	pthread_mutex_lock(&rs->slock);
	if (rs->iomap_pending)
		ret = rs_send_iomaps(rs, flags);
	while (!ret && left) {
		if (!have || (uint64_t)offset - iom.offset >= iom.sge.length) {
			have = rs_find_iomap(rs, offset, &iom);
			if (!have)
				break;
		}
		if (!rs_can_send(rs)) {
			ret = rs_wait(rs, rs_nonblocking(rs, flags), rs_conn_can_send);
			if (ret)
				break;
			if (!(rs->state & RS_WRITABLE)) {
				ret = rs_err(ECONNRESET);
				break;
			}
		}
		xfer = left < olen ? left : olen;
		if (olen < left && olen < RS_MAX_XFER)
			olen <<= 1;
		pthread_mutex_lock(&rs->lock);
		if (xfer > rs->sbuf_avail)
			xfer = rs->sbuf_avail;
		if (xfer > iom.offset + iom.sge.length - offset)
			xfer = iom.offset + iom.sge.length - offset;
		ret = rs_stage_send(rs, p, xfer, 1, iom.sge.addr + (offset - iom.offset), iom.sge.key, 0);
		pthread_mutex_unlock(&rs->lock);
		if (ret)
			break;
		p += xfer;
		offset += xfer;
		left -= xfer;
	}
	pthread_mutex_unlock(&rs->slock);
	return (ret && left == count) ? (size_t)ret : count - left;
}
