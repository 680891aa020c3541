/*
 * Contract: an rdma_cm_id bound to a device carries the device's protection domain in
 * id->pd, as librdmacm's do (ucma_get_device: one PD per device, given to every id on it),
 * so an application may register memory on id->pd before it creates the QP, and
 * rdma_create_qp / rdma_create_srq with a NULL PD use it (rdma_create_qp(3): "If the pd
 * is NULL, the rdma_cm_id will be created using a default protection domain"). Before the
 * fix id->pd stayed NULL until rdma_create_qp made a PD of the id's own: ibv_reg_mr(id->pd)
 * and rdma_create_srq(id, NULL) failed with EINVAL before it.
 *
 * rdma_create_qp(3) that fails after it made the CQs the caller left out destroys them
 * again, as librdmacm's rdma_create_qp_ex does (ucma_destroy_cqs).
 *
 * Address and route resolution answer as the kernel's rdma_cm does on iWARP:
 * - rdma_resolve_addr(3) of an address with no route (off the port's subnet, no gateway)
 *   fails at once with errno ENETUNREACH and queues no event (rdma_resolve_ip's route
 *   lookup fails; the id is back in ADDR_BOUND), so rdma_resolve_route(3) on that id is
 *   EINVAL. Before the fix it queued ADDR_ERROR with status -EHOSTUNREACH, a status the
 *   kernel's IPv4 resolution never reports, and a later rdma_resolve_route answered
 *   ROUTE_RESOLVED.
 * - ADDR_RESOLVED and ROUTE_RESOLVED carry status 0 (iWARP has no route query:
 *   cma_resolve_iw_route queues ROUTE_RESOLVED, and librdmacm's ROUTE_ERROR rewrite is
 *   for IB only).
 * - rdma_resolve_addr(3) of an address on the subnet whose host never answers ARP (one
 *   process: nobody holds 10.77.0.2) returns 0 and, once timeout_ms has passed, queues
 *   ADDR_ERROR with status -ETIMEDOUT (addr.c's process_one_req turns the unresolved
 *   neighbour's -ENODATA into -ETIMEDOUT at the timeout; cma.c's addr_handler reports it
 *   as ADDR_ERROR), not before; the id is back in ADDR_BOUND, so rdma_resolve_route(3)
 *   is EINVAL. On a synchronous id (no channel) the call itself fails with ETIMEDOUT
 *   (librdmacm's ucma_complete). Before, ADDR_RESOLVED came at once and the connect
 *   failed later. Our own address (10.77.0.1) resolves at once (the kernel's loopback).
 *   rdma_resolve_addr(3) again while the first resolution runs is EINVAL (the kernel's
 *   id is in ADDR_QUERY) and the id gets one answer; before, it got two.
 * - rdma_listen(3) on an id that listens already is EINVAL, as the kernel's rdma_listen
 *   answers (its rdma_bind_addr refuses an id that is not idle); before, EADDRINUSE.
 */
#include <errno.h>
#include <string.h>
#include <time.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

static const char *contract_name = "id_device_pd";
#include "contract.h"

/* A new id on ec with its address resolved to our own, 10.77.0.1, port `port`
 * (ADDR_RESOLVED taken). */
