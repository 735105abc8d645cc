/* fdtab.c: the program's fds that stand for rsockets, and finding libc's
 * own calls. The table is paged and its pages never freed, so lookups take
 * no lock: every socket call of the program makes one. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
#include <rdma/rsocket.h>

#include "preload.h"

struct real_calls real;

#define PAGE_BITS 10
#define PAGE (1 << PAGE_BITS)
#define PAGES 1024
static struct rsref **pages[PAGES];
static pthread_mutex_t tab_lock = PTHREAD_MUTEX_INITIALIZER;

/* Every rsref, for fd_find_port. */
struct node {
	struct rsref *r;
	struct node *next;
};
static struct node *all;

static void resolve(void)
{
#define R(name) real.name = dlsym(RTLD_NEXT, #name)
	R(socket);
	R(bind);
	R(listen);
	R(accept);
	R(accept4);
	R(connect);
	R(recv);
	R(recvfrom);
	R(recvmsg);
	R(read);
	R(readv);
	R(send);
	R(sendto);
	R(sendmsg);
	R(write);
	R(writev);
	R(poll);
	R(select);
	R(shutdown);
	R(close);
	R(getpeername);
	R(getsockname);
	R(setsockopt);
	R(getsockopt);
	R(fcntl);
	R(fcntl64);
	R(ioctl);
	R(dup);
	R(dup2);
	R(dup3);
	R(sendfile);
	R(epoll_create);
	R(epoll_create1);
	R(epoll_ctl);
	R(epoll_wait);
	R(epoll_pwait);
#undef R
	if (!real.fcntl64)
		real.fcntl64 = real.fcntl;
}

/* after_fork runs in a child: the rsockets are the parent's (their QPs,
 * ids and the daemon connection behind them), so the child's fds for them
 * name nothing: calls on them fail with EBADF, and close only closes the
 * fd, leaving the parent's connection alone (a Redis BGSAVE child closes
 * the listening sockets it inherited). */
static void after_fork(void)
{
	struct node *n;

	for (n = all; n; n = n->next) {
		n->r->gone = 1;
		n->r->rs = -1; /* every r* call on it: EBADF; rpoll: never ready */
	}
}

static void init(void)
{
	resolve();
	pthread_atfork(NULL, NULL, after_fork);
}

void preload_init(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, init);
}

struct rsref *fd_ref(int fd)
{
	struct rsref **p;

	if (fd < 0 || fd >= PAGE * PAGES)
		return NULL;
	p = __atomic_load_n(&pages[fd >> PAGE_BITS], __ATOMIC_ACQUIRE);
	return p ? __atomic_load_n(&p[fd & (PAGE - 1)], __ATOMIC_ACQUIRE) : NULL;
}

int fd_attach(int fd, struct rsref *r)
{
	struct rsref **p;

	if (fd < 0 || fd >= PAGE * PAGES)
		return -1;
	pthread_mutex_lock(&tab_lock);
	p = pages[fd >> PAGE_BITS];
	if (!p) {
		p = calloc(PAGE, sizeof(*p));
		if (!p) {
			pthread_mutex_unlock(&tab_lock);
			return -1;
		}
		__atomic_store_n(&pages[fd >> PAGE_BITS], p, __ATOMIC_RELEASE);
	}
	if (!r->refs++) {
		struct node *n = malloc(sizeof(*n));

		if (n) {
			n->r = r;
			n->next = all;
			all = n;
		}
	}
	__atomic_store_n(&p[fd & (PAGE - 1)], r, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&tab_lock);
	return 0;
}

/* fd_new opens the program's name for r: /dev/null, so that a call we do
 * not interpose fails plainly instead of acting on some other file. */
int fd_new(struct rsref *r, int cloexec)
{
	int fd = open("/dev/null", O_RDWR | (cloexec ? O_CLOEXEC : 0));

	if (fd < 0)
		return -1;
	if (fd_attach(fd, r)) {
		real.close(fd);
		errno = EMFILE;
		return -1;
	}
	return fd;
}

struct rsref *fd_detach(int fd)
{
	struct rsref *r = fd_ref(fd);

	if (!r)
		return NULL;
	pthread_mutex_lock(&tab_lock);
	__atomic_store_n(&pages[fd >> PAGE_BITS][fd & (PAGE - 1)], NULL, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&tab_lock);
	return r;
}

void fd_release(struct rsref *r)
{
	struct node **pn, *n;
	int last;

	pthread_mutex_lock(&tab_lock);
	last = --r->refs == 0;
	if (last) {
		for (pn = &all; (n = *pn); pn = &n->next) {
			if (n->r == r) {
				*pn = n->next;
				free(n);
				break;
			}
		}
	}
	pthread_mutex_unlock(&tab_lock);
	if (!last)
		return;
	epoll_forget(r);
	if (!r->gone)
		rclose(r->rs);
	free(r);
}

struct rsref *fd_find_port(int family, int port, struct rsref *except)
{
	struct rsref *found = NULL;
	struct node *n;

	pthread_mutex_lock(&tab_lock);
	for (n = all; n; n = n->next) {
		if (n->r != except && !n->r->alias && n->r->port == port && n->r->family == family) {
			found = n->r;
			break;
		}
	}
	pthread_mutex_unlock(&tab_lock);
	return found;
}
