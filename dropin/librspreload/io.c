/* io.c: data calls on interposed sockets go to the rsocket's rsend and
 * rrecv; on any other fd, to libc. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <sys/sendfile.h>
#include <unistd.h>
#include <rdma/rsocket.h>

#include "preload.h"

PUBLIC ssize_t recv(int fd, void *buf, size_t len, int flags)
{
	struct rsref *r;

	preload_init();
	r = fd_ref(fd);
	return r ? rrecv(r->rs, buf, len, flags) : real.recv(fd, buf, len, flags);
}

PUBLIC ssize_t recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *sa, socklen_t *alen)
{
	struct rsref *r;

	preload_init();
	r = fd_ref(fd);
	return r ? rrecvfrom(r->rs, buf, len, flags, sa, alen) : real.recvfrom(fd, buf, len, flags, sa, alen);
}

PUBLIC ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	struct rsref *r;

	preload_init();
	r = fd_ref(fd);
	return r ? rrecvmsg(r->rs, msg, flags) : real.recvmsg(fd, msg, flags);
}

PUBLIC ssize_t read(int fd, void *buf, size_t len)
{
	struct rsref *r;

	preload_init();
	r = fd_ref(fd);
	return r ? rread(r->rs, buf, len) : real.read(fd, buf, len);
}

PUBLIC ssize_t readv(int fd, const struct iovec *iov, int n)
{
	struct rsref *r;

	preload_init();
	r = fd_ref(fd);
	return r ? rreadv(r->rs, iov, n) : real.readv(fd, iov, n);
}

PUBLIC ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	struct rsref *r;

	preload_init();
	r = fd_ref(fd);
	return r ? rsend(r->rs, buf, len, flags) : real.send(fd, buf, len, flags);
}

PUBLIC ssize_t sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *sa, socklen_t alen)
{
	struct rsref *r;

	preload_init();
	r = fd_ref(fd);
	return r ? rsendto(r->rs, buf, len, flags, sa, alen) : real.sendto(fd, buf, len, flags, sa, alen);
}

PUBLIC ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	struct rsref *r;

	preload_init();
	r = fd_ref(fd);
	return r ? rsendmsg(r->rs, msg, flags) : real.sendmsg(fd, msg, flags);
}

PUBLIC ssize_t write(int fd, const void *buf, size_t len)
{
	struct rsref *r;

	preload_init();
	r = fd_ref(fd);
	return r ? rwrite(r->rs, buf, len) : real.write(fd, buf, len);
}

PUBLIC ssize_t writev(int fd, const struct iovec *iov, int n)
{
	struct rsref *r;

	preload_init();
	r = fd_ref(fd);
	return r ? rwritev(r->rs, iov, n) : real.writev(fd, iov, n);
}

/* sendfile to an rsocket: read the file and send what was read. */
PUBLIC ssize_t sendfile(int out, int in, off_t *off, size_t count)
{
	static __thread char buf[65536];
	struct rsref *r;
	ssize_t n, sent;

	preload_init();
	r = fd_ref(out);
	if (!r)
		return real.sendfile(out, in, off, count);
	if (count > sizeof(buf))
		count = sizeof(buf);
	n = off ? pread(in, buf, count, *off) : real.read(in, buf, count);
	if (n <= 0)
		return n;
	sent = rsend(r->rs, buf, n, 0);
	if (sent > 0 && off)
		*off += sent;
	else if (sent > 0 && sent < n)
		lseek(in, sent - n, SEEK_CUR);
	return sent;
}
