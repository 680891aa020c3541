/*
 * Contract: what rdma-core's libibverbs returns for
 * - ibv_port_state_str(3), ibv_wc_status_str(3): the strings of libibverbs/enum_strs.c
 *   ("active", "down", ...; "TM error", "TM software rendezvous"), which Debian's
 *   libibverbs1 (44.0) returns as well;
 * - ibv_rereg_mr(3): "returns 0 on success, otherwise an error has occurred, enum
 *   ibv_rereg_mr_err_code represents the error" (all negative: IBV_REREG_MR_ERR_INPUT -1
 *   ... IBV_REREG_MR_ERR_CMD -4), errno set. rdma-core for a provider without rereg_mr
 *   (dummy_ops.c) answers IBV_REREG_MR_ERR_CMD with errno EOPNOTSUPP; a caller testing
 *   `< 0` must not read success.
 * One process, no peer:
 *   verbs_strs_rereg
 */
#include <errno.h>
#include <string.h>
#include <infiniband/verbs.h>

static const char *contract_name = "verbs_strs_rereg";
#include "contract.h"

int main(void)
{
	static const char *const port[] = { "no state change (NOP)", "down", "init", "armed", "active", "active defer" };
	int bad = 0;
	for (int i = 0; i <= IBV_PORT_ACTIVE_DEFER; i++)
		bad += strcmp(ibv_port_state_str(i), port[i]) != 0;
	EXPECT(bad == 0, "ibv_port_state_str: rdma-core's strings (IBV_PORT_ACTIVE: got \"%s\")",
	       ibv_port_state_str(IBV_PORT_ACTIVE));
	EXPECT(!strcmp(ibv_wc_status_str(IBV_WC_TM_ERR), "TM error") &&
		       !strcmp(ibv_wc_status_str(IBV_WC_TM_RNDV_INCOMPLETE), "TM software rendezvous"),
	       "ibv_wc_status_str: IBV_WC_TM_ERR and IBV_WC_TM_RNDV_INCOMPLETE named (got \"%s\", \"%s\")",
	       ibv_wc_status_str(IBV_WC_TM_ERR), ibv_wc_status_str(IBV_WC_TM_RNDV_INCOMPLETE));

	struct ibv_context *ctx = contract_open_device();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static char buf[4096];
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!mr)
		DIE("ibv_alloc_pd/ibv_reg_mr: %s", strerror(errno));
	errno = 0;
	int r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	int e = errno;
	EXPECT(r < 0 && e != 0,
	       "ibv_rereg_mr(3): unsupported, a negative enum ibv_rereg_mr_err_code with errno set (got %d, errno %d)", r, e);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	return contract_end();
}
