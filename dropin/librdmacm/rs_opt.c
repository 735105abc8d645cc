/* rs_opt.c: rsockets' options, as librdmacm answers them: defaults from
 * /etc/rdma/rsocket, rsetsockopt/rgetsockopt, rfcntl, and keepalive (a
 * zero-length RDMA WRITE every TCP_KEEPIDLE seconds, sent by one thread
 * for all rsockets, so that a dead peer fails the connection through the
 * QP's retries). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rs.h"

#define RS_CONF_DIR "/etc/rdma/rsocket"

uint16_t rs_def_inline = RS_DEF_INLINE, rs_def_sqsize = RS_DEF_SQSIZE, rs_def_rqsize = RS_DEF_RQSIZE;
uint16_t rs_def_iomap_size;
uint32_t rs_def_mem = RS_DEF_MEM, rs_def_wmem = RS_DEF_MEM, rs_polling_us = RS_POLL_US;

/* The 8-bit encoding of the iomap size in the connection data: values up
 * to 128 as they are, larger ones in units of 256. */
int rs_value_to_scale(int value, int bits)
{
	return value <= (1 << (bits - 1)) ? value : (1 << (bits - 1)) | (value >> bits);
}

int rs_scale_to_value(int value, int bits)
{
	return value <= (1 << (bits - 1)) ? value : (value & ~(1 << (bits - 1))) << bits;
}

static void conf_u32(const char *name, uint32_t *v)
{
	char path[128];
	unsigned u;
	FILE *f;

	snprintf(path, sizeof(path), RS_CONF_DIR "/%s", name);
	f = fopen(path, "r");
	if (!f)
		return;
	if (fscanf(f, "%u", &u) == 1)
		*v = u;
	fclose(f);
}

static void conf_u16(const char *name, uint16_t *v)
{
	uint32_t u = *v;

	conf_u32(name, &u);
	*v = u > 0xffff ? 0xffff : u;
}

static void read_conf(void)
{
	conf_u32("polling_time", &rs_polling_us);
	conf_u16("inline_default", &rs_def_inline);
	conf_u16("sqsize_default", &rs_def_sqsize);
	conf_u16("rqsize_default", &rs_def_rqsize);
	conf_u32("mem_default", &rs_def_mem);
	conf_u32("wmem_default", &rs_def_wmem);
	conf_u16("iomap_size", &rs_def_iomap_size);
	if (rs_def_mem < 2 * RS_SNDLOWAT)
		rs_def_mem = 2 * RS_SNDLOWAT;
	if (rs_def_wmem < RS_SNDLOWAT)
		rs_def_wmem = RS_SNDLOWAT << 1;
	rs_def_iomap_size = rs_scale_to_value((uint8_t)rs_value_to_scale(rs_def_iomap_size, 8), 8);
}

void rs_configure(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, read_conf);
}

/* Keepalive: a list of rsockets with a due time each, one thread. */
struct ka {
	struct rsock *rs;
	struct ka *next;
};
static pthread_mutex_t ka_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ka_cond = PTHREAD_COND_INITIALIZER;
static struct ka *ka_list;
static int ka_running;

static uint64_t now_s(void)
{
	return rs_now_us() / 1000000;
}

static void ka_send(struct rsock *rs)
{
	pthread_mutex_lock(&rs->lock);
	if (rs_ctrl_avail(rs) && (rs->state & RS_CONNECTED)) {
		rs->ctrl_seqno++;
		rs_post_write(rs, NULL, 0, RS_MSG(RS_OP_CTRL, RS_CTRL_KEEPALIVE), 0, 0, 0, 0);
	}
	pthread_mutex_unlock(&rs->lock);
}

static void *ka_run(void *arg)
{
	struct timespec ts;
	struct ka *k;
	uint64_t now, next;

	pthread_mutex_lock(&ka_lock);
	for (;;) {
		now = now_s();
		next = now + 3600;
		for (k = ka_list; k; k = k->next) {
			if (k->rs->keepalive_due <= now) {
				ka_send(k->rs);
				k->rs->keepalive_due = now + k->rs->keepalive_time;
			}
			if (k->rs->keepalive_due < next)
				next = k->rs->keepalive_due;
		}
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += next - now;
		pthread_cond_timedwait(&ka_cond, &ka_lock, &ts);
	}
	return NULL;
}

