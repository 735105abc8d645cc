/* addrinfo.c: rdma_getaddrinfo and the endpoint calls built on it
 * (rdma_create_ep, rdma_destroy_ep), as librdmacm's: getaddrinfo's first
 * result, the QP type and port space from the hints or the socket type. */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#include "cma.h"

/* copy_addr duplicates an address for a result, which owns its memory. */
static int copy_addr(struct sockaddr **dst, socklen_t *dst_len, const struct sockaddr *src, socklen_t len)
{
	*dst = malloc(len);
	if (!*dst)
		return ENOMEM;
	memcpy(*dst, src, len);
	*dst_len = len;
	return 0;
}

/* rdma_getaddrinfo resolves node and service as getaddrinfo does (returning
 * its EAI_ code on failure) into one result: the address becomes the
 * source of a passive result and the destination of an active one. With
 * neither node nor service, the result carries the hints' own addresses,
 * which is how libfabric's verbs provider asks for a listener on a given
 * source address. A source address in the hints is kept whenever the
 * lookup gave none. */
int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
		     struct rdma_addrinfo **res)
{
	static const struct rdma_addrinfo nohints;
	struct addrinfo ai_hints, *ai = NULL;
	struct rdma_addrinfo *r;
	int ret = 0;

	if (!hints)
		hints = &nohints;
	if (!node && !service && !hints->ai_src_len && !hints->ai_dst_len)
		return errno = EINVAL, -1;
	if (node || service) {
		memset(&ai_hints, 0, sizeof(ai_hints));
		ai_hints.ai_family = hints->ai_family;
		if (hints->ai_flags & RAI_PASSIVE)
			ai_hints.ai_flags |= AI_PASSIVE;
		if (hints->ai_flags & RAI_NUMERICHOST)
			ai_hints.ai_flags |= AI_NUMERICHOST;
		ai_hints.ai_socktype = hints->ai_qp_type == IBV_QPT_UD || hints->ai_port_space == RDMA_PS_UDP
					       ? SOCK_DGRAM : SOCK_STREAM;
		if (!node && ai_hints.ai_family == AF_UNSPEC && (ai_hints.ai_flags & AI_PASSIVE))
			ai_hints.ai_family = AF_INET; /* the wildcard rdma_cm listens on either way */
		ret = getaddrinfo(node, service, &ai_hints, &ai);
		if (ret)
			return ret;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		if (ai)
			freeaddrinfo(ai);
		return EAI_MEMORY;
	}
	r->ai_flags = hints->ai_flags;
	r->ai_family = ai ? ai->ai_family : hints->ai_family;
	if (hints->ai_qp_type)
		r->ai_qp_type = hints->ai_qp_type;
	else
		r->ai_qp_type = ai && ai->ai_socktype == SOCK_DGRAM ? IBV_QPT_UD : IBV_QPT_RC;
	if (hints->ai_port_space)
		r->ai_port_space = hints->ai_port_space;
	else
		r->ai_port_space = r->ai_qp_type == IBV_QPT_UD ? RDMA_PS_UDP : RDMA_PS_TCP;
	if (ai) {
		if (r->ai_flags & RAI_PASSIVE)
			ret = copy_addr(&r->ai_src_addr, &r->ai_src_len, ai->ai_addr, ai->ai_addrlen);
		else
			ret = copy_addr(&r->ai_dst_addr, &r->ai_dst_len, ai->ai_addr, ai->ai_addrlen);
		freeaddrinfo(ai);
	} else if (hints->ai_dst_len) {
		ret = copy_addr(&r->ai_dst_addr, &r->ai_dst_len, hints->ai_dst_addr, hints->ai_dst_len);
	}
	if (!ret && !r->ai_src_len && hints->ai_src_len)
		ret = copy_addr(&r->ai_src_addr, &r->ai_src_len, hints->ai_src_addr, hints->ai_src_len);
	if (!r->ai_family && (r->ai_src_addr || r->ai_dst_addr))
		r->ai_family = (r->ai_src_addr ? r->ai_src_addr : r->ai_dst_addr)->sa_family;
	if (ret) {
		rdma_freeaddrinfo(r);
		return EAI_MEMORY;
	}
	*res = r;
	return 0;
}

void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	struct rdma_addrinfo *next;

	for (; res; res = next) {
		next = res->ai_next;
		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
	}
}

int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res, struct ibv_pd *pd,
		   struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_cm_id *cm_id;
	struct cma_id *c;
	int ret;

	ret = rdma_create_id(NULL, &cm_id, NULL, res->ai_port_space);
	if (ret)
		return ret;
	c = (struct cma_id *)cm_id;
	cm_id->qp_type = res->ai_qp_type;
	if (qp_init_attr)
		qp_init_attr->qp_type = res->ai_qp_type;
	if (res->ai_flags & RAI_PASSIVE) {
		ret = rdma_bind_addr(cm_id, res->ai_src_addr);
		if (ret)
			goto err;
		if (qp_init_attr) {
			c->qp_init_attr = malloc(sizeof(*qp_init_attr));
			if (!c->qp_init_attr) {
				errno = ENOMEM;
				ret = -1;
				goto err;
			}
			*c->qp_init_attr = *qp_init_attr;
		}
		if (pd)
			cm_id->pd = pd;
		*id = cm_id;
		return 0;
	}
	ret = rdma_resolve_addr(cm_id, res->ai_src_addr, res->ai_dst_addr, 2000);
	if (!ret)
		ret = rdma_resolve_route(cm_id, 2000);
	if (!ret && qp_init_attr)
		ret = rdma_create_qp(cm_id, pd, qp_init_attr);
	if (ret)
		goto err;
	*id = cm_id;
	return 0;
err: {
	int err = errno;
	rdma_destroy_ep(cm_id);
	errno = err;
	return -1;
}
}

void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (id->qp)
		rdma_destroy_qp(id);
	if (id->srq)
		rdma_destroy_srq(id);
	rdma_destroy_id(id);
}
