/*
 * What the contract checks (rdma-compat/tests/c/<contract>.c, run by
 * scripts/test-rdma-compat.sh) share: each check is named after the man page clause it
 * tests and prints "ok: <clause> (<what was seen>)" or "FAIL: ..."; the program ends with
 * "<name>: all checks passed" and exit 0, or "<name>: N checks failed" and exit 1. A step
 * a check needs that does not work exits 2 at once (DIE): nothing is ever skipped.
 */
#ifndef CONTRACT_H
#define CONTRACT_H
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

/* The main of a two-process check: "<name> -s ADDR PORT" runs server(ADDR, PORT) and
 * "<name> -c ADDR PORT" client(ADDR, PORT); any other command line is a usage error. */
static inline int contract_sides(int argc, char **argv, int (*server)(const char *, const char *),
				 int (*client)(const char *, const char *))
{
	if (argc != 4 || (strcmp(argv[1], "-s") && strcmp(argv[1], "-c")))
		DIE("usage: %s -s|-c ADDR PORT", contract_name);
	return (argv[1][1] == 's' ? server : client)(argv[2], argv[3]);
}

/* PORT of the command line as a number; the checks that take one also use PORT+1. */
static inline int contract_port(const char *p)
{
	char *end;
	long n = strtol(p, &end, 10);
	if (!*p || *end || n < 1 || n > 65534)
		DIE("PORT %s: want a number from 1 to 65534", p);
	return (int)n;
}

/* Sets (on) or clears O_NONBLOCK on fd, so that a read of an empty channel fails with
 * EAGAIN instead of waiting. */
static inline void contract_nonblocking(int fd, int on)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK))
		DIE("fcntl O_NONBLOCK: %s", strerror(errno));
}

/* Whether fd becomes readable within ms milliseconds, as poll(2) answers: 1 if it does, 0
 * if not, -1 on an error. */
static inline int contract_readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	return poll(&p, 1, ms);
}

/* CLOCK_MONOTONIC in milliseconds: what the checks of "within N ms" measure with. */
static inline double contract_now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

#ifdef INFINIBAND_VERBS_H
/* The setup the verbs checks share (static inline: a check that uses none of it, such as an
 * rdma_cm-only one, imports no ibv_ symbol for it). */

/* The next completion of cq within ms milliseconds (returns 1 and fills wc), or 0. */
static inline int contract_next_wc(struct ibv_cq *cq, struct ibv_wc *wc, int ms)
{
	int got = 0;
	for (int i = 0; i < ms && got == 0; i++) {
		got = ibv_poll_cq(cq, 1, wc);
		if (got == 0)
			usleep(1000);
	}
	return got == 1;
}

/* The next completion of cq within ms milliseconds, which must be a success of opcode op. */
static inline void contract_expect_wc(struct ibv_cq *cq, enum ibv_wc_opcode op, int ms, const char *what)
{
	struct ibv_wc wc;
	int got = contract_next_wc(cq, &wc, ms);
	if (!got || wc.status != IBV_WC_SUCCESS || wc.opcode != op)
		DIE("%s: no completion (%d, %s)", what, got, got ? ibv_wc_status_str(wc.status) : "-");
}

/* The next asynchronous event of ctx within ms milliseconds, in *ae: 0, or -1 if none came
 * (*ae zeroed). */
static inline int contract_async_event(struct ibv_context *ctx, struct ibv_async_event *ae, int ms)
{
	contract_nonblocking(ctx->async_fd, 1);
	memset(ae, 0, sizeof *ae);
	return contract_readable(ctx->async_fd, ms) == 1 ? ibv_get_async_event(ctx, ae) : -1;
}

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

/* The first device's context, a PD, one CQ of 16 entries and an RC QP of one SGE each way
 * completing into it (*pd and *cq are set). */
static inline struct ibv_qp *contract_lone_qp(struct ibv_pd **pd, struct ibv_cq **cq)
{
	struct ibv_context *ctx = contract_open_device();
	*pd = ibv_alloc_pd(ctx);
	*cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!*pd || !*cq)
		DIE("pd/cq: %s", strerror(errno));
	return contract_rc_qp(*pd, *cq, *cq, NULL, 1, 1);
}
#endif

