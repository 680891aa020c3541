/*
 * Contract: a memory region with a bound memory window is not deregistered.
 *   ibv_dereg_mr(3): returns 0 on success or the errno of the failure; with memory
 *     windows bound to the region it fails with EBUSY (the kernel's answer, which
 *     rdma-core passes on), and the region stays registered, so the application must not
 *     free its memory yet. Once the window is deallocated the region deregisters.
 * Before the fix ibv_dereg_mr returned 0 while the region stayed registered with its
 * remote rights: an application that then freed the buffer left memory a peer could
 * still write.
 *   dereg_mr_ebusy -s ADDR PORT   server: accepts one connection, keeps it until the client disconnects (contract_serve)
 *   dereg_mr_ebusy -c ADDR PORT   client: binds a type 1 window, the checks
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

static const char *contract_name = "dereg_mr_ebusy";
#include "contract.h"

static int client(const char *a, const char *p)
{
	struct rdma_cm_id *id = contract_connect(a, p);
	static char buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(id->pd, buf, sizeof buf,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND);
	struct ibv_mw *mw = mr ? ibv_alloc_mw(id->pd, IBV_MW_TYPE_1) : NULL;
	if (!mw)
		DIE("ibv_reg_mr/ibv_alloc_mw: %s", strerror(errno));
	/* A window over 64 octets at offset 1024 of the region (its address space). */
	struct ibv_mw_bind bind = { .wr_id = 7, .send_flags = IBV_SEND_SIGNALED,
		.bind_info = { .mr = mr, .addr = (uintptr_t)(buf + 1024), .length = 64,
			       .mw_access_flags = IBV_ACCESS_REMOTE_WRITE } };
	if (ibv_bind_mw(id->qp, mw, &bind))
		DIE("ibv_bind_mw: %s", strerror(errno));
	struct ibv_wc wc;
	int got = 0;
	for (int i = 0; i < 500 && got == 0; i++) {
		got = ibv_poll_cq(id->send_cq, 1, &wc);
		if (got == 0)
			usleep(10000);
	}
	if (got != 1 || wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_BIND_MW)
		DIE("the bind did not complete (%d, %s)", got, got == 1 ? ibv_wc_status_str(wc.status) : "-");
	int busy = ibv_dereg_mr(mr);
	EXPECT(busy == EBUSY, "ibv_dereg_mr(3): fails with EBUSY while a memory window is bound to the region (got %d)", busy);
	int w = ibv_dealloc_mw(mw);
	int m = ibv_dereg_mr(mr);
	EXPECT(w == 0 && m == 0, "ibv_dereg_mr succeeds once the window is deallocated (dealloc_mw %d, dereg_mr %d)", w, m);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, contract_serve, client);
}
