/*
 * An MPI job's traffic on Warpcore: ping-pong of 8 B to 1 MiB between ranks 0 and 1 with
 * every octet checked (rank 1 answers each message with each octet plus one), then an
 * Allreduce over all ranks. Run by scripts/test-libfabric.sh under Open MPI with
 * libfabric's verbs;ofi_rxm provider (pml cm, mtl ofi), each rank through
 * scripts/with-warpcore. Exits non-zero on any mismatch; prints one line a size and
 * "mpi_pingpong: all checks passed" last.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int rank, size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	/* Eager sizes and, from 64 KiB, ofi_rxm's rendezvous (the payload by RDMA Read). */
	static const int sizes[] = { 8, 4096, 65536, 1 << 20 };
	const int iters = 50;
	long bad = 0;
	for (unsigned s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
		int n = sizes[s];
		unsigned char *b = malloc(n);
		if (!b)
			MPI_Abort(MPI_COMM_WORLD, 2);
		double t0 = MPI_Wtime();
		for (int i = 0; i < iters; i++) {
			if (rank == 0) {
				for (int k = 0; k < n; k++)
					b[k] = (unsigned char)(k * 7 + i + s);
				MPI_Send(b, n, MPI_BYTE, 1, i, MPI_COMM_WORLD);
				MPI_Recv(b, n, MPI_BYTE, 1, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				for (int k = 0; k < n; k++)
					if (b[k] != (unsigned char)(k * 7 + i + s + 1))
						bad++;
			} else if (rank == 1) {
				MPI_Recv(b, n, MPI_BYTE, 0, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				for (int k = 0; k < n; k++)
					b[k]++;
				MPI_Send(b, n, MPI_BYTE, 0, i, MPI_COMM_WORLD);
			}
		}
		double t = MPI_Wtime() - t0;
		if (rank == 0)
			printf("size %d: %d round trips, %.1f us each, %ld octets wrong\n", n, iters,
			       t / iters * 1e6, bad);
		free(b);
	}
	long v = rank + 1, sum = 0;
	MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	long want = (long)size * (size + 1) / 2;
	int ok = bad == 0 && sum == want;
	if (rank == 0) {
		printf("allreduce %ld (want %ld)\n", sum, want);
		if (ok)
			printf("mpi_pingpong: all checks passed\n");
	}
	MPI_Finalize();
	return ok ? 0 : 1;
}
