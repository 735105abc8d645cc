/* mr.c: memory regions. The daemon must read and write the program's
 * buffers (and run atomics on them), so registration moves the pages of the
 * region into memfds mapped MAP_SHARED at the same addresses and passes the
 * memfds to the daemon, which maps the very same pages (proto.h, struct
 * sr_reg_mr). README.md lists what this costs and where it falls short. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "context.h"

#define MEMFD_NAME "softroce-mr"
#define MEMFD_PATH "/memfd:" MEMFD_NAME

/* srl_mr: the MR and the page-rounded range it covers (for fork handling). */
struct srl_mr {
	struct ibv_mr mr;
	uintptr_t start, end;
	struct srl_mr *next;
};

/* mr_lock serializes registrations: they read /proc/self/maps and remap
 * pages, and they share the memfd table and the list of live MRs. */
static pthread_mutex_t mr_lock = PTHREAD_MUTEX_INITIALIZER;

/* The memfds this library created, by inode: pages already in one of them
 * are passed as they are, never copied again. */
struct memfd_ent {
	ino_t ino;
	int fd;
	int seen; /* still mapped somewhere (set while reading maps) */
};
static struct memfd_ent *memfds;
static int nmemfds, capmemfds;

static struct srl_mr *live_mrs;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

/* A mapping of /proc/self/maps clipped to the range being registered. */
struct seg {
	uintptr_t start, end;
	uint64_t off;
	int prot;
	int memfd; /* index in memfds, or -1: pages to move */
};

struct plan {
	struct seg *segs;
	int nsegs, capsegs;
};

static int find_memfd(ino_t ino)
{
	int i;

	for (i = 0; i < nmemfds; i++)
		if (memfds[i].ino == ino)
			return i;
	return -1;
}

static int add_memfd(int fd)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return errno;
	if (nmemfds == capmemfds) {
		int cap = capmemfds ? 2 * capmemfds : 16;
		struct memfd_ent *m = realloc(memfds, cap * sizeof(*m));

		if (!m)
			return ENOMEM;
		memfds = m;
		capmemfds = cap;
	}
	memfds[nmemfds++] = (struct memfd_ent){ st.st_ino, fd, 1 };
	return 0;
}

/* gc_memfds closes the memfds no longer mapped in the program: their pages
 * live on in the daemon for as long as an MR there needs them. */
static void gc_memfds(void)
{
	int i = 0;

	while (i < nmemfds) {
		if (memfds[i].seen) {
			i++;
			continue;
		}
		close(memfds[i].fd);
		memfds[i] = memfds[--nmemfds];
	}
}

static char *read_maps(void)
{
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);

	if (!buf || fd < 0)
		goto fail;
	for (;;) {
		ssize_t n;

		if (cap - len < 4096) {
			char *b = realloc(buf, cap * 2);

			if (!b)
				goto fail;
			buf = b;
			cap *= 2;
		}
		n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			goto fail;
		if (n == 0)
			break;
		len += n;
	}
	close(fd);
	buf[len] = 0;
	return buf;
fail:
	if (fd >= 0)
		close(fd);
	free(buf);
	errno = ENOMEM;
	return NULL;
}

static int add_seg(struct plan *p, struct seg s)
{
	if (p->nsegs == p->capsegs) {
		int cap = p->capsegs ? 2 * p->capsegs : 16;
		struct seg *n = realloc(p->segs, cap * sizeof(*n));

		if (!n)
			return ENOMEM;
		p->segs = n;
		p->capsegs = cap;
	}
	p->segs[p->nsegs++] = s;
	return 0;
}

/* plan_range lists the mappings covering [start, end) in address order,
 * marking those already in our memfds; a hole is EFAULT, as for the kernel,
 * unless holes_ok. It also marks which of our memfds are still mapped. */
