/*
 * Contract: the connection requests a synchronous listener (rdma_create_ep, RAI_PASSIVE)
 * has not read cost the process no file descriptors. librdmacm gives the new id of such a
 * request a channel of its own only when rdma_get_request(3) reads it (ucma_process_conn_req
 * migrates it to none), and the kernel holds an unread request without a descriptor; before
 * the fix the library made that channel (two descriptors) as each request arrived, so peers
 * that connected to a listener the application served one request at a time (rdma_server's
 * rdma_listen(id, 0): a backlog of 1,024) took up to 2,048 of its descriptors, past the
 * usual limit of 1,024: the application's own open, socket and ibv_create_comp_channel
 * failed with EMFILE.
 * The server keeps what the client does (unread requests), so the client first makes a
 * control connection to PORT + 1 (which the server listens on after PORT), retrying while it
 * is refused; its disconnect of that connection is the server's go.
 *   sync_request_fds -s ADDR PORT   server: a synchronous listener with a backlog of
 *                                          N on PORT, then the control listener on PORT + 1;
 *                                          counts its descriptors before and after the go,
 *                                          then reads the N requests and rejects each with
 *                                          the count's growth as private data
 *   sync_request_fds -c ADDR PORT   client: the control connection, N + 1 connects
 *                                          (one past the backlog is refused: the N wait),
 *                                          the go, the checks
 */
#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "sync_request_fds";
#include "contract.h"

#define WAIT_MS 10000
#define N 4

/* The process's open descriptors (those of /proc/self/fd; the directory's own counts the
 * same each time). */
static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		DIE("opendir /proc/self/fd: %s", strerror(errno));
	int n = 0;
	for (struct dirent *e; (e = readdir(d));)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

static int server(const char *a, const char *p)
{
	struct rdma_cm_id *l = contract_ep(a, p, 1);
	if (rdma_listen(l, N))
		DIE("rdma_listen: %s", strerror(errno));
	struct rdma_event_channel *ctl = contract_channel();
	struct rdma_cm_id *probe = contract_control_request(ctl, a, contract_port(p) + 1);
	/* Counted before the accept: the client connects to PORT only once the control
	 * connection is established. */
	int before = open_fds();
	contract_control_accept(ctl, probe, WAIT_MS);
	/* The go: the client saw the request past the backlog refused, so N wait unread. */
	rdma_ack_cm_event(contract_expect_event(ctl, RDMA_CM_EVENT_DISCONNECTED, 60000));
	int grown = open_fds() - before;
	EXPECT(grown < N,
	       "%d connection requests waiting unread at a synchronous listener hold no descriptors (the process "
	       "has %d more)",
	       N, grown);
	unsigned char said = grown < 0 ? 0 : grown > 255 ? 255 : (unsigned char)grown;
	int got = 0;
	for (; got < N; got++) {
		struct rdma_cm_id *id;
		if (contract_readable(l->channel->fd, WAIT_MS) != 1 || rdma_get_request(l, &id))
			break;
		if (rdma_reject(id, &said, 1))
			DIE("rdma_reject: %s", strerror(errno));
		rdma_destroy_ep(id);
	}
	EXPECT(got == N, "rdma_get_request(3) then reads the %d requests, each on an id of its own (read %d)", N, got);
	rdma_destroy_qp(probe);
	rdma_destroy_id(probe);
	rdma_destroy_ep(l);
	return contract_end();
}

static int client(const char *a, const char *p)
{
	struct rdma_event_channel *ec = contract_channel(), *ctl = contract_channel();
	struct rdma_cm_id *ctl_id = contract_control_connection(ctl, a, contract_port(p) + 1, WAIT_MS);
	/* All resolved before any connects, so that no refusal comes between an id's steps on
	 * the shared channel. */
	struct rdma_cm_id *ids[N + 1];
	struct rdma_conn_param cp = contract_conn_param(1, 1, NULL, 0);
	for (int i = 0; i <= N; i++)
		ids[i] = contract_active(ec, a, contract_port(p), WAIT_MS);
	for (int i = 0; i <= N; i++)
		if (rdma_connect(ids[i], &cp))
			DIE("rdma_connect: %s", strerror(errno));
	/* One of the N + 1 is past the backlog of N: refused once the N wait. */
	struct rdma_cm_event *ev = contract_expect_event(ec, RDMA_CM_EVENT_REJECTED, WAIT_MS);
	rdma_ack_cm_event(ev);
	contract_hang_up(ctl, ctl_id, WAIT_MS);
	/* The server reads the N now and rejects each, saying how many descriptors it had
	 * gained while they waited. */
	int answered = 0, most = 0;
	while (answered < N && (ev = contract_next_event(ec, WAIT_MS))) {
		if (ev->event == RDMA_CM_EVENT_REJECTED) {
			answered++;
			int said = ev->param.conn.private_data_len >= 1 && ev->param.conn.private_data
					   ? *(const unsigned char *)ev->param.conn.private_data
					   : 255;
			if (said > most)
				most = said;
		}
		rdma_ack_cm_event(ev);
	}
	EXPECT(answered == N && most < N,
	       "%d connection requests a synchronous listener had not read held none of the server's descriptors "
	       "(%d answered; the server had %d more descriptors while they waited)",
	       N, answered, most);
	for (int i = 0; i <= N; i++) {
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
