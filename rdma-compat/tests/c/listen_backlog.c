/*
 * Contract: a listener's backlog bounds the connection requests waiting unread in its
 * channel, and a request that ends before the application reads it is taken back.
 *   rdma_listen(3) with a backlog of 2, the server reading no event for a while: of four
 *     connects, two wait and two are refused at once (REJECTED at the client), as the
 *     kernel's ucma drops a CONNECT_REQUEST past the backlog. Before, every request made a
 *     new id and event, without bound, for an application that did not read.
 *   One of the two waiting connects is given up by its client (its QP moved to ERR: the
 *     connection is reset): its CONNECT_REQUEST leaves the server's channel unread, so the
 *     server finds one request, not two (before, it found the other too and could only
 *     fail to accept it).
 * The server keeps what the client does in its state, so the client may not simply be run
 * again when it found nobody listening (as scripts/test-rdma-compat.sh does for programs
 * that did): it first connects to a control listener on PORT + 1, which the server makes
 * after the one under test, retrying while it is refused; its disconnect of that
 * connection is the server's go to read.
 *   listen_backlog -s ADDR PORT   server: listens with backlog 2 on PORT, then on PORT + 1;
 *                                 reads PORT's events only once the control connection ends
 *   listen_backlog -c ADDR PORT   client: the control connection, the four connects and the
 *                                 checks
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "listen_backlog";
#include "contract.h"

#define WAIT_MS 10000
#define N 4

static int server(const char *a, const char *p)
{
	struct rdma_event_channel *ec = contract_channel(), *ctl = contract_channel();
	struct rdma_cm_id *l;
	struct sockaddr_in sa = contract_sockaddr(a, contract_port(p));
	if (rdma_create_id(ec, &l, NULL, RDMA_PS_TCP) || rdma_bind_addr(l, (struct sockaddr *)&sa) ||
	    rdma_listen(l, 2))
		DIE("listener: %s", strerror(errno));
	/* The control connection on PORT + 1 (the client's proof that PORT listens), on a
	 * channel of its own; its end is the client's go. Until then nothing on ec is read. */
	contract_control_accept(ctl, contract_control_request(ctl, a, contract_port(p) + 1), WAIT_MS);
	rdma_ack_cm_event(contract_expect_event(ctl, RDMA_CM_EVENT_DISCONNECTED, 60000));
	struct rdma_cm_event *ev;
	int requests = 0;
	struct rdma_cm_id *child = NULL;
	while ((ev = contract_next_event(ec, 1000))) {
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
			requests++;
			if (!child)
				child = ev->id;
			else
				rdma_reject(ev->id, NULL, 0);
		}
		rdma_ack_cm_event(ev);
	}
	EXPECT(requests == 1,
	       "of four connects to a backlog of 2, one given up before the server read: one CONNECT_REQUEST "
	       "waits (got %d)",
	       requests);
	if (child) {
		contract_qp_on(child);
		struct rdma_conn_param cp = contract_conn_param(1, 1, NULL, 0);
		if (rdma_accept(child, &cp))
			DIE("rdma_accept: %s", strerror(errno));
		rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS));
	}
	/* The client's checks end with its disconnect. */
	ev = contract_next_event(ec, WAIT_MS);
	if (ev)
		rdma_ack_cm_event(ev);
	return contract_end();
}

static int client(const char *a, const char *p)
{
	struct rdma_event_channel *ec = contract_channel(), *ctl = contract_channel();
	struct rdma_cm_id *ctl_id = contract_control_connection(ctl, a, contract_port(p) + 1, WAIT_MS);
	/* All four resolved before any connects, so that no refusal comes between an id's
	 * steps on the shared channel. */
	struct rdma_cm_id *ids[N];
	struct rdma_conn_param cp = contract_conn_param(1, 1, NULL, 0);
	for (int i = 0; i < N; i++)
		ids[i] = contract_active(ec, a, contract_port(p), WAIT_MS);
	for (int i = 0; i < N; i++)
		if (rdma_connect(ids[i], &cp))
			DIE("rdma_connect: %s", strerror(errno));
	int rejected[N] = { 0 }, nrej = 0;
	struct rdma_cm_event *ev;
	while (nrej < 2 && (ev = contract_next_event(ec, WAIT_MS))) {
		for (int i = 0; i < N; i++)
			if (ev->id == ids[i] && ev->event == RDMA_CM_EVENT_REJECTED && ev->status == -ECONNREFUSED) {
				rejected[i] = 1;
				nrej++;
			}
		rdma_ack_cm_event(ev);
	}
	/* No more within a second: the other two wait for the server. */
	ev = contract_next_event(ec, 1000);
	EXPECT(nrej == 2 && !ev,
	       "of four connects to a listener with a backlog of 2 whose application reads nothing, two are "
	       "refused at once: REJECTED, -ECONNREFUSED (got %d, then %s)",
	       nrej, ev ? rdma_event_str(ev->event) : "nothing");
	if (ev || nrej != 2)
		return contract_end();
	/* Give up the first one still waiting; keep the other. */
	int gone = -1, kept = -1;
	for (int i = 0; i < N; i++)
		if (!rejected[i]) {
			if (gone < 0)
				gone = i;
			else if (kept < 0)
				kept = i;
		}
	struct ibv_qp_attr err = { .qp_state = IBV_QPS_ERR };
	if (ibv_modify_qp(ids[gone]->qp, &err, IBV_QP_STATE))
		DIE("ibv_modify_qp to ERR: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_CONNECT_ERROR, WAIT_MS));
	/* The server's connection sees the reset before the go, which comes after it on the
	 * same link. */
	usleep(200000);
	contract_hang_up(ctl, ctl_id, WAIT_MS);
	/* The server reads now and accepts what it finds. */
	ev = contract_next_event(ec, WAIT_MS);
	EXPECT(ev && ev->id == ids[kept] && ev->event == RDMA_CM_EVENT_ESTABLISHED,
	       "the connect kept is accepted once the server reads (got %s)", ev ? rdma_event_str(ev->event) : "no event");
	if (ev)
		rdma_ack_cm_event(ev);
	rdma_disconnect(ids[kept]);
	for (int i = 0; i < N; i++) {
		rdma_destroy_qp(ids[i]);
		rdma_destroy_id(ids[i]);
	}
	rdma_destroy_id(ctl_id);
	rdma_destroy_event_channel(ctl);
	rdma_destroy_event_channel(ec);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, server, client);
}
