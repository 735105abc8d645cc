/* sysfs.c: the device's sysfs files. The daemon writes them, laid out as the
 * kernel's /sys (class/infiniband/DEV, class/infiniband_verbs/uverbsN), in
 * SOCKET.sys next to its socket; ibv_get_sysfs_path names that directory and
 * the device's ibdev_path and dev_path point into it, so that programs that
 * read sysfs through libibverbs see softroce's device as they would rxe. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "proto.h"

static char sysfs_root[4096];
static pthread_once_t sysfs_once = PTHREAD_ONCE_INIT;

static void sysfs_init(void)
{
	char sock[4000];

	sr_socket_path(sock, sizeof(sock));
	snprintf(sysfs_root, sizeof(sysfs_root), "%s.sys", sock);
}

const char *sr_sysfs_root(void)
{
	pthread_once(&sysfs_once, sysfs_init);
	return sysfs_root;
}

const char *ibv_get_sysfs_path(void)
{
	return sr_sysfs_root();
}

/* ibv_read_sysfs_file reads dir/file into buf as rdma-core does: a trailing
 * newline becomes the terminator, and contents that do not fit with one
 * fail rather than come back unterminated. */
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	char path[4096];
	ssize_t len;
	int fd;

	if (snprintf(path, sizeof(path), "%s/%s", dir, file) >= (int)sizeof(path))
		return errno = ENAMETOOLONG, -1;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	len = read(fd, buf, size);
	close(fd);
	if (len > 0) {
		if (buf[len - 1] == '\n')
			buf[--len] = '\0';
		else if ((size_t)len < size)
			buf[len] = '\0';
		else
			return errno = EOVERFLOW, -1;
	}
	return len;
}
