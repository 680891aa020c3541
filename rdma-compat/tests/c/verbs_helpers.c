/*
 * Contract: the libibverbs functions a program may call that need no provider, and those a
 * provider may lack, answer as rdma-core's libibverbs answers (Debian's 44, which these
 * libraries replace): the rate tables of libibverbs/verbs.c (ibv_rate_to_mult,
 * mult_to_ibv_rate, ibv_rate_to_mbps, mbps_to_ibv_rate), and for a provider without the
 * operation what libibverbs/dummy_ops.c answers, as on siw: ibv_query_ece and ibv_set_ece
 * EOPNOTSUPP (ibv_set_ece with vendor_id 0 refused by verbs.c itself, errno set),
 * ibv_import_mr and ibv_import_dm NULL with errno EOPNOTSUPP, ibv_query_qp_data_in_order
 * 0; ibv_dontfork_range and ibv_dofork_range 0 where fork needs no help
 * (ibv_is_fork_initialized IBV_FORK_UNNEEDED: memory.c advises nothing then); and
 * ibv_query_gid_table (cmd_device.c) the port's valid GIDs, -EINVAL for too small a table,
 * -EOPNOTSUPP for flags. Before the fix none of these symbols was exported: the program
 * stopped at its first call ("symbol lookup error"), as would any program calling them.
 */
#include <errno.h>
#include <string.h>
#include <infiniband/verbs.h>

static const char *contract_name = "verbs_helpers";
#include "contract.h"

/* Exported by libibverbs (IBVERBS_1.1) for providers, declared in no installed header. */
int ibv_dontfork_range(void *base, size_t size);
int ibv_dofork_range(void *base, size_t size);

/* rdma-core 44's libibverbs/verbs.c, every rate with its Mb/s and (-1: none) multiple of
 * 2.5 Gb/s. */
static const struct {
	enum ibv_rate rate;
	int mbps, mult;
} rates[] = {
	{ IBV_RATE_2_5_GBPS, 2500, 1 },	     { IBV_RATE_5_GBPS, 5000, 2 },	   { IBV_RATE_10_GBPS, 10000, 4 },
	{ IBV_RATE_20_GBPS, 20000, 8 },	     { IBV_RATE_30_GBPS, 30000, 12 },	   { IBV_RATE_40_GBPS, 40000, 16 },
	{ IBV_RATE_60_GBPS, 60000, 24 },     { IBV_RATE_80_GBPS, 80000, 32 },	   { IBV_RATE_120_GBPS, 120000, 48 },
	{ IBV_RATE_14_GBPS, 14062, -1 },     { IBV_RATE_56_GBPS, 56250, -1 },	   { IBV_RATE_112_GBPS, 112500, -1 },
	{ IBV_RATE_168_GBPS, 168750, -1 },   { IBV_RATE_25_GBPS, 25781, -1 },	   { IBV_RATE_100_GBPS, 103125, -1 },
	{ IBV_RATE_200_GBPS, 206250, -1 },   { IBV_RATE_300_GBPS, 309375, -1 },   { IBV_RATE_28_GBPS, 28125, 11 },
	{ IBV_RATE_50_GBPS, 53125, 20 },     { IBV_RATE_400_GBPS, 425000, 160 }, { IBV_RATE_600_GBPS, 637500, 240 },
	{ IBV_RATE_800_GBPS, 850000, 320 }, { IBV_RATE_1200_GBPS, 1275000, 480 },
};