static int rs_keepalive_start(struct rsock *rs)
{
	struct ka *k;
	pthread_t t;
	int err = 0;

	pthread_mutex_lock(&ka_lock);
	if (!rs->keepalive) {
		k = calloc(1, sizeof(*k));
		if (!k) {
			pthread_mutex_unlock(&ka_lock);
			return ENOMEM;
		}
		if (!ka_running) {
			pthread_attr_t a;

			pthread_attr_init(&a);
			pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
			err = pthread_create(&t, &a, ka_run, NULL);
			pthread_attr_destroy(&a);
			if (err) {
				free(k);
				pthread_mutex_unlock(&ka_lock);
				return err;
			}
			ka_running = 1;
		}
		k->rs = rs;
		k->next = ka_list;
		ka_list = k;
		rs->keepalive = 1;
	}
	rs->keepalive_due = now_s() + rs->keepalive_time;
	pthread_cond_signal(&ka_cond);
	pthread_mutex_unlock(&ka_lock);
	return 0;
}

void rs_keepalive_stop(struct rsock *rs)
{
	struct ka **pk, *k;

	pthread_mutex_lock(&ka_lock);
	for (pk = &ka_list; (k = *pk); pk = &k->next) {
		if (k->rs == rs) {
			*pk = k->next;
			free(k);
			break;
		}
	}
	rs->keepalive = 0;
	pthread_mutex_unlock(&ka_lock);
}

static unsigned default_keepalive_time(void)
{
	unsigned t = 7200;
	FILE *f = fopen("/proc/sys/net/ipv4/tcp_keepalive_time", "r");

	if (f) {
		if (fscanf(f, "%u", &t) != 1)
			t = 7200;
		fclose(f);
	}
	return t;
}

static void set_bit(uint64_t *opts, int optname, int on)
{
	if (optname < 0 || optname > 63)
		return;
	if (on)
		*opts |= 1ULL << optname;
	else
		*opts &= ~(1ULL << optname);
}

static int get_bit(uint64_t opts, int optname)
{
	return optname >= 0 && optname < 64 && (opts >> optname) & 1;
}

