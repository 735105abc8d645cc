/* rsocket.c: the rsocket API is not served yet (see README.md): every call
 * fails with ENOSYS, so that rstream, riostream, rcopy and librspreload
 * fail cleanly instead of not loading. rpoll and rselect serve ordinary
 * descriptors (rping and ucmatose poll their event channels with them), as
 * librdmacm's do for descriptors that are not rsockets. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <rdma/rsocket.h>

#define NOSYS(ret) do { errno = ENOSYS; return ret; } while (0)

int rsocket(int domain, int type, int protocol) { NOSYS(-1); }
int rbind(int socket, const struct sockaddr *addr, socklen_t addrlen) { NOSYS(-1); }
int rlisten(int socket, int backlog) { NOSYS(-1); }
int raccept(int socket, struct sockaddr *addr, socklen_t *addrlen) { NOSYS(-1); }
int rconnect(int socket, const struct sockaddr *addr, socklen_t addrlen) { NOSYS(-1); }
int rshutdown(int socket, int how) { NOSYS(-1); }
int rclose(int socket) { NOSYS(-1); }
ssize_t rrecv(int socket, void *buf, size_t len, int flags) { NOSYS(-1); }
ssize_t rrecvfrom(int socket, void *buf, size_t len, int flags, struct sockaddr *src_addr, socklen_t *addrlen) { NOSYS(-1); }
ssize_t rrecvmsg(int socket, struct msghdr *msg, int flags) { NOSYS(-1); }
ssize_t rsend(int socket, const void *buf, size_t len, int flags) { NOSYS(-1); }
ssize_t rsendto(int socket, const void *buf, size_t len, int flags, const struct sockaddr *dest_addr, socklen_t addrlen) { NOSYS(-1); }
ssize_t rsendmsg(int socket, const struct msghdr *msg, int flags) { NOSYS(-1); }
ssize_t rread(int socket, void *buf, size_t count) { NOSYS(-1); }
ssize_t rreadv(int socket, const struct iovec *iov, int iovcnt) { NOSYS(-1); }
ssize_t rwrite(int socket, const void *buf, size_t count) { NOSYS(-1); }
ssize_t rwritev(int socket, const struct iovec *iov, int iovcnt) { NOSYS(-1); }
int rgetpeername(int socket, struct sockaddr *addr, socklen_t *addrlen) { NOSYS(-1); }
int rgetsockname(int socket, struct sockaddr *addr, socklen_t *addrlen) { NOSYS(-1); }
int rsetsockopt(int socket, int level, int optname, const void *optval, socklen_t optlen) { NOSYS(-1); }
int rgetsockopt(int socket, int level, int optname, void *optval, socklen_t *optlen) { NOSYS(-1); }
int rfcntl(int socket, int cmd, ... /* arg */) { NOSYS(-1); }
off_t riomap(int socket, void *buf, size_t len, int prot, int flags, off_t offset) { NOSYS(-1); }
int riounmap(int socket, void *buf, size_t len) { NOSYS(-1); }
size_t riowrite(int socket, const void *buf, size_t count, off_t offset, int flags) { errno = ENOSYS; return 0; }

int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	return poll(fds, nfds, timeout);
}

int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds, struct timeval *timeout)
{
	return select(nfds, readfds, writefds, exceptfds, timeout);
}
