/* pd.c: protection domains. */
#include <errno.h>
#include <stdlib.h>

#include "context.h"

struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
	struct sr_handle h;
	struct ibv_pd *pd;
	int err;

	pd = calloc(1, sizeof(*pd));
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	err = sr_ctx_call(ctx, SR_OP_ALLOC_PD, NULL, 0, &h, sizeof(h));
	if (err) {
		free(pd);
		errno = err;
		return NULL;
	}
	pd->context = ctx;
	pd->handle = h.handle;
	return pd;
}

/* ibv_dealloc_pd fails (EBUSY from the daemon) while objects use the PD. */
int ibv_dealloc_pd(struct ibv_pd *pd)
{
	struct sr_handle h = { pd->handle };
	int err = sr_ctx_call(pd->context, SR_OP_DEALLOC_PD, &h, sizeof(h), NULL, 0);

	if (err)
		return errno = err, err;
	free(pd);
	return 0;
}
