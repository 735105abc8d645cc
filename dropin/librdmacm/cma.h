/* cma.h: the drop-in librdmacm's private state. An rdma_cm_id is the first
 * member of a struct cma_id, an event the first of a struct cma_event, a
 * channel the first of a struct cma_channel, as in rdma-core's librdmacm,
 * so the public pointers lead back to them. */
#ifndef SOFTROCE_CMA_H
#define SOFTROCE_CMA_H

#include <pthread.h>
#include <stdint.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "proto.h"

/* A device rdma_cm ids use: opened once, with one PD every id shares
 * (id->verbs and id->pd), as librdmacm's cma_device. */
struct cma_device {
	char name[64];
	struct ibv_context *verbs;
	struct ibv_pd *pd;
};

struct cma_channel {
	struct rdma_event_channel ch; /* ch.fd: the daemon's eventfd */
	uint32_t handle;
};

struct cma_id {
	struct rdma_cm_id id;
	uint32_t handle;
	int sync; /* its own channel; calls wait for their event */
	pthread_mutex_t mut;
	pthread_cond_t cond;
	int events_delivered, events_acked;
	/* conn_param values to apply to the QP (0xff: the daemon's) */
	uint8_t resp_res, init_depth;
	struct ibv_qp_init_attr *qp_init_attr; /* rdma_create_ep, passive */
	struct ibv_sa_path_rec path;
	int own_cqs; /* rdma_create_qp made the CQs and channels */
	struct ibv_srq_init_attr srq_attr;
};

struct cma_event {
	struct rdma_cm_event event;
	uint8_t private_data[256];
	struct cma_id *id, *listen;
};

/* cma.c */
int cma_call(uint32_t op, const void *body, uint32_t len, void *out, uint32_t outlen, int *fd_out);
int cma_err(int err); /* sets errno to err, returns -1 (0 for 0) */
struct cma_id *cma_find(uint32_t handle);
struct cma_id *cma_new_id(struct rdma_event_channel *ch, void *context, enum rdma_port_space ps,
			  enum ibv_qp_type qp_type, uint32_t handle);
void cma_apply_route(struct cma_id *c, const struct sr_cm_route *r);
int cma_query_route(struct cma_id *c);
struct rdma_event_channel *cma_private_channel(void);

/* events.c */
int cma_complete(struct cma_id *c); /* sync ids: wait for the call's event */

/* qp.c */
int cma_modify_qp(struct cma_id *c, enum ibv_qp_state state, int override_rd);
void cma_ah_from_wire(struct ibv_ah_attr *a, const struct sr_ah_attr *w);

#endif
