/* preload.h: softroce's librspreload.so, private. The library interposes
 * the socket calls of an unmodified program: a TCP socket (AF_INET or
 * AF_INET6, SOCK_STREAM) becomes an rsocket of the drop-in librdmacm.so.1,
 * every other descriptor goes on to libc. The program sees a descriptor of
 * its own for each rsocket (an open /dev/null, so the number is its and no
 * other open can take it); fdtab.c maps it to the rsocket.
 *
 * Beyond librdmacm's own preload library (Debian 12's), this one serves
 * accept4, epoll (epoll.c, over rpoll) and dual-stack listeners, which
 * event-loop servers such as Redis need. */
#ifndef SOFTROCE_PRELOAD_H
#define SOFTROCE_PRELOAD_H

#include <poll.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#define PUBLIC __attribute__((visibility("default")))

/* An rsocket a program holds, through one fd or several (dup). */
struct rsref {
	int rs;	   /* the rsocket's index in librdmacm */
	int refs;  /* program fds naming it */
	int alias; /* a listener whose port the device already serves (see bind) */
	int gone;  /* inherited across fork: the child has no rsocket (fdtab.c) */
	int family, port, any, v6only;
	uint32_t epoll_gen; /* bumped when it closes, for epoll sets */
};

/* libc's functions, found with dlsym(RTLD_NEXT). */
struct real_calls {
	int (*socket)(int, int, int);
	int (*bind)(int, const struct sockaddr *, socklen_t);
	int (*listen)(int, int);
	int (*accept)(int, struct sockaddr *, socklen_t *);
	int (*accept4)(int, struct sockaddr *, socklen_t *, int);
	int (*connect)(int, const struct sockaddr *, socklen_t);
	ssize_t (*recv)(int, void *, size_t, int);
	ssize_t (*recvfrom)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
	ssize_t (*recvmsg)(int, struct msghdr *, int);
	ssize_t (*read)(int, void *, size_t);
	ssize_t (*readv)(int, const struct iovec *, int);
	ssize_t (*send)(int, const void *, size_t, int);
	ssize_t (*sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
	ssize_t (*sendmsg)(int, const struct msghdr *, int);
	ssize_t (*write)(int, const void *, size_t);
	ssize_t (*writev)(int, const struct iovec *, int);
	int (*poll)(struct pollfd *, nfds_t, int);
	int (*select)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
	int (*shutdown)(int, int);
	int (*close)(int);
	int (*getpeername)(int, struct sockaddr *, socklen_t *);
	int (*getsockname)(int, struct sockaddr *, socklen_t *);
	int (*setsockopt)(int, int, int, const void *, socklen_t);
	int (*getsockopt)(int, int, int, void *, socklen_t *);
	int (*fcntl)(int, int, ...);
	int (*fcntl64)(int, int, ...);
	int (*ioctl)(int, unsigned long, ...);
	int (*dup)(int);
	int (*dup2)(int, int);
	int (*dup3)(int, int, int);
	ssize_t (*sendfile)(int, int, off_t *, size_t);
	int (*epoll_create)(int);
	int (*epoll_create1)(int);
	int (*epoll_ctl)(int, int, int, struct epoll_event *);
	int (*epoll_wait)(int, struct epoll_event *, int, int);
	int (*epoll_pwait)(int, struct epoll_event *, int, int, const sigset_t *);
};

extern struct real_calls real;

/* fdtab.c */
void preload_init(void);
struct rsref *fd_ref(int fd); /* NULL: not an rsocket */
int fd_new(struct rsref *r, int cloexec); /* a program fd for r, or -1 */
int fd_attach(int fd, struct rsref *r);	  /* fd (already open) names r too */
struct rsref *fd_detach(int fd);	  /* fd no longer names it; NULL if not ours */
void fd_release(struct rsref *r);	  /* one name less: the last closes it */
struct rsref *fd_find_port(int family, int port, struct rsref *except);

/* epoll.c */
void epoll_forget(struct rsref *r);
void epoll_closed(int fd);

#endif
