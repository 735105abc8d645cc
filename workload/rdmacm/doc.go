// Package rdmacm runs librdmacm's rdma_server and rdma_client examples on a
// verbs context: the two connect with the connection manager (no
// out-of-band socket), the client SENDs 16 bytes, the server SENDs 16 back,
// and both disconnect. Either side may be the C program on kernel rxe or a
// real RNIC; the output lines are the programs' own.
package rdmacm
