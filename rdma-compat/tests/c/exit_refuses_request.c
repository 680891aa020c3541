/*
 * Contract: a process's normal exit refuses the connection requests it never answered.
 *   rdma_cm (the kernel's): a process's /dev/infiniband/rdma_cm descriptor is closed when
 *     it exits; ucma_close() destroys every id it still has (rdma_destroy_id), the new ids
 *     of requests whose CONNECT_REQUEST it never read too (ucma_cleanup_ctx_events), and
 *     iw_cm's destroy_cm_id rejects a request still in IW_CM_STATE_CONN_RECV ("must tell
 *     the provider to reject": siw_reject sends an MPA Reply with the Reject flag and
 *     releases the socket). The peer's rdma_connect ends in RDMA_CM_EVENT_REJECTED at
 *     once, not at its connect timeout.
 * Before the fix the drop-in's engine died with the process and answered nothing: the
 * peer waited for its connect timeout.
 *   exit_refuses_request -s ADDR PORT   server: listens on PORT and PORT+1 (each on its
 *                                       own channel), accepts the control connection on
 *                                       PORT+2, reads and acknowledges the request on
 *                                       PORT, sees the one on PORT+1 queued (its channel
 *                                       readable, the event not read), and returns from
 *                                       main answering neither
 *   exit_refuses_request -c ADDR PORT   client: connects both, wants each refused within
 *                                       2 s of its rdma_connect
 */
#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "exit_refuses_request";
#include "contract.h"

/* Within how many milliseconds of the client's rdma_connect the server's exit must show. */
#define WITHIN_MS 2000

static int client(const char *a, const char *p)
{
	int port = contract_port(p);
	struct rdma_event_channel *ctl = contract_channel();
	struct rdma_cm_id *cid = contract_control_connection(ctl, a, port + 2, 5000);
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *ids[2];
	for (int k = 0; k < 2; k++)
		ids[k] = contract_active(ec, a, port + k, 5000);
	struct rdma_conn_param cp = contract_conn_param(1, 1, NULL, 0);
	double t0 = contract_now_ms();
	for (int k = 0; k < 2; k++)
		if (rdma_connect(ids[k], &cp))
			DIE("rdma_connect: %s", strerror(errno));
	int seen[2] = { 0, 0 };
	for (int n = 0; n < 2; n++) {
		int left = WITHIN_MS + 1000 - (int)(contract_now_ms() - t0);
		struct rdma_cm_event *ev = contract_next_event(ec, left > 0 ? left : 0);
		double dt = contract_now_ms() - t0;
		if (!ev)
			break;
		int k = ev->id == ids[1];
		seen[k] = 1;
		int got = ev->event;
		EXPECT(got == RDMA_CM_EVENT_REJECTED && dt <= WITHIN_MS,
		       "the request to port %d, which the server read%s and never answered: its exit refuses it at "
		       "once, as the kernel's close of its rdma_cm descriptor does (got %s %.0f ms after "
		       "rdma_connect, want the rejected event within %d ms)",
		       port + k, k ? " not (its CONNECT_REQUEST still queued)" : " and acknowledged",
		       rdma_event_str(got), dt, WITHIN_MS);
		rdma_ack_cm_event(ev);
	}
	for (int k = 0; k < 2; k++)
		EXPECT(seen[k], "the request to port %d has its answer within %d ms (%s)", port + k, WITHIN_MS,
		       seen[k] ? "it came" : "nothing came");
	for (int k = 0; k < 2; k++) {
		rdma_destroy_qp(ids[k]);
		rdma_destroy_id(ids[k]);
	}
	rdma_destroy_qp(cid);
	rdma_destroy_id(cid);
	return contract_end();
}

static int server(const char *a, const char *p)
{
	int port = contract_port(p);
	struct rdma_event_channel *ecs[2];
	for (int k = 0; k < 2; k++) {
		ecs[k] = contract_channel();
		contract_listener(ecs[k], a, port + k);
	}
	struct rdma_event_channel *ctl = contract_channel();
	struct rdma_cm_id *cid = contract_control_request(ctl, a, port + 2);
	contract_control_accept(ctl, cid, 10000);
	/* Read and acknowledged, never answered. */
	rdma_ack_cm_event(contract_expect_event(ecs[0], RDMA_CM_EVENT_CONNECT_REQUEST, 60000));
	/* Queued, never read. */
	if (contract_readable(ecs[1]->fd, 60000) != 1)
		DIE("no request on port %d", port + 1);
	/* Returns from main holding both. */
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, server, client);
}
