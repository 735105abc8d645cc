package rdmacm

import (
	"context"
	"fmt"
	"io"
	"net/netip"

	"github.com/softroce/softroce/verbsapi"
)

// DefaultPort is rdma_server's and rdma_client's rdma_cm port.
const DefaultPort = 7471

// MsgLen is the size of the message each side sends.
const MsgLen = 16

// endpoint is what rdma_create_ep makes: a PD, one CQ for both queues and
// an RC QP with one send and one receive, every send signaled, 16 bytes
// inline, and a buffer for the message each way.
type endpoint struct {
	pd   *verbsapi.PD
	cq   *verbsapi.CQ
	qp   *verbsapi.QP
	mr   *verbsapi.MR
	sent []byte
}

func newEndpoint(c *verbsapi.Context) (*endpoint, error) {
	e := &endpoint{}
	var err error
	if e.pd, err = c.AllocPD(); err != nil {
		return nil, err
	}
	if e.cq, err = c.CreateCQ(2, nil); err != nil {
		return nil, err
	}
	if e.qp, err = e.pd.CreateQP(verbsapi.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, QPType: verbsapi.RC, SigAll: true,
		Cap: verbsapi.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: MsgLen}}); err != nil {
		return nil, err
	}
	if e.mr, err = e.pd.RegMR(make([]byte, MsgLen), verbsapi.AccessLocalWrite); err != nil {
		return nil, err
	}
	// rdma_server and rdma_client send their (zeroed) static buffer.
	e.sent = make([]byte, MsgLen)
	return e, nil
}

// postRecv posts the receive of the peer's message, before connecting, as
// the programs do.
func (e *endpoint) postRecv() error {
	return e.qp.PostRecv(&verbsapi.RecvWR{ID: 1, SGL: []verbsapi.SGE{e.mr.SGE(0, MsgLen)}})
}

// send sends the message inline and waits for its completion.
func (e *endpoint) send(ctx context.Context) error {
	if err := e.qp.PostSend(&verbsapi.SendWR{ID: 2, Opcode: verbsapi.WRSend, Flags: verbsapi.SendInline | verbsapi.SendSignaled,
		Inline: e.sent}); err != nil {
		return fmt.Errorf("rdma_post_send: %w", err)
	}
	return e.wait(ctx, verbsapi.WCSend, "rdma_get_send_comp")
}

// wait waits for one completion of kind op.
func (e *endpoint) wait(ctx context.Context, op verbsapi.WCOpcode, what string) error {
	wc := make([]verbsapi.WC, 1)
	if _, err := e.cq.PollWait(ctx, wc); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if wc[0].Status != verbsapi.WCSuccess {
		return fmt.Errorf("%s: %v", what, wc[0].Status)
	}
	if wc[0].Opcode != op {
		return fmt.Errorf("%s: completion of %v, want %v", what, wc[0].Opcode, op)
	}
	return nil
}

// Server is rdma_server: it listens on port, accepts one connection,
// receives the client's message, answers, and disconnects.
func Server(ctx context.Context, c *verbsapi.Context, out io.Writer, port uint16) error {
	fmt.Fprintln(out, "rdma_server: start")
	err := server(ctx, c, port)
	status := 0
	if err != nil {
		fmt.Fprintln(out, err)
		status = -1
	}
	fmt.Fprintf(out, "rdma_server: end %d\n", status)
	return err
}

func server(ctx context.Context, c *verbsapi.Context, port uint16) error {
	l, err := c.ListenCM(port)
	if err != nil {
		return fmt.Errorf("rdma_listen: %w", err)
	}
	defer l.Close()
	req, err := l.Accept(ctx)
	if err != nil {
		return fmt.Errorf("rdma_get_request: %w", err)
	}
	e, err := newEndpoint(c)
	if err != nil {
		_ = req.Reject(nil)
		return fmt.Errorf("rdma_create_ep: %w", err)
	}
	if err := e.qp.ModifyToInit(nil); err != nil {
		_ = req.Reject(nil)
		return fmt.Errorf("rdma_create_ep: %w", err)
	}
	if err := e.postRecv(); err != nil {
		_ = req.Reject(nil)
		return fmt.Errorf("rdma_post_recv: %w", err)
	}
	conn, err := req.Accept(ctx, e.qp, nil)
	if err != nil {
		return fmt.Errorf("rdma_accept: %w", err)
	}
	if err := e.wait(ctx, verbsapi.WCRecv, "rdma_get_recv_comp"); err != nil {
		_ = conn.Disconnect(ctx)
		return err
	}
	err = e.send(ctx)
	if derr := conn.Disconnect(ctx); err == nil && derr != nil {
		err = fmt.Errorf("rdma_disconnect: %w", derr)
	}
	return err
}

// Client is rdma_client: it connects to the server at to, sends its
// message, receives the answer and disconnects.
func Client(ctx context.Context, c *verbsapi.Context, out io.Writer, to netip.AddrPort) error {
	fmt.Fprintln(out, "rdma_client: start")
	err := client(ctx, c, to)
	status := 0
	if err != nil {
		fmt.Fprintln(out, err)
		status = -1
	}
	fmt.Fprintf(out, "rdma_client: end %d\n", status)
	return err
}

func client(ctx context.Context, c *verbsapi.Context, to netip.AddrPort) error {
	e, err := newEndpoint(c)
	if err != nil {
		return fmt.Errorf("rdma_create_ep: %w", err)
	}
	if err := e.qp.ModifyToInit(nil); err != nil {
		return fmt.Errorf("rdma_create_ep: %w", err)
	}
	if err := e.postRecv(); err != nil {
		return fmt.Errorf("rdma_post_recv: %w", err)
	}
	conn, err := c.DialCM(ctx, e.qp, to, nil)
	if err != nil {
		return fmt.Errorf("rdma_connect: %w", err)
	}
	if err := e.send(ctx); err != nil {
		_ = conn.Disconnect(ctx)
		return err
	}
	err = e.wait(ctx, verbsapi.WCRecv, "rdma_get_recv_comp")
	if derr := conn.Disconnect(ctx); err == nil && derr != nil {
		err = fmt.Errorf("rdma_disconnect: %w", derr)
	}
	return err
}