int main(void)
{
	/* The rate tables, both ways, every entry. */
	int bad = 0, n = sizeof rates / sizeof rates[0];
	for (int i = 0; i < n; i++) {
		int mbps = ibv_rate_to_mbps(rates[i].rate), mult = ibv_rate_to_mult(rates[i].rate);
		if (mbps != rates[i].mbps || mbps_to_ibv_rate(rates[i].mbps) != rates[i].rate || mult != rates[i].mult ||
		    (rates[i].mult > 0 && mult_to_ibv_rate(rates[i].mult) != rates[i].rate)) {
			printf("  rate %d: %d Mb/s, multiple %d (want %d, %d)\n", rates[i].rate, mbps, mult, rates[i].mbps,
			       rates[i].mult);
			bad++;
		}
	}
	EXPECT(bad == 0, "verbs.c: the %d rates convert to Mb/s and multiples of 2.5 Gb/s and back as rdma-core's tables "
	       "(%d wrong)", n, bad);
	EXPECT(ibv_rate_to_mbps(IBV_RATE_100_GBPS) == 103125 && mbps_to_ibv_rate(100000) == IBV_RATE_MAX,
	       "ibv_rate_to_mbps(IBV_RATE_100_GBPS) is 103125 (the encoded data rate), 100000 Mb/s is no rate (%d, %d)",
	       ibv_rate_to_mbps(IBV_RATE_100_GBPS), mbps_to_ibv_rate(100000));
	EXPECT(ibv_rate_to_mbps(IBV_RATE_MAX) == -1 && ibv_rate_to_mult(IBV_RATE_MAX) == -1 &&
		       ibv_rate_to_mult(IBV_RATE_100_GBPS) == -1 && mult_to_ibv_rate(3) == IBV_RATE_MAX &&
		       mbps_to_ibv_rate(0) == IBV_RATE_MAX,
	       "values outside the tables: -1 and IBV_RATE_MAX");

	/* What dummy_ops.c answers for a provider without the operation. */
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp = contract_lone_qp(&pd, &cq);
	struct ibv_context *ctx = pd->context;
	struct ibv_ece ece = { .vendor_id = 0x15b3, .options = 1 };
	int r = ibv_query_ece(qp, &ece);
	EXPECT(r == EOPNOTSUPP, "ibv_query_ece returns EOPNOTSUPP (iWARP carries no ECE; got %d)", r);
	errno = 0;
	r = ibv_set_ece(qp, &ece);
	EXPECT(r == EOPNOTSUPP, "ibv_set_ece with a vendor returns EOPNOTSUPP (got %d)", r);
	ece.vendor_id = 0;
	errno = 0;
	r = ibv_set_ece(qp, &ece);
	EXPECT(r == EOPNOTSUPP && errno == EOPNOTSUPP, "ibv_set_ece with vendor_id 0: EOPNOTSUPP, errno too (got %d, %s)",
	       r, strerror(errno));
	errno = 0;
	struct ibv_mr *mr = ibv_import_mr(pd, 1);
	EXPECT(!mr && errno == EOPNOTSUPP, "ibv_import_mr: NULL, errno EOPNOTSUPP (got %p, %s)", (void *)mr,
	       strerror(errno));
	errno = 0;
	struct ibv_dm *dm = ibv_import_dm(ctx, 1);
	EXPECT(!dm && errno == EOPNOTSUPP, "ibv_import_dm: NULL, errno EOPNOTSUPP (got %p, %s)", (void *)dm,
	       strerror(errno));
	r = ibv_query_qp_data_in_order(qp, IBV_WR_RDMA_WRITE, 0);
	EXPECT(r == 0, "ibv_query_qp_data_in_order: 0, in-order placement not guaranteed (got %d)", r);

	static char page[4096] __attribute__((aligned(4096)));
	EXPECT(ibv_is_fork_initialized() == IBV_FORK_UNNEEDED && ibv_dontfork_range(page, sizeof page) == 0 &&
		       ibv_dofork_range(page, sizeof page) == 0,
	       "fork needs no help: ibv_dontfork_range and ibv_dofork_range return 0");

	/* The GID table: the port's one GID, as ibv_query_gid reports it. */
	struct ibv_gid_entry t[4];
	union ibv_gid g;
	memset(t, 0, sizeof t);
	ssize_t k = ibv_query_gid_table(ctx, t, 4, 0);
	EXPECT(k == 1 && ibv_query_gid(ctx, 1, 0, &g) == 0 && !memcmp(&g, &t[0].gid, sizeof g) && t[0].port_num == 1 &&
		       t[0].gid_index == 0,
	       "ibv_query_gid_table: one entry, port 1's GID 0 (got %zd)", k);
	k = ibv_query_gid_table(ctx, t, 0, 0);
	EXPECT(k == -EINVAL, "ibv_query_gid_table with no room: -EINVAL (got %zd)", k);
	k = ibv_query_gid_table(ctx, t, 4, 1);
	EXPECT(k == -EOPNOTSUPP, "ibv_query_gid_table with flags: -EOPNOTSUPP (got %zd)", k);

	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	return contract_end();
}
