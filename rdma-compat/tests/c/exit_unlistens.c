/*
 * Contract: a process's normal exit ends the connection requests its engine holds and
 * never reported, as it refuses those it reported (exit_refuses_request).
 *   rdma_cm (the kernel's): ucma_close() destroys every id of the process, its listening
 *     ids too: rdma_destroy_id -> cma_cancel_listens, and iw_cm's destroy_cm_id of a
 *     listener (iw_destroy_listen: siw drops each connection still in its MPA startup,
 *     siw_cep_put). A SYN after it draws a RST. The peer's rdma_connect ends in
 *     RDMA_CM_EVENT_REJECTED at once (iw_cm: -ECONNRESET/-ECONNREFUSED), not at its MPA
 *     timeout (10 s).
 * Before the fix the exit refused only the requests already reported to the application:
 * those whose MPA Request had not arrived, or that the engine had not yet turned into a
 * CONNECT_REQUEST the listener's channel held, died with the engine, and their peers
 * waited for their MPA timeout.
 *   exit_unlistens -s ADDR PORT   server: listens on PORT (and PORT+2, the control
 *                                 connection), and returns from main as soon as the
 *                                 client ends the control connection, answering nothing
 *   exit_unlistens -c ADDR PORT   client: ends the control connection and at once starts
 *                                 N connects to PORT, one each 5 ms (all within 20 ms,
 *                                 inside the exit's 50 ms linger): they reach the server
 *                                 while it exits, before and after its requests are
 *                                 refused; wants each refused (REJECTED) within 2 s
 */
#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "exit_unlistens";
#include "contract.h"

#define N 4
#define WITHIN_MS 2000

static int client(const char *a, const char *p)
{
	int port = contract_port(p);
	struct rdma_event_channel *ctl = contract_channel();
	struct rdma_cm_id *cid = contract_control_connection(ctl, a, port + 2, 5000);
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *ids[N];
	for (int k = 0; k < N; k++)
		ids[k] = contract_active(ec, a, port, 5000);
	struct rdma_conn_param cp = contract_conn_param(1, 1, NULL, 0);
	/* The server's go: it exits once this disconnect reaches it. */
	if (rdma_disconnect(cid))
		DIE("rdma_disconnect (the control connection): %s", strerror(errno));
	double t0 = contract_now_ms();
	/* Back to back: the server's exit answers SYNs for its linger (50 ms) only, so none may
	 * come late on a loaded host. */
	for (int k = 0; k < N; k++)
		if (rdma_connect(ids[k], &cp))
			DIE("rdma_connect: %s", strerror(errno));
	int seen[N] = { 0 }, rejected = 0, other = 0;
	double last = 0;
	for (int n = 0; n < N; n++) {
		int left = WITHIN_MS + 1000 - (int)(contract_now_ms() - t0);
		struct rdma_cm_event *ev = contract_next_event(ec, left > 0 ? left : 0);
		if (!ev)
			break;
		double dt = contract_now_ms() - t0;
		for (int k = 0; k < N; k++)
			if (ev->id == ids[k])
				seen[k] = 1;
		if (ev->event == RDMA_CM_EVENT_REJECTED && dt <= WITHIN_MS) {
			rejected++;
			last = dt;
		} else {
			other++;
			printf("request answered by %s (status %d) %.0f ms after the first rdma_connect\n",
			       rdma_event_str(ev->event), ev->status, dt);
		}
		rdma_ack_cm_event(ev);
	}
	int unanswered = 0;
	for (int k = 0; k < N; k++)
		unanswered += !seen[k];
	EXPECT(rejected == N,
	       "rdma_connect(3) to a server that is exiting (its requests not yet reported, or SYNs after its "
	       "exit began): its exit ends each at once, as the kernel's close of its rdma_cm descriptor destroys "
	       "the listening id (got %d of %d REJECTED within %d ms, the last at %.0f ms; %d otherwise, %d with no "
	       "answer)",
	       rejected, N, WITHIN_MS, last, other, unanswered);
	for (int k = 0; k < N; k++) {
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
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *l;
	struct sockaddr_in sa = contract_sockaddr(a, port);
	if (rdma_create_id(ec, &l, NULL, RDMA_PS_TCP) || rdma_bind_addr(l, (struct sockaddr *)&sa) ||
	    rdma_listen(l, 64))
		DIE("listener on %d: %s", port, strerror(errno));
	struct rdma_event_channel *ctl = contract_channel();
	struct rdma_cm_id *cid = contract_control_request(ctl, a, port + 2);
	contract_control_accept(ctl, cid, 10000);
	/* The client's go; its requests are on their way: none will be answered. */
	rdma_ack_cm_event(contract_expect_event(ctl, RDMA_CM_EVENT_DISCONNECTED, 60000));
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, server, client);
}
