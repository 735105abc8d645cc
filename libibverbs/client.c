/* client.c: connecting to the softroce daemon and making calls (proto.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "proto.h"

/* socket_path: $SOFTROCE_SOCKET, else $XDG_RUNTIME_DIR/softroce.sock, else
 * /tmp/softroce-UID.sock (the daemon uses the same rule). */
static void socket_path(char *buf, size_t len)
{
	const char *s = getenv("SOFTROCE_SOCKET");
	const char *rt = getenv("XDG_RUNTIME_DIR");

	if (s && *s)
		snprintf(buf, len, "%s", s);
	else if (rt && *rt)
		snprintf(buf, len, "%s/softroce.sock", rt);
	else
		snprintf(buf, len, "/tmp/softroce-%u.sock", (unsigned)getuid());
}

/* sr_connect returns a connected socket, or -1 with errno set. */
int sr_connect(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, err;

	socket_path(sa.sun_path, sizeof(sa.sun_path));
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		err = errno;
		if (getenv("SOFTROCE_DEBUG"))
			fprintf(stderr, "softroce libibverbs: connect %s: %s\n",
				sa.sun_path, strerror(err));
		close(fd);
		errno = err;
		return -1;
	}
	return fd;
}

static int full_io(int fd, void *buf, size_t len, int writing)
{
	char *p = buf;

	while (len > 0) {
		ssize_t n = writing ? write(fd, p, len) : read(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n == 0 ? EPIPE : errno;
		p += n;
		len -= n;
	}
	return 0;
}

/* request sends a request and reads the answer's header. */
static int request(int fd, uint32_t op, uint32_t dev, uint32_t port,
		   uint32_t index, struct sr_resp_hdr *h)
{
	struct sr_req req = { op, dev, port, index };
	int err;

	err = full_io(fd, &req, sizeof(req), 1);
	if (!err)
		err = full_io(fd, h, sizeof(*h), 0);
	return err;
}

/* sr_call makes one call whose answer is exactly outlen bytes. It returns 0
 * or an errno value (the daemon's, or EPROTO for a malformed answer). */
int sr_call(int fd, uint32_t op, uint32_t dev, uint32_t port, uint32_t index,
	    void *out, uint32_t outlen)
{
	struct sr_resp_hdr h;
	int err = request(fd, op, dev, port, index, &h);

	if (err)
		return err;
	if (h.status)
		return h.len == 0 ? (int)h.status : EPROTO;
	if (h.len != outlen)
		return EPROTO;
	return full_io(fd, out, outlen, 0);
}

/* sr_call_list fetches the device list into a malloc'd array. */
int sr_call_list(int fd, struct sr_dev_entry **out, int *n)
{
	struct sr_resp_hdr h;
	int err = request(fd, SR_OP_LIST, 0, 0, 0, &h);

	if (err)
		return err;
	if (h.status)
		return h.status;
	if (h.len % sizeof(**out) || h.len > 64 * sizeof(**out))
		return EPROTO;
	*out = malloc(h.len ? h.len : 1);
	if (!*out)
		return ENOMEM;
	err = full_io(fd, *out, h.len, 0);
	if (err) {
		free(*out);
		return err;
	}
	*n = h.len / sizeof(**out);
	return 0;
}
