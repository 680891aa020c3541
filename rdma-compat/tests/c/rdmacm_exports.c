/*
 * Contract: the librdmacm functions Debian's librdmacm.so.1 exports besides rsockets,
 * each answering as librdmacm (librdmacm/cma.c) and the kernel's rdma_cm answer on an
 * iWARP device. Before the fix Warpcore's librdmacm.so.1 lacked them: this program (and
 * mckey, which imports rdma_join_multicast_ex and rdma_leave_multicast) did not load.
 *   - rdma_join_multicast, rdma_join_multicast_ex: multicast needs a UD id, which iWARP
 *     has not (the kernel refuses a join on any other id with EINVAL); librdmacm's own
 *     checks of the _ex attributes first (reserved mask bits: ENOTSUP; no address or no
 *     join flags: EINVAL).
 *   - rdma_leave_multicast of a group never joined: EADDRNOTAVAIL.
 *   - rdma_set_local_ece / rdma_get_remote_ece (rdma_set_local_ece(3)): EINVAL for a zero
 *     vendor id, a comp_mask, or an id with a QP; accepted otherwise; the peer's ECE is
 *     zero (no iWARP message carries one).
 *   - rdma_create_srq_ex: EINVAL without IBV_SRQ_INIT_ATTR_TYPE, EOPNOTSUPP for an XRC
 *     SRQ, a basic SRQ on the id's PD otherwise (id->srq set).
 *   rdma_reject_ece is checked between two processes in init_qp_attr_states.c.
 */
#include <errno.h>
#include <string.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

static const char *contract_name = "rdmacm_exports";
#include "contract.h"

/* r is -1 with errno `want` (e, saved right after the call); `what` names the call. */
static void fails(int r, int e, int want, const char *what)
{
	EXPECT(r == -1 && e == want, "%s: %s (got %d: %s)", what, strerror(want), r, r ? strerror(e) : "0");
}

