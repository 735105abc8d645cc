/* mpi_exchange.c: what an MPI user first runs on a new network, between
 * two ranks: point-to-point latency (8 B ping-pong) and bandwidth (1 MiB
 * sends), an allreduce, and a one-sided exchange (MPI_Put and MPI_Get in a
 * fenced window). Every rank prints "ok" when its results are right and
 * exits non-zero otherwise. cmd/softroce/middleware_test.go runs it under
 * softroce run with Open MPI's UCX components. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
	int rank, n;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	char *buf = malloc(1 << 20);
	memset(buf, rank, 1 << 20);
	/* ping-pong latency, 8 bytes */
	int iters = 1000;
	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = MPI_Wtime();
	for (int i = 0; i < iters; i++) {
		if (rank == 0) { MPI_Send(buf, 8, MPI_CHAR, 1, 0, MPI_COMM_WORLD); MPI_Recv(buf, 8, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
		else { MPI_Recv(buf, 8, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); MPI_Send(buf, 8, MPI_CHAR, 0, 0, MPI_COMM_WORLD); }
	}
	double lat = (MPI_Wtime() - t0) / iters / 2 * 1e6;
	/* bandwidth, 1 MiB */
	int bi = 50;
	MPI_Barrier(MPI_COMM_WORLD);
	t0 = MPI_Wtime();
	for (int i = 0; i < bi; i++) {
		if (rank == 0) MPI_Send(buf, 1 << 20, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
		else MPI_Recv(buf, 1 << 20, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	double bw = (double)bi * (1 << 20) / (MPI_Wtime() - t0) / 1e6;
	/* allreduce */
	long v = rank + 1, sum = 0;
	MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	/* one-sided: each puts its rank into the other's window */
	long *win_buf; MPI_Win win;
	MPI_Win_allocate(sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &win_buf, &win);
	*win_buf = -1;
	MPI_Win_fence(0, win);
	long me = 100 + rank;
	MPI_Put(&me, 1, MPI_LONG, (rank + 1) % n, 0, 1, MPI_LONG, win);
	MPI_Win_fence(0, win);
	long got = *win_buf;
	long fetched = 0;
	MPI_Get(&fetched, 1, MPI_LONG, (rank + 1) % n, 0, 1, MPI_LONG, win);
	MPI_Win_fence(0, win);
	MPI_Win_free(&win);
	int ok = sum == (long)n * (n + 1) / 2 && got == 100 + (rank + n - 1) % n && fetched == 100 + rank;
	if (rank == 0) printf("latency_us %.2f bandwidth_MBps %.1f\n", lat, bw);
	printf("rank %d allreduce %ld put %ld get %ld %s\n", rank, sum, got, fetched, ok ? "ok" : "WRONG");
	MPI_Finalize();
	return ok ? 0 : 1;
}