int rsetsockopt(int socket, int level, int optname, const void *optval, socklen_t optlen)
{
	struct rsock *rs = rs_get(socket);
	int ival;

	if (!rs)
		return rs_err(EBADF);
	if (!optval || optlen < sizeof(int))
		return rs_err(EINVAL);
	memcpy(&ival, optval, sizeof(ival));
	if (rs->type == SOCK_DGRAM) {
		/* The UDP socket takes the socket options (librdmacm's way);
		 * the buffer sizes size the QP too, before it exists. */
		if (level != SOL_RDMA && setsockopt(rs->udp, level, optname, optval, optlen))
			return -1;
		if (level == SOL_SOCKET && !rs->did && ival > 0) {
			if (optname == SO_RCVBUF)
				rs->rq_size = (ival << 1) / RS_SNDLOWAT > 2 ? (ival << 1) / RS_SNDLOWAT : 2;
			if (optname == SO_SNDBUF)
				rs->sq_size = (ival << 1) / RS_SNDLOWAT > 2 ? (ival << 1) / RS_SNDLOWAT : 2;
		}
		if (level != SOL_RDMA)
			return 0;
	}
	switch (level) {
	case SOL_SOCKET:
		switch (optname) {
		case SO_REUSEADDR:
			rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, (void *)optval, optlen);
			set_bit(&rs->so_opts, optname, ival);
			return 0;
		case SO_RCVBUF:
			if (!rs->rbuf) {
				rs->rbuf_size = (uint32_t)ival << 1;
				if (rs->rbuf_size < 2 * RS_SNDLOWAT)
					rs->rbuf_size = 2 * RS_SNDLOWAT;
			}
			return 0;
		case SO_SNDBUF:
			if (!rs->sbuf) {
				rs->sbuf_size = (uint32_t)ival << 1;
				if (rs->sbuf_size < RS_SNDLOWAT)
					rs->sbuf_size = RS_SNDLOWAT << 1;
			}
			return 0;
		case SO_LINGER:
			if (optlen < sizeof(struct linger))
				return rs_err(EINVAL);
			/* stored inverted: the default (0) is on */
			set_bit(&rs->so_opts, optname, !((const struct linger *)optval)->l_onoff);
			return 0;
		case SO_KEEPALIVE: {
			int err;

			if (!ival) {
				rs_keepalive_stop(rs);
				set_bit(&rs->so_opts, optname, 0);
				return 0;
			}
			if (!rs->keepalive_time)
				rs->keepalive_time = default_keepalive_time();
			err = rs_keepalive_start(rs);
			if (err)
				return rs_err(err);
			set_bit(&rs->so_opts, optname, 1);
			return 0;
		}
		case SO_OOBINLINE:
			set_bit(&rs->so_opts, optname, ival);
			return 0;
		}
		break;
	case IPPROTO_IP:
		if (optname == IP_TOS) {
			rs->tos = ival;
			return rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, (void *)optval, optlen);
		}
		break;
	case IPPROTO_TCP:
		switch (optname) {
		case TCP_KEEPCNT:
		case TCP_KEEPINTVL:
		case TCP_MAXSEG:
		case TCP_CONGESTION:
			return 0; /* nothing to do on a reliable connection */
		case TCP_KEEPIDLE:
			if (ival <= 0)
				return rs_err(EINVAL);
			rs->keepalive_time = ival;
			if (rs->keepalive)
				return rs_keepalive_start(rs) ? rs_err(ENOMEM) : 0;
			return 0;
		case TCP_NODELAY:
			set_bit(&rs->tcp_opts, optname, ival);
			return 0;
		}
		break;
	case IPPROTO_IPV6:
		if (optname == IPV6_V6ONLY) {
			rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, (void *)optval, optlen);
			set_bit(&rs->ipv6_opts, optname, ival);
			return 0;
		}
		break;
	case SOL_RDMA:
		if (rs->state >= RS_OPENING)
			return rs_err(EINVAL);
		switch (optname) {
		case RDMA_SQSIZE:
			rs->sq_size = (uint32_t)ival > RS_QP_MAX_SIZE ? RS_QP_MAX_SIZE : (uint32_t)ival;
			return 0;
		case RDMA_RQSIZE:
			rs->rq_size = (uint32_t)ival > RS_QP_MAX_SIZE ? RS_QP_MAX_SIZE : (uint32_t)ival;
			return 0;
		case RDMA_INLINE:
			rs->sq_inline = (uint32_t)ival > RS_QP_MAX_SIZE ? RS_QP_MAX_SIZE : (uint32_t)ival;
			return 0;
		case RDMA_IOMAPSIZE:
			rs->target_iomap_size = rs_scale_to_value((uint8_t)rs_value_to_scale(ival, 8), 8);
			return 0;
		case RDMA_ROUTE:
			free(rs->route);
			rs->route = malloc(optlen);
			if (!rs->route)
				return rs_err(ENOMEM);
			memcpy(rs->route, optval, optlen);
			rs->route_len = optlen;
			return 0;
		}
		break;
	}
	return rs_err(ENOTSUP);
}

static int put_int(void *optval, socklen_t *optlen, int v)
{
	if (!optval || !optlen || *optlen < sizeof(int))
		return rs_err(EINVAL);
	memcpy(optval, &v, sizeof(v));
	*optlen = sizeof(int);
	return 0;
}

