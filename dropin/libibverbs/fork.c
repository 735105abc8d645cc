/* fork.c: fork support. Registered pages are MAP_SHARED memfd pages (mr.c).
 * A child made by fork() gets private copies of them (mr.c's atfork handler),
 * as a current kernel copies pinned pages, so fork is safe without
 * ibv_fork_init: ibv_is_fork_initialized says IBV_FORK_UNNEEDED. After
 * ibv_fork_init (or with RDMAV_FORK_SAFE / IBV_FORK_SAFE set, as rdma-core
 * reads them) registrations are also MADV_DONTFORK, as rdma-core makes them:
 * the child does not get those pages at all. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "context.h"

static int fork_enabled = -1; /* -1: environment not read yet */

int sr_fork_enabled(void)
{
	if (fork_enabled < 0)
		fork_enabled = getenv("RDMAV_FORK_SAFE") || getenv("IBV_FORK_SAFE");
	return fork_enabled;
}

int ibv_fork_init(void)
{
	fork_enabled = 1;
	return 0;
}

enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return sr_fork_enabled() ? IBV_FORK_ENABLED : IBV_FORK_UNNEEDED;
}

static int range_advise(void *base, size_t size, int advice)
{
	const uintptr_t pg = sysconf(_SC_PAGESIZE);
	uintptr_t start = (uintptr_t)base & ~(pg - 1);
	uintptr_t end = ((uintptr_t)base + size + pg - 1) & ~(pg - 1);

	if (!sr_fork_enabled() || start == end)
		return 0;
	return madvise((void *)start, end - start, advice);
}

int ibv_dontfork_range(void *base, size_t size)
{
	return range_advise(base, size, MADV_DONTFORK);
}

int ibv_dofork_range(void *base, size_t size)
{
	return range_advise(base, size, MADV_DOFORK);
}