int main(void)
{
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *id;
	if (rdma_create_id(ec, &id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id: %s", strerror(errno));
	struct sockaddr_in any = contract_sockaddr("0.0.0.0", 7470);
	if (rdma_bind_addr(id, (struct sockaddr *)&any))
		DIE("rdma_bind_addr: %s", strerror(errno));
	struct sockaddr_in group = contract_sockaddr("239.1.2.3", 7471);
	int r, e;

	r = rdma_join_multicast(id, (struct sockaddr *)&group, NULL), e = errno;
	fails(r, e, EINVAL, "rdma_join_multicast on an RDMA_PS_TCP id (multicast needs UD)");
	r = rdma_join_multicast(id, NULL, NULL), e = errno;
	fails(r, e, EINVAL, "rdma_join_multicast without an address");

	struct rdma_cm_join_mc_attr_ex mc = { .comp_mask = RDMA_CM_JOIN_MC_ATTR_RESERVED,
					      .addr = (struct sockaddr *)&group };
	r = rdma_join_multicast_ex(id, &mc, NULL), e = errno;
	fails(r, e, ENOTSUP, "rdma_join_multicast_ex with a reserved comp_mask bit");
	mc.comp_mask = RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	r = rdma_join_multicast_ex(id, &mc, NULL), e = errno;
	fails(r, e, EINVAL, "rdma_join_multicast_ex without RDMA_CM_JOIN_MC_ATTR_ADDRESS");
	mc.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	mc.join_flags = RDMA_MC_JOIN_FLAG_RESERVED;
	r = rdma_join_multicast_ex(id, &mc, NULL), e = errno;
	fails(r, e, EINVAL, "rdma_join_multicast_ex with a reserved join flag");
	mc.join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER;
	r = rdma_join_multicast_ex(id, &mc, NULL), e = errno;
	fails(r, e, EINVAL, "rdma_join_multicast_ex on an RDMA_PS_TCP id (multicast needs UD)");

	r = rdma_leave_multicast(id, (struct sockaddr *)&group), e = errno;
	fails(r, e, EADDRNOTAVAIL, "rdma_leave_multicast of a group never joined");
	r = rdma_leave_multicast(id, NULL), e = errno;
	fails(r, e, EINVAL, "rdma_leave_multicast without an address");

	struct ibv_ece ece = { .vendor_id = 0, .options = 1 };
	r = rdma_set_local_ece(id, &ece), e = errno;
	fails(r, e, EINVAL, "rdma_set_local_ece with vendor_id 0");
	ece.vendor_id = 0x1234;
	ece.comp_mask = 1;
	r = rdma_set_local_ece(id, &ece), e = errno;
	fails(r, e, EINVAL, "rdma_set_local_ece with a comp_mask");
	ece.comp_mask = 0;
	r = rdma_set_local_ece(id, &ece);
	EXPECT(r == 0, "rdma_set_local_ece on an id without a QP (got %d: %s)", r, r ? strerror(errno) : "0");
	memset(&ece, 0xa5, sizeof ece);
	r = rdma_get_remote_ece(id, &ece);
	EXPECT(r == 0 && ece.vendor_id == 0 && ece.options == 0 && ece.comp_mask == 0,
	       "rdma_get_remote_ece: zero, no iWARP message carries ECE (got %d, vendor %#x options %#x mask %#x)", r,
	       ece.vendor_id, ece.options, ece.comp_mask);

	struct ibv_srq_init_attr_ex sa;
	memset(&sa, 0, sizeof sa);
	sa.attr.max_wr = 8;
	sa.attr.max_sge = 1;
	r = rdma_create_srq_ex(id, &sa), e = errno;
	fails(r, e, EINVAL, "rdma_create_srq_ex without IBV_SRQ_INIT_ATTR_TYPE");
	sa.comp_mask = IBV_SRQ_INIT_ATTR_TYPE;
	sa.srq_type = IBV_SRQT_XRC;
	r = rdma_create_srq_ex(id, &sa), e = errno;
	fails(r, e, EOPNOTSUPP, "rdma_create_srq_ex of an XRC SRQ");
	struct ibv_pd *pd = ibv_alloc_pd(id->verbs);
	if (!pd)
		DIE("ibv_alloc_pd: %s", strerror(errno));
	id->pd = pd;
	memset(&sa, 0, sizeof sa);
	sa.attr.max_wr = 8;
	sa.attr.max_sge = 1;
	sa.comp_mask = IBV_SRQ_INIT_ATTR_TYPE;
	sa.srq_type = IBV_SRQT_BASIC;
	r = rdma_create_srq_ex(id, &sa);
	EXPECT(r == 0 && id->srq && sa.pd == pd && sa.attr.max_wr >= 8,
	       "rdma_create_srq_ex of a basic SRQ, on the id's PD (got %d: %s, srq %p)", r, r ? strerror(errno) : "0",
	       (void *)id->srq);
	if (r == 0)
		rdma_destroy_srq(id);

	/* With a QP on the id, the ECE calls are refused. */
	struct sockaddr_in dst = contract_sockaddr("10.77.0.1", 7472);
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000))
		DIE("rdma_resolve_addr: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ADDR_RESOLVED, 5000));
	struct ibv_qp_init_attr at;
	memset(&at, 0, sizeof at);
	at.qp_type = IBV_QPT_RC;
	at.cap.max_send_wr = at.cap.max_recv_wr = 4;
	at.cap.max_send_sge = at.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, pd, &at))
		DIE("rdma_create_qp: %s", strerror(errno));
	ece.vendor_id = 0x1234;
	ece.comp_mask = 0;
	r = rdma_set_local_ece(id, &ece), e = errno;
	fails(r, e, EINVAL, "rdma_set_local_ece on an id with a QP");
	r = rdma_get_remote_ece(id, &ece), e = errno;
	fails(r, e, EINVAL, "rdma_get_remote_ece on an id with a QP");
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	ibv_dealloc_pd(pd);
	rdma_destroy_event_channel(ec);
	return contract_end();
}
