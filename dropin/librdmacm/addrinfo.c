/* addrinfo.c: rdma_getaddrinfo and the endpoint calls built on it
 * (rdma_create_ep, rdma_destroy_ep), as librdmacm's: getaddrinfo's first
 * result, the QP type and port space from the hints or the socket type. */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#include "cma.h"

int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
		     struct rdma_addrinfo **res)
{
	struct addrinfo ai_hints, *ai;
	struct rdma_addrinfo *r;
	int ret;

	memset(&ai_hints, 0, sizeof(ai_hints));
	if (hints) {
		ai_hints.ai_family = hints->ai_family;
		if (hints->ai_flags & RAI_PASSIVE)
			ai_hints.ai_flags |= AI_PASSIVE;
		if (hints->ai_flags & RAI_NUMERICHOST)
			ai_hints.ai_flags |= AI_NUMERICHOST;
		ai_hints.ai_socktype = hints->ai_qp_type == IBV_QPT_UD || hints->ai_port_space == RDMA_PS_UDP
					       ? SOCK_DGRAM : SOCK_STREAM;
	} else {
		ai_hints.ai_socktype = SOCK_STREAM;
	}
	if (!node && ai_hints.ai_family == AF_UNSPEC && (ai_hints.ai_flags & AI_PASSIVE))
		ai_hints.ai_family = AF_INET; /* the wildcard rdma_cm listens on either way */
	ret = getaddrinfo(node, service, &ai_hints, &ai);
	if (ret)
		return ret;
	r = calloc(1, sizeof(*r));
	if (!r) {
		freeaddrinfo(ai);
		return EAI_MEMORY;
	}
	r->ai_flags = hints ? hints->ai_flags : 0;
	r->ai_family = ai->ai_family;
	if (hints && hints->ai_qp_type)
		r->ai_qp_type = hints->ai_qp_type;
	else
		r->ai_qp_type = ai->ai_socktype == SOCK_DGRAM ? IBV_QPT_UD : IBV_QPT_RC;
	if (hints && hints->ai_port_space)
		r->ai_port_space = hints->ai_port_space;
	else
		r->ai_port_space = r->ai_qp_type == IBV_QPT_UD ? RDMA_PS_UDP : RDMA_PS_TCP;
	{
		struct sockaddr *sa = malloc(ai->ai_addrlen);
		if (!sa) {
			freeaddrinfo(ai);
			free(r);
			return EAI_MEMORY;
		}
		memcpy(sa, ai->ai_addr, ai->ai_addrlen);
		if (r->ai_flags & RAI_PASSIVE) {
			r->ai_src_addr = sa;
			r->ai_src_len = ai->ai_addrlen;
		} else {
			r->ai_dst_addr = sa;
			r->ai_dst_len = ai->ai_addrlen;
		}
	}
	if (hints && hints->ai_src_addr && !(r->ai_flags & RAI_PASSIVE)) {
		r->ai_src_addr = malloc(hints->ai_src_len);
		if (r->ai_src_addr) {
			memcpy(r->ai_src_addr, hints->ai_src_addr, hints->ai_src_len);
			r->ai_src_len = hints->ai_src_len;
		}
	}
	freeaddrinfo(ai);
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
