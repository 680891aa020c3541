/*
 * What the contract checks (rdma-compat/tests/c/<contract>.c, run by
 * scripts/test-rdma-compat.sh) share: each check is named after the man page clause it
 * tests and prints "ok: <clause> (<what was seen>)" or "FAIL: ..."; the program ends with
 * "<name>: all checks passed" and exit 0, or "<name>: N checks failed" and exit 1. A step
 * a check needs that does not work exits 2 at once (DIE): nothing is ever skipped.
 */
#ifndef CONTRACT_H
#define CONTRACT_H
#include <stdio.h>
#include <stdlib.h>

static int contract_failed, contract_run;
#define DIE(...) do { fprintf(stderr, "%s: cannot run: ", contract_name); fprintf(stderr, __VA_ARGS__); \
	fputc('\n', stderr); printf("%s: a check could not run\n", contract_name); exit(2); } while (0)
#define EXPECT(c, ...) do { contract_run++; if (c) printf("ok: "); else { printf("FAIL: "); contract_failed++; } \
	printf(__VA_ARGS__); putchar('\n'); fflush(stdout); } while (0)

static int contract_end(void)
{
	if (contract_failed) {
		printf("%s: %d of %d checks failed\n", contract_name, contract_failed, contract_run);
		return 1;
	}
	printf("%s: all checks passed\n", contract_name);
	return 0;
}

#ifdef INFINIBAND_VERBS_H
/* The setup the verbs checks share (static inline: a check that uses none of it, such as an
 * rdma_cm-only one, imports no ibv_ symbol for it). */
#include <errno.h>
#include <string.h>

/* The first device, opened. */
static inline struct ibv_context *contract_open_device(void)
{
	int n;
	struct ibv_device **l = ibv_get_device_list(&n);
	if (!l || n < 1)
		DIE("no device");
	struct ibv_context *ctx = ibv_open_device(l[0]);
	if (!ctx)
		DIE("ibv_open_device: %s", strerror(errno));
	return ctx;
}

/* An RC QP on scq/rcq (and srq, if not NULL): 8 work requests each way, at most send_sge
 * and recv_sge SGEs in one. */
static inline struct ibv_qp *contract_rc_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq,
					    struct ibv_srq *srq, unsigned send_sge, unsigned recv_sge)
{
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = scq;
	a.recv_cq = rcq;
	a.srq = srq;
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = a.cap.max_recv_wr = 8;
	a.cap.max_send_sge = send_sge;
	a.cap.max_recv_sge = recv_sge;
	struct ibv_qp *q = ibv_create_qp(pd, &a);
	if (!q)
		DIE("ibv_create_qp: %s", strerror(errno));
	return q;
}
#endif

#ifdef RDMA_CMA_H
#include <errno.h>
#include <string.h>
#include <unistd.h>

/* An RC endpoint (rdma_create_ep) for address a, port p, passive or active, with a QP of
 * 8 work requests and one SGE each way. */
static inline struct rdma_cm_id *contract_ep(const char *a, const char *p, int passive)
{
	struct rdma_addrinfo h, *res;
	struct ibv_qp_init_attr at;
	struct rdma_cm_id *id;
	memset(&h, 0, sizeof h);
	h.ai_port_space = RDMA_PS_TCP;
	if (passive)
		h.ai_flags = RAI_PASSIVE;
	if (rdma_getaddrinfo(a, p, &h, &res))
		DIE("rdma_getaddrinfo: %s", strerror(errno));
	memset(&at, 0, sizeof at);
	at.cap.max_send_wr = at.cap.max_recv_wr = 8;
	at.cap.max_send_sge = at.cap.max_recv_sge = 1;
	if (rdma_create_ep(&id, res, NULL, &at))
		DIE("rdma_create_ep: %s", strerror(errno));
	return id;
}

/* The passive side of a two-process check: accepts one connection at a, p, keeps it for
 * five seconds while the active side runs the checks, and ends as contract_end(). */
static inline int contract_serve(const char *a, const char *p)
{
	struct rdma_cm_id *l = contract_ep(a, p, 1), *id;
	if (rdma_listen(l, 1) || rdma_get_request(l, &id) || rdma_accept(id, NULL))
		DIE("server: %s", strerror(errno));
	sleep(5);
	return contract_end();
}
#endif
#endif
