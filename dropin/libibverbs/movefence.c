/* movefence.c: while mr.c moves a program's pages into a memfd (or back),
 * other threads' writes to those pages wait for the move instead of landing
 * in the copy being left behind.
 *
 * A move copies the pages' bytes, then maps the new pages over the old
 * ones. A write another thread makes between the copy and the remap would
 * be lost: UCX registers a buffer in libucp's .bss whose page also holds
 * globals its progress thread writes, and about one ucx_perftest pair in
 * sixty crashed that way. So the writable pages are made read-only for the
 * move: a write faults, this library's SIGSEGV handler sees it is one of
 * ours, waits until the move is done and returns, and the write runs again,
 * on the new pages. Every other SIGSEGV goes to the action the program had
 * installed (its handler, or the default, which is put back so that the
 * access faults again as it would have). The handler stays installed once a
 * move has needed it: a thread may take its fault while the move runs and
 * receive it just after, and must still find this handler; a program that
 * installs its own later replaces it until the next move installs it again,
 * chaining to that one.
 *
 * A fault at an address of one of the last few moves is retried once per
 * finished move (a genuine fault there, a write to a page the program made
 * read-only itself, faults again and is passed on). A thread whose own
 * stack is in the range cannot take the signal (its stack is read-only):
 * registering another thread's stack is outside what this covers. */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "context.h"

#define FENCE_SPANS 4

static struct sigaction fence_prev; /* the program's action we chain to */
static _Atomic uintptr_t span_lo[FENCE_SPANS], span_hi[FENCE_SPANS];
static atomic_uint span_next;
static atomic_int moving;         /* a move is under way */
static atomic_uint moves_done;    /* finished moves, for the one retry */

static __thread uintptr_t tl_addr __attribute__((tls_model("initial-exec")));
static __thread unsigned tl_gen __attribute__((tls_model("initial-exec")));

static int in_span(uintptr_t a)
{
	for (int i = 0; i < FENCE_SPANS; i++)
		if (a >= atomic_load(&span_lo[i]) && a < atomic_load(&span_hi[i]))
			return 1;
	return 0;
}

static void fence_chain(int sig, siginfo_t *si, void *uc)
{
	if (fence_prev.sa_flags & SA_SIGINFO) {
		if (fence_prev.sa_sigaction)
			fence_prev.sa_sigaction(sig, si, uc);
		return;
	}
	if (fence_prev.sa_handler == SIG_DFL || fence_prev.sa_handler == SIG_IGN) {
		/* Put the program's action back; the access faults again. */
		sigaction(SIGSEGV, &fence_prev, NULL);
		return;
	}
	fence_prev.sa_handler(sig);
}

static void fence_on_segv(int sig, siginfo_t *si, void *uc)
{
	uintptr_t a = (uintptr_t)si->si_addr;

	if (si->si_code == SEGV_ACCERR && in_span(a)) {
		while (atomic_load(&moving))
			sched_yield();
		unsigned gen = atomic_load(&moves_done);
		if (a != tl_addr || gen != tl_gen) {
			tl_addr = a;
			tl_gen = gen;
			return; /* the write runs again, on the moved page */
		}
	}
	fence_chain(sig, si, uc);
}

/* fence_install puts the handler in place unless it is (under mr_lock). */
static void fence_install(void)
{
	struct sigaction cur, sa;

	if (sigaction(SIGSEGV, NULL, &cur) < 0)
		return;
	if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == fence_on_segv)
		return;
	fence_prev = cur;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = fence_on_segv;
	sa.sa_mask = cur.sa_mask;
	sa.sa_flags = SA_SIGINFO | SA_RESTART | (cur.sa_flags & SA_ONSTACK);
	sigaction(SIGSEGV, &sa, NULL);
}

void sr_fence_begin(uintptr_t lo, uintptr_t hi)
{
	unsigned i = atomic_fetch_add(&span_next, 1) % FENCE_SPANS;

	fence_install();
	atomic_store(&span_lo[i], 0);
	atomic_store(&span_hi[i], hi);
	atomic_store(&span_lo[i], lo);
	atomic_store(&moving, 1);
}

int sr_fence_protect(uintptr_t start, size_t len, int prot)
{
	if (!(prot & PROT_WRITE))
		return 0;
	return mprotect((void *)start, len, prot & ~PROT_WRITE) < 0 ? -1 : 0;
}

void sr_fence_end(void)
{
	atomic_fetch_add(&moves_done, 1);
	atomic_store(&moving, 0);
}
