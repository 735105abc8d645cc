package dropin

import "fmt"

// opName names an operation as proto.h does, for log lines.
func opName(op uint32) string {
	switch op {
	case opList:
		return "SR_OP_LIST"
	case opQueryDevice:
		return "SR_OP_QUERY_DEVICE"
	case opQueryPort:
		return "SR_OP_QUERY_PORT"
	case opQueryGID:
		return "SR_OP_QUERY_GID"
	case opQueryPKey:
		return "SR_OP_QUERY_PKEY"
	case opAsyncFD:
		return "SR_OP_ASYNC_FD"
	case opGetAsyncEvent:
		return "SR_OP_GET_ASYNC_EVENT"
	case opAllocPD:
		return "SR_OP_ALLOC_PD"
	case opDeallocPD:
		return "SR_OP_DEALLOC_PD"
	case opRegMR:
		return "SR_OP_REG_MR"
	case opDeregMR:
		return "SR_OP_DEREG_MR"
	case opReregMR:
		return "SR_OP_REREG_MR"
	case opAllocMW:
		return "SR_OP_ALLOC_MW"
	case opDeallocMW:
		return "SR_OP_DEALLOC_MW"
	case opCreateCompChannel:
		return "SR_OP_CREATE_COMP_CHANNEL"
	case opDestroyCompChannel:
		return "SR_OP_DESTROY_COMP_CHANNEL"
	case opGetCQEvent:
		return "SR_OP_GET_CQ_EVENT"
	case opCreateCQ:
		return "SR_OP_CREATE_CQ"
	case opDestroyCQ:
		return "SR_OP_DESTROY_CQ"
	case opResizeCQ:
		return "SR_OP_RESIZE_CQ"
	case opPollCQ:
		return "SR_OP_POLL_CQ"
	case opReqNotifyCQ:
		return "SR_OP_REQ_NOTIFY_CQ"
	case opCreateQP:
		return "SR_OP_CREATE_QP"
	case opModifyQP:
		return "SR_OP_MODIFY_QP"
	case opQueryQP:
		return "SR_OP_QUERY_QP"
	case opDestroyQP:
		return "SR_OP_DESTROY_QP"
	case opPostSend:
		return "SR_OP_POST_SEND"
	case opPostRecv:
		return "SR_OP_POST_RECV"
	case opDoorbell:
		return "SR_OP_DOORBELL"
	case opCreateSRQ:
		return "SR_OP_CREATE_SRQ"
	case opModifySRQ:
		return "SR_OP_MODIFY_SRQ"
	case opQuerySRQ:
		return "SR_OP_QUERY_SRQ"
	case opDestroySRQ:
		return "SR_OP_DESTROY_SRQ"
	case opPostSRQRecv:
		return "SR_OP_POST_SRQ_RECV"
	case opCreateAH:
		return "SR_OP_CREATE_AH"
	case opDestroyAH:
		return "SR_OP_DESTROY_AH"
	}
	return fmt.Sprintf("op %d", op)
}