int rgetsockopt(int socket, int level, int optname, void *optval, socklen_t *optlen)
{
	struct rsock *rs = rs_get(socket);
	int v;

	if (!rs)
		return rs_err(EBADF);
	if (rs->type == SOCK_DGRAM && level != SOL_RDMA)
		return getsockopt(rs->udp, level, optname, optval, optlen);
	switch (level) {
	case SOL_SOCKET:
		switch (optname) {
		case SO_REUSEADDR:
		case SO_KEEPALIVE:
		case SO_OOBINLINE:
			return put_int(optval, optlen, get_bit(rs->so_opts, optname));
		case SO_RCVBUF:
			return put_int(optval, optlen, rs->rbuf_size);
		case SO_SNDBUF:
			return put_int(optval, optlen, rs->sbuf_size);
		case SO_LINGER: {
			struct linger l = { .l_onoff = !get_bit(rs->so_opts, optname), .l_linger = 0 };

			if (!optval || !optlen || *optlen < sizeof(l))
				return rs_err(EINVAL);
			memcpy(optval, &l, sizeof(l));
			*optlen = sizeof(l);
			return 0;
		}
		case SO_ERROR:
			v = rs->err;
			rs->err = 0;
			return put_int(optval, optlen, v);
		case SO_TYPE:
			return put_int(optval, optlen, SOCK_STREAM);
		}
		break;
	case IPPROTO_IP:
		if (optname == IP_TOS)
			return put_int(optval, optlen, rs->tos);
		break;
	case IPPROTO_TCP:
		switch (optname) {
		case TCP_KEEPCNT:
		case TCP_KEEPINTVL:
			return put_int(optval, optlen, 1);
		case TCP_KEEPIDLE:
			return put_int(optval, optlen, rs->keepalive_time);
		case TCP_NODELAY:
			return put_int(optval, optlen, get_bit(rs->tcp_opts, optname));
		case TCP_MAXSEG:
			return put_int(optval, optlen,
				       rs->id->route.num_paths ? 1 << (7 + rs->id->route.path_rec->mtu) : 2048);
		case TCP_INFO: {
			struct tcp_info ti;

			if (!optval || !optlen)
				return rs_err(EINVAL);
			memset(&ti, 0, sizeof(ti));
			ti.tcpi_state = (rs->state & RS_CONNECTED) ? TCP_ESTABLISHED : TCP_CLOSE;
			ti.tcpi_snd_cwnd = rs->sq_size;
			memcpy(optval, &ti, *optlen < sizeof(ti) ? *optlen : sizeof(ti));
			*optlen = *optlen < sizeof(ti) ? *optlen : sizeof(ti);
			return 0;
		}
		}
		break;
	case IPPROTO_IPV6:
		if (optname == IPV6_V6ONLY)
			return put_int(optval, optlen, get_bit(rs->ipv6_opts, optname));
		break;
	case SOL_RDMA:
		switch (optname) {
		case RDMA_SQSIZE:
			return put_int(optval, optlen, rs->sq_size);
		case RDMA_RQSIZE:
			return put_int(optval, optlen, rs->rq_size);
		case RDMA_INLINE:
			return put_int(optval, optlen, rs->sq_inline);
		case RDMA_IOMAPSIZE:
			return put_int(optval, optlen, rs->target_iomap_size);
		}
		break;
	}
	return rs_err(ENOTSUP);
}

int rfcntl(int socket, int cmd, ... /* arg */)
{
	struct rsock *rs = rs_get(socket);
	va_list ap;
	int arg;

	if (!rs)
		return rs_err(EBADF);
	switch (cmd) {
	case F_GETFL:
		return rs->fs_flags;
	case F_SETFL:
		va_start(ap, cmd);
		arg = va_arg(ap, int);
		va_end(ap);
		if (rs->type == SOCK_STREAM && (rs->state == RS_LISTENING || (rs->state & RS_OPENING)) &&
		    rs_set_fd_nonblock(rs->id->channel->fd, arg & O_NONBLOCK))
			return -1;
		rs->fs_flags = arg;
		return 0;
	case F_GETFD:
		return rs->fd_flags;
	case F_SETFD:
		va_start(ap, cmd);
		rs->fd_flags = va_arg(ap, int);
		va_end(ap);
		return 0;
	}
	return rs_err(ENOTSUP);
}
