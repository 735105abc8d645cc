/* context.h: softroce's device and context objects, shared by the files that
 * implement verbs on them. */
#ifndef SOFTROCE_CONTEXT_H
#define SOFTROCE_CONTEXT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

struct sr_device {
	struct ibv_device dev;  /* first: programs see only this */
	uint32_t index;         /* the daemon's device number */
	uint8_t node_guid[8];
};

struct sr_context {
	struct verbs_context vctx; /* first: ibv_context is its last member */
	uint32_t index;
	pthread_mutex_t lock;      /* one call at a time on cmd_fd */
};

static inline struct sr_context *to_sr(struct ibv_context *ctx)
{
	return (struct sr_context *)((char *)ctx - offsetof(struct sr_context, vctx.context));
}

static inline struct sr_device *to_srdev(struct ibv_device *dev)
{
	return (struct sr_device *)dev;
}

/* sr_ctx_call makes a control call on ctx's socket (proto.h); it returns 0
 * or an errno value. */
int sr_ctx_call(struct ibv_context *ctx, uint32_t op, uint32_t port,
		uint32_t index, void *out, uint32_t outlen);

#endif
