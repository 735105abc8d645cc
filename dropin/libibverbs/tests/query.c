/* query.c: exercises the query verbs of the first slice through the public
 * API, as a program built against the system's headers would, and prints what
 * it found; cmd/softroce/run_test.go runs it under softroce run. */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <infiniband/verbs.h>

/* Exported by libibverbs, declared only in rdma-core's private driver.h. */
const char *ibv_get_sysfs_path(void);

int main(void)
{
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_gid_entry e, table[8];
	struct ibv_port_attr pa;
	struct ibv_pd *pd;
	char buf[INET6_ADDRSTRLEN];
	__be16 pkey;
	ssize_t n;
	const char *root;
	int num, i, rc;

	list = ibv_get_device_list(&num);
	if (!list || num < 1) {
		perror("ibv_get_device_list");
		return 1;
	}
	printf("devices %d first %s index %d guid %016llx\n", num, ibv_get_device_name(list[0]),
	       ibv_get_device_index(list[0]), (unsigned long long)be64toh(ibv_get_device_guid(list[0])));
	/* sysfs, through the paths libibverbs gives (the daemon's view). */
	root = ibv_get_sysfs_path();
	printf("ibdev_path under sysfs path %s\n",
	       !strncmp(list[0]->ibdev_path, root, strlen(root)) ? "yes" : "no");
	printf("ibdev_path suffix %s dev_path suffix %s\n", list[0]->ibdev_path + strlen(root),
	       list[0]->dev_path + strlen(root));
	n = ibv_read_sysfs_file(list[0]->ibdev_path, "node_type", buf, sizeof(buf));
	printf("node_type %zd %s\n", n, n > 0 ? buf : "");
	n = ibv_read_sysfs_file(list[0]->ibdev_path, "ports/1/gid_attrs/types/1", buf, sizeof(buf));
	printf("gid type 1 %zd %s\n", n, n > 0 ? buf : "");
	n = ibv_read_sysfs_file(list[0]->dev_path, "ibdev", buf, sizeof(buf));
	printf("uverbs ibdev %zd %s\n", n, n > 0 ? buf : "");
	n = ibv_read_sysfs_file(list[0]->ibdev_path, "no_such_file", buf, sizeof(buf));
	printf("missing %zd\n", n);
	ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	if (!ctx) {
		perror("ibv_open_device");
		return 1;
	}
	if (ibv_query_port(ctx, 1, &pa))
		return perror("ibv_query_port"), 1;
	printf("port 1 state %s active_mtu %d link_layer %d\n", ibv_port_state_str(pa.state),
	       pa.active_mtu, pa.link_layer);
	rc = ibv_query_port(ctx, 2, &pa);
	printf("port 2 rc %d\n", rc);
	rc = ibv_query_gid_ex(ctx, 1, 1, &e, 0);
	printf("gid_ex 1 rc %d %s type %u\n", rc, inet_ntop(AF_INET6, e.gid.raw, buf, sizeof(buf)), e.gid_type);
	rc = ibv_query_gid_ex(ctx, 1, 5, &e, 0);
	printf("gid_ex 5 rc %s\n", rc == ENODATA ? "ENODATA" : strerror(rc));
	n = ibv_query_gid_table(ctx, table, 8, 0);
	printf("gid_table %zd", n);
	for (i = 0; i < n; i++)
		printf(" [%u]%s", table[i].gid_index, inet_ntop(AF_INET6, table[i].gid.raw, buf, sizeof(buf)));
	printf("\n");
	n = ibv_query_gid_table(ctx, table, 1, 0);
	printf("gid_table short %zd\n", n);
	rc = ibv_query_pkey(ctx, 1, 0, &pkey);
	printf("pkey rc %d 0x%04x\n", rc, ntohs(pkey));
	/* Importing is EOPNOTSUPP, as rdma-core answers for a provider
	 * without it (pyverbs skips on it; ENOSYS would be an error). */
	errno = 0;
	pd = ibv_import_pd(ctx, 1);
	printf("import_pd %s errno %s\n", pd ? "non-NULL" : "NULL",
	       errno == EOPNOTSUPP ? "EOPNOTSUPP" : strerror(errno));
	printf("close %d\n", ibv_close_device(ctx));
	return 0;
}
