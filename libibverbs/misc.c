/* misc.c: verbs with a fixed answer on softroce. */
#include <errno.h>

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

/* verbs_register_driver_34 (IBVERBS_PRIVATE_34) is what the constructors of
 * provider libraries (libmlx5, libefa, which perftest links) call: softroce
 * has no providers, so registering does nothing, silently. */
void verbs_register_driver_34(const void *ops)
{
	(void)ops;
}