#ifdef RDMA_CMA_H
/* The setup the rdma_cm checks share (rdma_cma.h includes verbs.h: the verbs helpers above
 * are there too). */
#include <unistd.h>
#include <arpa/inet.h>

/* A new event channel. */
static inline struct rdma_event_channel *contract_channel(void)
{
	struct rdma_event_channel *ec = rdma_create_event_channel();
	if (!ec)
		DIE("rdma_create_event_channel: %s", strerror(errno));
	return ec;
}

/* The next event on ec within ms milliseconds, or NULL. */
static inline struct rdma_cm_event *contract_next_event(struct rdma_event_channel *ec, int ms)
{
	struct rdma_cm_event *ev;
	if (contract_readable(ec->fd, ms) != 1 || rdma_get_cm_event(ec, &ev))
		return NULL;
	return ev;
}

/* The next event on ec within ms milliseconds, which must be `want` (else the program
 * cannot go on); the caller acknowledges it. */
static inline struct rdma_cm_event *contract_expect_event(struct rdma_event_channel *ec, int want, int ms)
{
	struct rdma_cm_event *ev = contract_next_event(ec, ms);
	if (!ev)
		DIE("no %s: %s", rdma_event_str(want), strerror(errno));
	if ((int)ev->event != want)
		DIE("%s (status %d) instead of %s", rdma_event_str(ev->event), ev->status, rdma_event_str(want));
	return ev;
}

/* Connection parameters for rdma_connect or rdma_accept: responder_resources rr,
 * initiator_depth depth, and the len octets at pd as private data. */
static inline struct rdma_conn_param contract_conn_param(int rr, int depth, const void *pd, int len)
{
	struct rdma_conn_param cp = { .private_data = pd, .private_data_len = len, .responder_resources = rr,
				      .initiator_depth = depth };
	return cp;
}

/* The IPv4 address addr, port port. */
static inline struct sockaddr_in contract_sockaddr(const char *addr, int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
		DIE("not an IPv4 address: %s", addr);
	return sa;
}

/* An id on ec listening at addr, port. */
static inline struct rdma_cm_id *contract_listener(struct rdma_event_channel *ec, const char *addr, int port)
{
	struct rdma_cm_id *l;
	struct sockaddr_in sa = contract_sockaddr(addr, port);
	if (rdma_create_id(ec, &l, NULL, RDMA_PS_TCP) || rdma_bind_addr(l, (struct sockaddr *)&sa) || rdma_listen(l, 4))
		DIE("listener on %d: %s", port, strerror(errno));
	return l;
}

/* An RC QP on id (rdma_create_qp on the library's PD and CQs): 4 work requests and one
 * SGE each way. */
static inline void contract_qp_on(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr at;
	memset(&at, 0, sizeof at);
	at.qp_type = IBV_QPT_RC;
	at.cap.max_send_wr = at.cap.max_recv_wr = 4;
	at.cap.max_send_sge = at.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, NULL, &at))
		DIE("rdma_create_qp: %s", strerror(errno));
}

/* An id on ec with its address and route resolved to addr, port (each step's event within
 * ms milliseconds, acknowledged) and a QP (contract_qp_on): ready for rdma_connect. */