static int plan_range(struct plan *p, uintptr_t start, uintptr_t end, int holes_ok)
{
	char *maps = read_maps(), *line, *save = NULL;
	uintptr_t next = start;
	int i, err = 0;

	if (!maps)
		return ENOMEM;
	for (i = 0; i < nmemfds; i++)
		memfds[i].seen = 0;
	for (line = strtok_r(maps, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		unsigned long s, e, ino;
		unsigned long long off;
		char perms[8];
		int pos = 0, m = -1;
		const char *path;

		if (sscanf(line, "%lx-%lx %7s %llx %*s %lu %n", &s, &e, perms, &off, &ino, &pos) < 5)
			continue;
		path = pos ? line + pos : "";
		if (!strncmp(path, MEMFD_PATH, strlen(MEMFD_PATH))) {
			m = find_memfd(ino);
			if (m >= 0)
				memfds[m].seen = 1;
		}
		if (err || e <= start || s >= end)
			continue;
		if (s > next && !holes_ok) {
			err = EFAULT;
			continue;
		}
		if (s < start) {
			off += start - s;
			s = start;
		}
		if (e > end)
			e = end;
		err = add_seg(p, (struct seg){
			.start = s, .end = e, .off = off, .memfd = m,
			.prot = (perms[0] == 'r' ? PROT_READ : 0) |
				(perms[1] == 'w' ? PROT_WRITE : 0) |
				(perms[2] == 'x' ? PROT_EXEC : 0),
		});
		next = e;
	}
	free(maps);
	if (!err && next < end && !holes_ok)
		err = EFAULT;
	return err;
}

/* Segments to move: into the new memfd fd (at their offset from the first
 * segment), or with fd -1 out of our memfds back into private memory. */
struct move {
	struct seg *segs;
	int n;
	int fd;
	int err;
};

/* The moves map and remap with raw system calls, not libc's: a program's
 * memory hooks must not see them (the bytes at every address stay what they
 * were, so there is nothing for a registration cache to invalidate), and
 * UCX 1.13's reloc hook for mremap (ucm_override_mremap) takes four
 * arguments, so MREMAP_FIXED's new address reached the kernel as whatever
 * the register held: the private copy went somewhere at random, unmapping
 * what was there, and the pages stayed in the memfd. */
static void *sys_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

static int sys_munmap(void *addr, size_t len)
{
	return (int)syscall(SYS_munmap, addr, len);
}

static int sys_mprotect(void *addr, size_t len, int prot)
{
	return (int)syscall(SYS_mprotect, addr, len, prot);
}

static void *sys_mremap_fixed(void *old, size_t len, void *new)
{
	return (void *)syscall(SYS_mremap, old, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, new);
}

/* The copies use the raw system calls: they read and write whole pages,
 * which a sanitizer's interceptors would take for overflows. */
static int copy_io(int write, int fd, char *mem, size_t len, uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		long n = syscall(write ? SYS_pwrite64 : SYS_pread64, fd, mem + done,
				 len - done, off + done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? errno : EIO;
		done += n;
	}
	return 0;
}

/* to_memfd copies the segments' current bytes into the memfd (EFAULT for
 * pages that cannot be read), then maps the memfd over them with their old
 * protection. Nothing is remapped unless every copy succeeded. */
static int to_memfd(struct move *mv)
{
	uintptr_t base = mv->segs[0].start;
	int i, err;

	for (i = 0; i < mv->n; i++) {
		struct seg *s = &mv->segs[i];

		err = copy_io(1, mv->fd, (char *)s->start, s->end - s->start, s->start - base);
		if (err)
			return err;
	}
	for (i = 0; i < mv->n; i++) {
		struct seg *s = &mv->segs[i];

		if (sys_mmap((void *)s->start, s->end - s->start, s->prot,
			     MAP_SHARED | MAP_FIXED, mv->fd, s->start - base) == MAP_FAILED)
			return errno;
	}
	return 0;
}

/* to_private replaces each segment with a private copy, read from its
 * memfd and put in place with one mremap. */
static int to_private(struct move *mv)
{
	int i, err;

	for (i = 0; i < mv->n; i++) {
		struct seg *s = &mv->segs[i];
		size_t len = s->end - s->start;
		void *tmp = sys_mmap(NULL, len, PROT_READ | PROT_WRITE,
				     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (tmp == MAP_FAILED)
			return errno;
		err = copy_io(0, memfds[s->memfd].fd, tmp, len, s->off);
		if (!err && sys_mprotect(tmp, len, s->prot) < 0)
			err = errno;
		if (!err && sys_mremap_fixed(tmp, len, (void *)s->start) == MAP_FAILED)
			err = errno;
		if (err) {
			sys_munmap(tmp, len);
			return err;
		}
	}
	return 0;
}

static void *do_move(void *arg)
{
	struct move *mv = arg;

	mv->err = mv->fd >= 0 ? to_memfd(mv) : to_private(mv);
	return NULL;
}

static int move_child(void *arg)
{
	do_move(arg);
	return 0;
}

/* run_move moves the segments. Segments near the calling thread's own stack
 * are moved by a child sharing the address space (CLONE_VM) while the
 * kernel holds this thread suspended until the child exits (CLONE_VFORK):
 * a suspended thread writes nothing, so the copy cannot miss a write of its
 * (or have one of its frames revert to the copy). A helper thread joined
 * with pthread_join did not ensure that: pthread_create goes on writing
 * the caller's stack after the new thread starts, and once in CI a write
 * was lost and the program crashed. The child makes only system calls
 * (its errno is this thread's, which is suspended meanwhile). */
static int run_move(struct move *mv)
{
	const size_t stack_size = 64 * 1024;
	uintptr_t here = (uintptr_t)&mv;
	int i, on_stack = 0;
	char *stack;
	pid_t pid;

	if (mv->n == 0)
		return 0;
	for (i = 0; i < mv->n; i++)
		if (here + 65536 >= mv->segs[i].start && here < mv->segs[i].end + 65536)
			on_stack = 1;
	if (on_stack) {
		stack = mmap(NULL, stack_size, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
		if (stack != MAP_FAILED) {
			pid = clone(move_child, stack + stack_size, CLONE_VM | CLONE_VFORK, mv);
			if (pid > 0) {
				while (waitpid(pid, NULL, __WALL) < 0 && errno == EINTR)
					;
				munmap(stack, stack_size);
				return mv->err;
			}
			munmap(stack, stack_size);
		}
	}
	do_move(mv);
	return mv->err;
}

/* move_run puts segs[0..n) into a new memfd. */
static int move_run(struct seg *segs, int n)
{
	struct move mv = { segs, n, -1, 0 };
	size_t len = segs[n - 1].end - segs[0].start;
	int i, err;

	/* Sealable, so that the daemon can forbid shrinking the file under
	 * its mapping (a shrink would make its accesses fault). */
	mv.fd = memfd_create(MEMFD_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (mv.fd < 0)
		return errno;
	if (ftruncate(mv.fd, len) < 0) {
		err = errno;
		close(mv.fd);
		return err;
	}
	err = run_move(&mv);
	if (!err)
		err = add_memfd(mv.fd);
	if (err) {
		close(mv.fd);
		return err;
	}
	for (i = 0; i < n; i++) {
		segs[i].memfd = nmemfds - 1;
		segs[i].off = segs[i].start - segs[0].start;
	}
	return 0;
}

/* move_pages moves every run of segments not yet in our memfds. */
static int move_pages(struct plan *p)
{
	int i = 0, j, err;

	while (i < p->nsegs) {
		if (p->segs[i].memfd >= 0) {
			i++;
			continue;
		}
		for (j = i; j < p->nsegs && p->segs[j].memfd < 0; j++)
			;
		err = move_run(&p->segs[i], j - i);
		if (err)
			return err;
		i = j;
	}
	return 0;
}

/* build_pieces lays out the pieces (and their fds) of a REG_MR or
 * REREG_MR, merging segments that continue one another in the same memfd. */
static int build_pieces(struct plan *p, struct sr_mr_piece *pieces, int *fds,
			int *npieces)
{
	int i, n = 0;

	for (i = 0; i < p->nsegs; i++) {
		struct seg *s = &p->segs[i];
		int fd = memfds[s->memfd].fd;

		if (n > 0 && fds[n - 1] == fd &&
		    pieces[n - 1].vaddr + pieces[n - 1].len == s->start &&
		    pieces[n - 1].offset + pieces[n - 1].len == s->off) {
			pieces[n - 1].len += s->end - s->start;
			continue;
		}
		if (n == SR_MAX_MR_PIECES)
			return ENOMEM;
		pieces[n] = (struct sr_mr_piece){ s->start, s->end - s->start, s->off };
		fds[n++] = fd;
	}
	*npieces = n;
	return 0;
}

/* prepare_range moves the pages of [start, end) into memfds and lays out
 * the pieces naming them. Called with mr_lock held. */
static int prepare_range(uintptr_t start, uintptr_t end, struct sr_mr_piece *pieces,
			 int *fds, int *npieces)
{
	struct plan p = { 0 };
	int err = plan_range(&p, start, end, 0);

	gc_memfds();
	if (!err)
		err = move_pages(&p);
	if (!err)
		err = build_pieces(&p, pieces, fds, npieces);
	free(p.segs);
	return err;
}

/* set_fork_flags re-applies MADV_DONTFORK to every live MR after a range
 * lost it, so that overlapping registrations keep theirs. */
static void set_fork_flags(uintptr_t start, uintptr_t end, int dontfork)
{
	struct srl_mr *m;

	if (!sr_fork_enabled() || start == end)
		return;
	if (dontfork) {
		madvise((void *)start, end - start, MADV_DONTFORK);
		return;
	}
	madvise((void *)start, end - start, MADV_DOFORK);
	for (m = live_mrs; m; m = m->next)
		if (m->start < end && m->end > start && m->start != m->end)
			madvise((void *)m->start, m->end - m->start, MADV_DONTFORK);
}

/* restore_range puts the pages of [start, end) that no live MR covers any
 * more back into private memory: memfd pages outlive their MR only until
 * then, so that a later fork() does not find them shared. */
static void restore_range(uintptr_t start, uintptr_t end)
{
	struct plan p = { 0 }, r = { 0 };
	struct move mv = { 0 };
	struct srl_mr *m;
	int i;

	if (start == end || plan_range(&p, start, end, 1))
		goto out;
	for (i = 0; i < p.nsegs; i++) {
		struct seg s = p.segs[i];
		uintptr_t cur = s.start;

		if (s.memfd < 0)
			continue;
		while (cur < s.end) {
			uintptr_t stop = s.end;
			int covered = 0;

			for (m = live_mrs; m; m = m->next) {
				if (m->start <= cur && cur < m->end) {
					covered = 1;
					stop = m->end < s.end ? m->end : s.end;
					break;
				}
				if (m->start > cur && m->start < stop)
					stop = m->start;
			}
			if (!covered) {
				struct seg piece = s;

				piece.start = cur;
				piece.end = stop;
				piece.off = s.off + (cur - s.start);
				if (add_seg(&r, piece))
					goto out;
			}
			cur = stop;
		}
	}
	mv.segs = r.segs;
	mv.n = r.nsegs;
	mv.fd = -1;
	run_move(&mv);
out:
	free(p.segs);
	free(r.segs);
}

/* After fork() the child would share every memfd page with its parent,
 * which a program written for the kernel's copy-on-write never expects. The
 * child handler gives the child private copies instead: what a current
 * kernel's fork does for pinned pages. Ranges under MADV_DONTFORK are not in
 * the child at all. */
static void privatize_child(void)
{
	struct plan p = { 0 };
	struct move mv = { 0 };
	int i, n = 0;

	if (!plan_range(&p, 0, UINTPTR_MAX, 1)) {
		for (i = 0; i < p.nsegs; i++)
			if (p.segs[i].memfd >= 0)
				p.segs[n++] = p.segs[i];
		mv.segs = p.segs;
		mv.n = n;
		mv.fd = -1;
		run_move(&mv);
	}
	free(p.segs);
	for (i = 0; i < nmemfds; i++)
		close(memfds[i].fd);
	nmemfds = 0;
}

static void fork_prepare(void)
{
	pthread_mutex_lock(&mr_lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&mr_lock);
}

static void fork_child(void)
{
	privatize_child();
	pthread_mutex_unlock(&mr_lock);
}

static void register_fork_handlers(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static struct ibv_mr *reg_mr(struct ibv_pd *pd, void *addr, size_t length,
			     uint64_t iova, unsigned int access)
{
	const uintptr_t pg = sysconf(_SC_PAGESIZE);
	uintptr_t start = (uintptr_t)addr & ~(pg - 1);
	uintptr_t end = ((uintptr_t)addr + length + pg - 1) & ~(pg - 1);
	struct {
		struct sr_reg_mr req;
		struct sr_mr_piece pieces[SR_MAX_MR_PIECES];
	} __attribute__((packed)) msg;
	int fds[SR_MAX_MR_PIECES];
	struct srl_mr *m;
	struct sr_mr resp;
	int err, n = 0;

	if ((uintptr_t)addr + length < (uintptr_t)addr)
		return errno = EINVAL, NULL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return errno = ENOMEM, NULL;
	memset(&msg.req, 0, sizeof(msg.req));
	msg.req.pd = pd->handle;
	/* Optional access flags may be ignored, and softroce ignores them. */
	msg.req.access = access & ~IBV_ACCESS_OPTIONAL_RANGE;
	msg.req.addr = (uintptr_t)addr;
	msg.req.length = length;
	msg.req.iova = iova;

	pthread_once(&fork_once, register_fork_handlers);
	pthread_mutex_lock(&mr_lock);
	err = prepare_range(start, length ? end : start, msg.pieces, fds, &n);
	msg.req.npieces = n;
	if (!err)
		err = sr_ctx_callx(pd->context, SR_OP_REG_MR, &msg,
				   sizeof(msg.req) + n * sizeof(msg.pieces[0]),
				   fds, n, &resp, sizeof(resp), NULL, NULL);
	if (!err) {
		m->start = start;
		m->end = length ? end : start;
		m->next = live_mrs;
		live_mrs = m;
		set_fork_flags(m->start, m->end, 1);
	} else {
		/* Pages moved for a registration that failed go back. */
		restore_range(start, length ? end : start);
	}
	pthread_mutex_unlock(&mr_lock);
	if (err) {
		free(m);
		errno = err;
		return NULL;
	}
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = length;
	m->mr.handle = resp.handle;
	m->mr.lkey = resp.lkey;
	m->mr.rkey = resp.rkey;
	return &m->mr;
}

/* verbs.h turns these names into inline dispatchers; the exported
 * functions are the real ones. */
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return reg_mr(pd, addr, length, (uintptr_t)addr, access);
}

struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length,
			       uint64_t iova, int access)
{
	return reg_mr(pd, addr, length, iova, access);
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
				uint64_t iova, unsigned int access)
{
	return reg_mr(pd, addr, length, iova, access);
}

static void unlink_mr(struct srl_mr *m)
{
	struct srl_mr **pp;

	for (pp = &live_mrs; *pp; pp = &(*pp)->next)
		if (*pp == m) {
			*pp = m->next;
			break;
		}
}

/* ibv_dereg_mr: pages that no other MR covers go back to private memory. */
int ibv_dereg_mr(struct ibv_mr *mr)
{
	struct srl_mr *m = (struct srl_mr *)mr;
	struct sr_handle h = { mr->handle };
	int err = sr_ctx_call(mr->context, SR_OP_DEREG_MR, &h, sizeof(h), NULL, 0);

	if (err && !sr_ctx_gone(mr->context, err))
		return errno = err, err;
	pthread_mutex_lock(&mr_lock);
	unlink_mr(m);
	set_fork_flags(m->start, m->end, 0);
	restore_range(m->start, m->end);
	pthread_mutex_unlock(&mr_lock);
	free(m);
	return 0;
}

/* ibv_rereg_mr changes the MR in place (REREG_MR): it keeps its lkey and
 * rkey, as rxe's do, so that a peer holding the rkey sees the new access
 * at once. A new translation has its pages moved as for ibv_reg_mr, and the
 * old range's pages go back to private memory once the daemon has let go of
 * them. A failure leaves the MR as it was. */
int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
		 size_t length, int access)
{
	const uintptr_t pg = sysconf(_SC_PAGESIZE);
	const int xlate = flags & IBV_REREG_MR_CHANGE_TRANSLATION;
	uintptr_t start = (uintptr_t)addr & ~(pg - 1);
	uintptr_t end = ((uintptr_t)addr + length + pg - 1) & ~(pg - 1);
	struct srl_mr *m = (struct srl_mr *)mr;
	struct {
		struct sr_rereg_mr req;
		struct sr_mr_piece pieces[SR_MAX_MR_PIECES];
	} __attribute__((packed)) msg;
	int fds[SR_MAX_MR_PIECES];
	struct sr_mr resp;
	int err = 0, n = 0;

	/* The input checks of rdma-core's ibv_rereg_mr, and a PD to move to. */
	if (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED ||
	    (xlate && (!addr || !length)) ||
	    (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS)) ||
	    ((flags & IBV_REREG_MR_CHANGE_PD) && !pd)) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	if (xlate && (uintptr_t)addr + length < (uintptr_t)addr)
		err = EINVAL;
	if (err) {
		errno = err;
		return IBV_REREG_MR_ERR_CMD;
	}
	memset(&msg.req, 0, sizeof(msg.req));
	msg.req.handle = mr->handle;
	msg.req.flags = flags;
	msg.req.pd = (flags & IBV_REREG_MR_CHANGE_PD) ? pd->handle : SR_NONE;
	msg.req.access = access & ~IBV_ACCESS_OPTIONAL_RANGE;
	if (xlate) {
		msg.req.addr = (uintptr_t)addr;
		msg.req.length = length;
		msg.req.iova = (uintptr_t)addr;
	}

	pthread_once(&fork_once, register_fork_handlers);
	pthread_mutex_lock(&mr_lock);
	if (xlate)
		err = prepare_range(start, end, msg.pieces, fds, &n);
	msg.req.npieces = n;
	if (!err)
		err = sr_ctx_callx(mr->context, SR_OP_REREG_MR, &msg,
				   sizeof(msg.req) + n * sizeof(msg.pieces[0]),
				   fds, n, &resp, sizeof(resp), NULL, NULL);
	if (!err && xlate) {
		uintptr_t old_start = m->start, old_end = m->end;

		m->start = start;
		m->end = end;
		set_fork_flags(start, end, 1);
		set_fork_flags(old_start, old_end, 0);
		restore_range(old_start, old_end);
	} else if (err && xlate) {
		/* Pages moved for a translation that failed go back. */
		restore_range(start, end);
	}
	pthread_mutex_unlock(&mr_lock);
	if (err) {
		errno = err;
		return IBV_REREG_MR_ERR_CMD;
	}
	if (flags & IBV_REREG_MR_CHANGE_PD)
		mr->pd = pd;
	if (xlate) {
		mr->addr = addr;
		mr->length = length;
	}
	mr->lkey = resp.lkey;
	mr->rkey = resp.rkey;
	return 0;
}
