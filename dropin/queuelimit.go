package dropin

// queuelimit.go: how much memory the daemon gives programs' queues. The
// device advertises rxe's maxima (1,048,576 WRs per queue, 32 SGEs), and
// the engine allocates a queue whole when it is created, so one QP at the
// maxima costs the daemon about 1.9 GB and a second one could kill it,
// with every other program on it. Each program's QPs, SRQs and CQs are
// charged before they are created, against its own cap and the daemon's;
// past either the call fails with ENOMEM, as the kernel answers when it
// cannot allocate a queue, and the log says which cap and how to raise it.

import (
	"fmt"
	"syscall"
)

// reserveQueue counts n more queue bytes against the connection's and the
// daemon's caps, or refuses with ENOMEM and counts nothing. what names
// the object for the log. Called with c.mu held.
func (c *conn) reserveQueue(n int64, what string) syscall.Errno {
	conn, all := c.d.maxConnQueueBytes(), c.d.maxQueueBytes()
	if n > conn-c.queueBytes {
		return c.refuse(syscall.ENOMEM, "%s needs %d MiB of queue memory; this program has %d MiB of its %d MiB "+
			"(softroce daemon --max-program-queue-mem)", what, mib(n), mib(c.queueBytes), mib(conn))
	}
	for {
		used := c.d.queueBytes.Load()
		if n > all-used {
			return c.refuse(syscall.ENOMEM, "%s needs %d MiB of queue memory; all programs hold %d MiB of the daemon's %d MiB "+
				"(softroce daemon --max-queue-mem)", what, mib(n), mib(used), mib(all))
		}
		if c.d.queueBytes.CompareAndSwap(used, used+n) {
			break
		}
	}
	c.queueBytes += n
	return 0
}

// releaseQueue gives back n bytes reserveQueue counted. Called with c.mu
// held.
func (c *conn) releaseQueue(n int64) {
	c.queueBytes -= n
	c.d.queueBytes.Add(-n)
}

func mib(n int64) int64 { return (n + 1<<20 - 1) >> 20 }

// withinDevice reports whether sizes are within the device's maxima: a
// request beyond them is the device's to refuse (EINVAL, as the kernel
// checks the maxima before it allocates), not the quota's, so it is
// charged nothing.
func withinDevice(wr, sge, maxWR, maxSGE int) bool {
	return wr <= maxWR && sge <= maxSGE
}

// queueWhat names a QP request for the log.
func queueWhat(kind string, wr, sge int) string {
	return fmt.Sprintf("%s of %d WRs x %d SGEs", kind, wr, sge)
}
