/*
 * Contract: inputs the kernel's siw driver and rdma-core's libibverbs answer in a way the
 * drop-in did not (each "before" is what it answered):
 *   - ibv_get_device_guid(3) returns the device's node GUID, the node_guid ibv_query_device
 *     reports, before the device is opened too (rdma-core reads it from sysfs); before, 0
 *     until the first ibv_open_device, so ibv_devices listed warpcore0 with GUID 0.
 *   - ibv_create_qp(3) of a QP without a send queue (cap.max_send_wr 0) fails with EINVAL,
 *     as siw_create_qp refuses it ("QP must have send queue"); before, it was made with a
 *     send queue of one entry. One without a receive queue (max_recv_wr 0) is made, and
 *     ibv_post_recv(3) on it fails with EINVAL, bad_wr the request, as siw_post_receive
 *     answers (rq_size 0); before, the receive was taken into a queue of one entry.
 *   - ibv_reg_mr(3) at a NULL address fails with EFAULT, what the kernel's ib_umem_get
 *     finds pinning page 0; before, EINVAL.
 *   - ibv_reg_mr(3) with an access bit that is no IBV_ACCESS_* flag fails with EINVAL, as
 *     the kernel's ib_check_mr_access refuses a bit outside IB_ACCESS_SUPPORTED; before,
 *     EOPNOTSUPP. On-demand paging, a flag the device lacks, stays EOPNOTSUPP.
 * One process, no peer:
 *   verbs_inputs_errno
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <infiniband/verbs.h>

static const char *contract_name = "verbs_inputs_errno";
#include "contract.h"

static char buf[4096];

/* ibv_reg_mr of buf with access acc (at addr) must fail with errno want. */
static void reg_refused(struct ibv_pd *pd, void *addr, int acc, int want, const char *what)
{
	errno = 0;
	struct ibv_mr *mr = ibv_reg_mr(pd, addr, sizeof buf, acc);
	int e = errno;
	EXPECT(!mr && e == want, "ibv_reg_mr(3): %s fails with %s (got %s)", what, strerror(want),
	       mr ? "an MR" : strerror(e));
	if (mr)
		ibv_dereg_mr(mr);
}

int main(void)
{
	int n;
	struct ibv_device **l = ibv_get_device_list(&n);
	if (!l || n < 1)
		DIE("no device");
	uint64_t before = ibv_get_device_guid(l[0]);
	struct ibv_context *ctx = ibv_open_device(l[0]);
	if (!ctx)
		DIE("ibv_open_device: %s", strerror(errno));
	struct ibv_device_attr da;
	if (ibv_query_device(ctx, &da))
		DIE("ibv_query_device: %s", strerror(errno));
	uint64_t after = ibv_get_device_guid(l[0]);
	EXPECT(before != 0 && before == da.node_guid,
	       "ibv_get_device_guid(3) before ibv_open_device: the node GUID ibv_query_device reports (got %016llx, node_guid %016llx)",
	       (unsigned long long)before, (unsigned long long)da.node_guid);
	EXPECT(after == da.node_guid, "ibv_get_device_guid(3) after ibv_open_device: the node GUID (got %016llx)",
	       (unsigned long long)after);

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!pd || !cq)
		DIE("pd/cq: %s", strerror(errno));
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = a.recv_cq = cq;
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = 0;
	a.cap.max_recv_wr = 4;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	errno = 0;
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	int e = errno;
	EXPECT(!qp && e == EINVAL, "ibv_create_qp(3): a QP without a send queue (max_send_wr 0) fails with EINVAL, as on siw (got %s)",
	       qp ? "a QP" : strerror(e));
	if (qp)
		ibv_destroy_qp(qp);
	a.cap.max_send_wr = 1;
	qp = ibv_create_qp(pd, &a);
	EXPECT(qp != NULL, "ibv_create_qp(3): the same QP with a send queue of one entry is made (got %s)",
	       qp ? "a QP" : strerror(errno));
	if (qp)
		ibv_destroy_qp(qp);
	/* Without a receive queue: made, as on siw, and a receive is refused as siw's
	 * siw_post_receive refuses it (rq_size 0: EINVAL, bad_wr the first request). */
	a.cap.max_recv_wr = 0;
	qp = ibv_create_qp(pd, &a);
	EXPECT(qp != NULL, "ibv_create_qp(3): a QP without a receive queue (max_recv_wr 0) is made, as on siw (got %s)",
	       qp ? "a QP" : strerror(errno));
	if (qp) {
		struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 0, .lkey = 0 };
		struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad = NULL;
		int r = ibv_post_recv(qp, &rw, &bad);
		EXPECT(r == EINVAL && bad == &rw,
		       "ibv_post_recv(3) on a QP without a receive queue: EINVAL, bad_wr the request, as on siw (got %d: %s)",
		       r, r ? strerror(r) : "posted");
		ibv_destroy_qp(qp);
	}

	reg_refused(pd, NULL, IBV_ACCESS_LOCAL_WRITE, EFAULT, "a NULL address");
	reg_refused(pd, NULL, 0, EFAULT, "a NULL address, for local reads only");
	reg_refused(pd, buf, IBV_ACCESS_LOCAL_WRITE | (1 << 12), EINVAL, "access bit 12, no IBV_ACCESS_* flag");
	reg_refused(pd, buf, IBV_ACCESS_LOCAL_WRITE | (1 << 30), EINVAL, "access bit 30, no IBV_ACCESS_* flag");
	reg_refused(pd, buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND, EOPNOTSUPP,
		    "IBV_ACCESS_ON_DEMAND, which the device does not support");
	errno = 0;
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 0, IBV_ACCESS_LOCAL_WRITE);
	e = errno;
	EXPECT(!mr && e == EINVAL, "ibv_reg_mr(3): no octets fails with EINVAL, as on siw (got %s)",
	       mr ? "an MR" : strerror(e));
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_free_device_list(l);
	return contract_end();
}
