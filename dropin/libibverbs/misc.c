/* misc.c: verbs with a fixed answer on softroce. */
#include <errno.h>
#include <sys/stat.h>

#include <infiniband/verbs.h>

/* ECE (enhanced connection establishment) is a vendor extension softroce
 * does not have: EOPNOTSUPP, as rdma-core answers for such a provider. */
int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp;
	(void)ece;
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp;
	(void)ece;
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

/* ibv_query_qp_data_in_order: 0 ("no guarantee"), what rdma-core returns
 * when the provider cannot tell. */
int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	(void)qp;
	(void)op;
	(void)flags;
	return 0;
}

/* Sharing a context, PD, MR or device memory with another process
 * (ibv_import_*) needs the kernel's object handles; softroce's daemon
 * serves one socket per context and shares nothing across them, so it
 * answers as rdma-core does for a provider without import support:
 * EOPNOTSUPP (EINVAL first for an fd that is not open, as rdma-core's
 * fstat check). pyverbs' test_shared_pd skips on it. */
struct ibv_context *ibv_import_device(int cmd_fd)
{
	struct stat st;

	errno = fstat(cmd_fd, &st) ? EINVAL : EOPNOTSUPP;
	return NULL;
}

struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle)
{
	(void)context;
	(void)pd_handle;
	errno = EOPNOTSUPP;
	return NULL;
}

struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
	(void)pd;
	(void)mr_handle;
	errno = EOPNOTSUPP;
	return NULL;
}

struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle)
{
	(void)context;
	(void)dm_handle;
	errno = EOPNOTSUPP;
	return NULL;
}

/* Nothing can have been imported, so there is nothing to unimport. */
void ibv_unimport_pd(struct ibv_pd *pd)
{
	(void)pd;
}

void ibv_unimport_mr(struct ibv_mr *mr)
{
	(void)mr;
}

void ibv_unimport_dm(struct ibv_dm *dm)
{
	(void)dm;
}

/* dma-buf registration needs memory softroce's daemon cannot map from the
 * exporter (a GPU's): EOPNOTSUPP, as from a provider without reg_dmabuf_mr. */
struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
				 uint64_t iova, int fd, int access)
{
	(void)pd;
	(void)offset;
	(void)length;
	(void)iova;
	(void)fd;
	(void)access;
	errno = EOPNOTSUPP;
	return NULL;
}

/* verbs_register_driver_34 (IBVERBS_PRIVATE_34) is what the constructors of
 * provider libraries (libmlx5, libefa, which perftest links) call: softroce
 * has no providers, so registering does nothing, silently. */
void verbs_register_driver_34(const void *ops)
{
	(void)ops;
}