static struct rdma_cm_id *resolved(struct rdma_event_channel *ec, int port)
{
	struct rdma_cm_id *id;
	struct sockaddr_in dst = contract_sockaddr("10.77.0.1", port);
	if (rdma_create_id(ec, &id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id: %s", strerror(errno));
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000))
		DIE("rdma_resolve_addr: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ADDR_RESOLVED, 5000));
	return id;
}

/* Resolution of an address with no route, then of one on the subnet, on one id. */
static void resolution_statuses(struct rdma_event_channel *ec)
{
	struct rdma_cm_id *id;
	if (rdma_create_id(ec, &id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id: %s", strerror(errno));
	struct sockaddr_in far = contract_sockaddr("192.0.2.1", 7476);
	errno = 0;
	int r = rdma_resolve_addr(id, NULL, (struct sockaddr *)&far, 2000);
	int e = errno;
	EXPECT(r == -1 && e == ENETUNREACH,
	       "rdma_resolve_addr(3) to an address with no route fails with ENETUNREACH (got %d, %s)", r,
	       strerror(e));
	struct rdma_cm_event *ev = contract_next_event(ec, 300);
	EXPECT(ev == NULL, "... and queues no event (got %s, status %d)", ev ? rdma_event_str(ev->event) : "none",
	       ev ? ev->status : 0);
	if (ev)
		rdma_ack_cm_event(ev);
	errno = 0;
	r = rdma_resolve_route(id, 2000);
	e = errno;
	EXPECT(r == -1 && e == EINVAL, "rdma_resolve_route(3) after it is EINVAL (got %d, %s)", r, strerror(e));
	ev = contract_next_event(ec, 300);
	if (ev)
		rdma_ack_cm_event(ev);

	struct sockaddr_in near = contract_sockaddr("10.77.0.1", 7476);
	r = rdma_resolve_addr(id, NULL, (struct sockaddr *)&near, 2000);
	ev = r ? NULL : contract_next_event(ec, 5000);
	EXPECT(ev && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED && ev->status == 0,
	       "the same id then resolves an address on the subnet: ADDR_RESOLVED, status 0 (got %s, status %d)",
	       ev ? rdma_event_str(ev->event) : strerror(errno), ev ? ev->status : 0);
	if (ev)
		rdma_ack_cm_event(ev);
	r = rdma_resolve_route(id, 2000);
	ev = r ? NULL : contract_next_event(ec, 5000);
	EXPECT(ev && ev->event == RDMA_CM_EVENT_ROUTE_RESOLVED && ev->status == 0,
	       "rdma_resolve_route(3): ROUTE_RESOLVED, status 0 (got %s, status %d)",
	       ev ? rdma_event_str(ev->event) : strerror(errno), ev ? ev->status : 0);
	if (ev)
		rdma_ack_cm_event(ev);
	rdma_destroy_id(id);
}

/* Milliseconds of CLOCK_MONOTONIC. */
static long long now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* An address on the subnet nobody holds: ADDR_ERROR -ETIMEDOUT at timeout_ms. */
static void absent_host(struct rdma_event_channel *ec)
{
	struct rdma_cm_id *id;
	if (rdma_create_id(ec, &id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id: %s", strerror(errno));
	struct sockaddr_in gone = contract_sockaddr("10.77.0.2", 7477);
	long long t0 = now_ms();
	int r = rdma_resolve_addr(id, NULL, (struct sockaddr *)&gone, 500);
	EXPECT(r == 0, "rdma_resolve_addr(3) of an absent host on the subnet returns 0 (got %d: %s)", r,
	       r ? strerror(errno) : "0");
	/* Again while it runs: EINVAL (the kernel's id is in ADDR_QUERY), and still one
	 * answer. Before, a second resolution ran beside the first and two came. */
	errno = 0;
	int again = rdma_resolve_addr(id, NULL, (struct sockaddr *)&gone, 500);
	int again_errno = errno;
	EXPECT(again == -1 && again_errno == EINVAL,
	       "rdma_resolve_addr(3) again while the first runs is EINVAL (got %d, %s)", again,
	       again ? strerror(again_errno) : "0");
	struct rdma_cm_event *ev = r ? NULL : contract_next_event(ec, 5000);
	long long took = now_ms() - t0;
	EXPECT(ev && ev->event == RDMA_CM_EVENT_ADDR_ERROR && ev->status == -ETIMEDOUT && took >= 500,
	       "... then ADDR_ERROR, status -ETIMEDOUT, once its timeout_ms of 500 passed (got %s, status %d, after "
	       "%lld ms)",
	       ev ? rdma_event_str(ev->event) : "no event", ev ? ev->status : 0, took);
	if (ev)
		rdma_ack_cm_event(ev);
	ev = contract_next_event(ec, 1000);
	EXPECT(!ev, "... and no second answer (got %s)", ev ? rdma_event_str(ev->event) : "none");
	if (ev)
		rdma_ack_cm_event(ev);
	errno = 0;
	r = rdma_resolve_route(id, 2000);
	int e = errno;
	EXPECT(r == -1 && e == EINVAL, "rdma_resolve_route(3) after ADDR_ERROR is EINVAL (got %d, %s)", r,
	       strerror(e));
	rdma_destroy_id(id);

	struct rdma_cm_id *sync;
	if (rdma_create_id(NULL, &sync, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id (synchronous): %s", strerror(errno));
	errno = 0;
	r = rdma_resolve_addr(sync, NULL, (struct sockaddr *)&gone, 200);
	e = errno;
	EXPECT(r == -1 && e == ETIMEDOUT,
	       "rdma_resolve_addr(3) of an absent host on a synchronous id fails with ETIMEDOUT (got %d, %s)", r,
	       r ? strerror(e) : "0");
	rdma_destroy_id(sync);
}

int main(void)
{
	struct rdma_event_channel *ec = contract_channel();
	resolution_statuses(ec);
	absent_host(ec);
	/* rdma_listen twice on one id: EINVAL the second time. */
	struct rdma_cm_id *l;
	struct sockaddr_in la = contract_sockaddr("10.77.0.1", 7478);
	if (rdma_create_id(ec, &l, NULL, RDMA_PS_TCP) || rdma_bind_addr(l, (struct sockaddr *)&la) ||
	    rdma_listen(l, 4))
		DIE("listener: %s", strerror(errno));
	errno = 0;
	int relisten = rdma_listen(l, 4);
	int relisten_errno = errno;
	EXPECT(relisten == -1 && relisten_errno == EINVAL,
	       "rdma_listen(3) on an id that listens already is EINVAL (got %d, %s)", relisten,
	       relisten ? strerror(relisten_errno) : "0");
	rdma_destroy_id(l);
	struct rdma_cm_id *a = resolved(ec, 7474), *b = resolved(ec, 7475);
	EXPECT(a->pd && a->pd == b->pd && a->pd->context == a->verbs,
	       "ids resolved to the device carry its one PD in id->pd (%p, %p)", (void *)a->pd, (void *)b->pd);

	static char buf[256];
	struct ibv_mr *mr = a->pd ? ibv_reg_mr(a->pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	EXPECT(mr != NULL, "ibv_reg_mr on id->pd before the id has a QP (%s)", mr ? "registered" : strerror(errno));

	struct ibv_srq_init_attr sa;
	memset(&sa, 0, sizeof sa);
	sa.attr.max_wr = 4;
	sa.attr.max_sge = 1;
	int r = rdma_create_srq(b, NULL, &sa);
	EXPECT(r == 0 && b->srq && b->srq->pd == b->pd, "rdma_create_srq with a NULL PD uses id->pd (got %d: %s)", r,
	       r ? strerror(errno) : "0");

	/* A QP the device cannot make (more SGEs than it has), its CQs left to rdma_create_qp:
	 * librdmacm destroys the CQs and channels it made for it (ucma_destroy_cqs), so the id
	 * holds none after the failure and a second try makes its own. Before, they stayed on
	 * the id and the second try made new ones over them. */
	struct ibv_qp_init_attr big;
	memset(&big, 0, sizeof big);
	big.qp_type = IBV_QPT_RC;
	big.cap.max_send_wr = big.cap.max_recv_wr = 4;
	big.cap.max_send_sge = big.cap.max_recv_sge = 1u << 20;
	errno = 0;
	int q = rdma_create_qp(a, NULL, &big);
	EXPECT(q == -1 && a->qp == NULL, "rdma_create_qp(3) of a QP beyond the device's SGEs fails (got %d: %s)", q,
	       strerror(errno));
	EXPECT(!a->send_cq && !a->recv_cq && !a->send_cq_channel && !a->recv_cq_channel && !big.send_cq &&
		       !big.recv_cq,
	       "... leaving no CQ or channel it made on the id (send %p/%p, recv %p/%p)", (void *)a->send_cq,
	       (void *)a->send_cq_channel, (void *)a->recv_cq, (void *)a->recv_cq_channel);

	contract_qp_on(a);
	EXPECT(a->qp->pd == a->pd, "rdma_create_qp with a NULL PD puts the QP on id->pd");

	rdma_destroy_qp(a);
	if (mr)
		ibv_dereg_mr(mr);
	if (r == 0)
		rdma_destroy_srq(b);
	rdma_destroy_id(a);
	rdma_destroy_id(b);
	rdma_destroy_event_channel(ec);
	return contract_end();
}