static inline struct rdma_cm_id *contract_active(struct rdma_event_channel *ec, const char *addr, int port, int ms)
{
	struct rdma_cm_id *id;
	struct sockaddr_in dst = contract_sockaddr(addr, port);
	if (rdma_create_id(ec, &id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id: %s", strerror(errno));
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000))
		DIE("rdma_resolve_addr: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ADDR_RESOLVED, ms));
	if (rdma_resolve_route(id, 2000))
		DIE("rdma_resolve_route: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ROUTE_RESOLVED, ms));
	contract_qp_on(id);
	return id;
}

/* A control connection for two-process checks whose server keeps state from what the
 * client does (so the harness may not simply run a client again that found nobody
 * listening): the server listens on it after the listener under test, the client connects
 * to it first, retrying while refused, and its disconnect is the server's go. */

/* Client: the control connection to addr, port on ctl, connecting again (a new id) while
 * it is refused, the server not yet listening, for at most ten seconds; each step's event
 * within ms milliseconds. */
static inline struct rdma_cm_id *contract_control_connection(struct rdma_event_channel *ctl, const char *addr,
							     int port, int ms)
{
	struct rdma_conn_param cp = contract_conn_param(1, 1, NULL, 0);
	for (int tries = 0;; tries++) {
		struct rdma_cm_id *id = contract_active(ctl, addr, port, ms);
		if (rdma_connect(id, &cp))
			DIE("rdma_connect (the control connection): %s", strerror(errno));
		struct rdma_cm_event *ev = contract_next_event(ctl, ms);
		if (!ev)
			DIE("the control connection: no event within %d ms", ms);
		int got = ev->event, status = ev->status;
		rdma_ack_cm_event(ev);
		if (got == RDMA_CM_EVENT_ESTABLISHED)
			return id;
		if (got != RDMA_CM_EVENT_REJECTED || tries == 100)
			DIE("the control connection: %s (status %d) after %d tries", rdma_event_str(got), status,
			    tries + 1);
		rdma_destroy_qp(id);
		rdma_destroy_id(id);
		usleep(100000);
	}
}

/* Server: listens on ctl at addr, port and returns the control connection's new id, with
 * a QP, not yet accepted (the client's request within a minute). */
static inline struct rdma_cm_id *contract_control_request(struct rdma_event_channel *ctl, const char *addr, int port)
{
	contract_listener(ctl, addr, port);
	struct rdma_cm_event *ev = contract_expect_event(ctl, RDMA_CM_EVENT_CONNECT_REQUEST, 60000);
	struct rdma_cm_id *id = ev->id;
	rdma_ack_cm_event(ev);
	contract_qp_on(id);
	return id;
}

/* Server: accepts the control connection id (its ESTABLISHED within ms milliseconds). */
static inline void contract_control_accept(struct rdma_event_channel *ctl, struct rdma_cm_id *id, int ms)
{
	struct rdma_conn_param cp = contract_conn_param(1, 1, NULL, 0);
	if (rdma_accept(id, &cp))
		DIE("rdma_accept (the control connection): %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ctl, RDMA_CM_EVENT_ESTABLISHED, ms));
}

/* Posts a signaled RDMA Read of 64 octets on id's QP, connected without an ORD
 * (initiator_depth 0): ibv_post_send(3) must refuse it with EINVAL, bad_wr on it (siw:
 * "negotiated not to send READ req's"); `how` names the connection in the verdict. Returns
 * the buffer's MR, to deregister once the QP is gone. */
static inline struct ibv_mr *contract_read_refused(struct rdma_cm_id *id, const char *how)
{
	static char buf[64];
	struct ibv_mr *mr = ibv_reg_mr(id->pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!mr)
		DIE("ibv_reg_mr: %s", strerror(errno));
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = sizeof buf, .lkey = mr->lkey };
	struct ibv_send_wr rd = { .wr_id = 7, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
				  .send_flags = IBV_SEND_SIGNALED }, *bad = NULL;
	rd.wr.rdma.remote_addr = (uintptr_t)buf;
	rd.wr.rdma.rkey = mr->rkey;
	int r = ibv_post_send(id->qp, &rd, &bad);
	EXPECT(r == EINVAL && bad == &rd,
	       "ibv_post_send(3): an RDMA Read on %s is refused with EINVAL, bad_wr on it (got %d: %s)", how, r,
	       r ? strerror(r) : "posted");
	return mr;
}

/* The active side's end of a connection: rdma_disconnect, its DISCONNECTED event (within
 * ms milliseconds, acknowledged), the QP destroyed. */
static inline void contract_hang_up(struct rdma_event_channel *ec, struct rdma_cm_id *id, int ms)
{
	if (rdma_disconnect(id))
		DIE("rdma_disconnect: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_DISCONNECTED, ms));
	rdma_destroy_qp(id);
}

/* An RC endpoint (rdma_create_ep) for address a, port p, passive or active, with a QP of
 * 8 work requests and one SGE each way: on pd, the CQs scq and rcq and the SRQ srq where
 * given, else on ones the library makes. */
static inline struct rdma_cm_id *contract_ep_on(const char *a, const char *p, int passive, struct ibv_pd *pd,
					       struct ibv_cq *scq, struct ibv_cq *rcq, struct ibv_srq *srq)
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
	at.send_cq = scq;
	at.recv_cq = rcq;
	at.srq = srq;
	at.cap.max_send_wr = at.cap.max_recv_wr = 8;
	at.cap.max_send_sge = at.cap.max_recv_sge = 1;
	if (rdma_create_ep(&id, res, pd, &at))
		DIE("rdma_create_ep: %s", strerror(errno));
	return id;
}

/* contract_ep_on with the library's PD and CQs and no SRQ. */
static inline struct rdma_cm_id *contract_ep(const char *a, const char *p, int passive)
{
	return contract_ep_on(a, p, passive, NULL, NULL, NULL, NULL);
}

/* The active side's endpoint (contract_ep), connected to a, p. */
static inline struct rdma_cm_id *contract_connect(const char *a, const char *p)
{
	struct rdma_cm_id *id = contract_ep(a, p, 0);
	if (rdma_connect(id, NULL))
		DIE("rdma_connect: %s", strerror(errno));
	return id;
}

/* The passive side's first connection request at a, p (a synchronous listener, *l, made
 * as contract_ep_on makes it): its new id, not yet accepted. */
static inline struct rdma_cm_id *contract_request(const char *a, const char *p, struct ibv_pd *pd, struct ibv_cq *scq,
						 struct ibv_cq *rcq, struct ibv_srq *srq, struct rdma_cm_id **l)
{
	struct rdma_cm_id *id;
	*l = contract_ep_on(a, p, 1, pd, scq, rcq, srq);
	if (rdma_listen(*l, 1) || rdma_get_request(*l, &id))
		DIE("server: %s", strerror(errno));
	return id;
}

/* The passive side of a two-process check: accepts one connection at a, p, keeps it while
 * the active side runs the checks, until the active side's disconnect (or its exit) reaches
 * it as RDMA_CM_EVENT_DISCONNECTED, which it checks comes within 60 s, and ends as
 * contract_end(). (It slept five seconds: 45 of the suite's seconds for nine pairs whose
 * clients ran for one or two, and a client slower than five lost its server.) */
static inline int contract_serve(const char *a, const char *p)
{
	struct rdma_cm_id *l, *id = contract_request(a, p, NULL, NULL, NULL, NULL, &l);
	struct rdma_cm_event *ev;
	int got = -1;
	if (rdma_accept(id, NULL))
		DIE("rdma_accept: %s", strerror(errno));
	/* A synchronous id's events come on its own channel (librdmacm's rdma_create_ep). */
	if (contract_readable(id->channel->fd, 60000) == 1 && !rdma_get_cm_event(id->channel, &ev)) {
		got = ev->event;
		rdma_ack_cm_event(ev);
	}
	EXPECT(got == RDMA_CM_EVENT_DISCONNECTED,
	       "rdma_disconnect(3): the active side's disconnect reaches the passive side as "
	       "RDMA_CM_EVENT_DISCONNECTED (got %s)", got < 0 ? "nothing in 60 s" : rdma_event_str(got));
	return contract_end();
}

#ifdef RDMA_VERBS_H
/* len octets at buf registered for id's messages (rdma_reg_msgs). */
static inline struct ibv_mr *contract_reg_msgs(struct rdma_cm_id *id, void *buf, size_t len)
{
	struct ibv_mr *mr = rdma_reg_msgs(id, buf, len);
	if (!mr)
		DIE("rdma_reg_msgs: %s", strerror(errno));
	return mr;
}
#endif
#endif
#endif
