/*
 * Contract: rdma_disconnect(3) on ids in each state, as librdmacm and the kernel's rdma_cm
 * answer it on iWARP (librdmacm/cma.c rdma_disconnect, ucma_complete; the kernel's
 * rdma_disconnect is EINVAL without an iWARP CM id, which only a connection, a received
 * request or a listen makes):
 *   - an id that never started a connection (no device, or address and route resolved
 *     and a QP made but never connected) and a listening id: -1 with errno EINVAL. Before
 *     the fix the id with a QP answered 0.
 *   - a synchronous id (rdma_create_ep): the call "waits for the disconnect" (librdmacm's
 *     ucma_complete) and then holds the DISCONNECTED in id->event; before the fix it
 *     returned at once, id->event still the ESTABLISHED of rdma_connect. A second call on
 *     the closed connection returns 0 without waiting.
 *   disconnect_states -s ADDR PORT   server: accepts one connection (contract_serve)
 *   disconnect_states -c ADDR PORT   client: the checks (and listens on PORT+1)
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "disconnect_states";
#include "contract.h"

#define WAIT_MS 30000

static void hung(int sig)
{
	(void)sig;
	static const char m[] = "FAIL: rdma_disconnect did not return within 20 s\n";
	if (write(1, m, sizeof m - 1) < 0)
		_exit(3);
	_exit(1);
}

/* rdma_disconnect(id) is refused with EINVAL; `what` names the id. */
static void refused(struct rdma_cm_id *id, const char *what)
{
	errno = 0;
	int r = rdma_disconnect(id), e = errno;
	EXPECT(r == -1 && e == EINVAL, "rdma_disconnect of %s: EINVAL (got %d: %s)", what, r, r ? strerror(e) : "0");
}

static int client(const char *a, const char *p)
{
	int port = contract_port(p);
	struct rdma_event_channel *ec = contract_channel();

	struct rdma_cm_id *fresh;
	if (rdma_create_id(ec, &fresh, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id: %s", strerror(errno));
	refused(fresh, "a new id");
	rdma_destroy_id(fresh);

	/* Resolved, with a QP, never connected (aimed at PORT+1, where nobody listens). */
	struct rdma_cm_id *idle = contract_active(ec, a, port + 1, WAIT_MS);
	refused(idle, "an id with a QP that never connected");
	rdma_destroy_qp(idle);
	rdma_destroy_id(idle);

	struct rdma_cm_id *l = contract_listener(ec, "0.0.0.0", port + 1);
	refused(l, "a listening id");
	rdma_destroy_id(l);

	/* A synchronous connected id. */
	struct rdma_cm_id *id = contract_connect(a, p);
	if (!id->event || id->event->event != RDMA_CM_EVENT_ESTABLISHED)
		DIE("rdma_connect on a synchronous id left no ESTABLISHED in id->event");
	signal(SIGALRM, hung);
	alarm(20);
	int r = rdma_disconnect(id), e = errno;
	alarm(0);
	EXPECT(r == 0 && id->event && id->event->event == RDMA_CM_EVENT_DISCONNECTED && id->event->id == id,
	       "rdma_disconnect on a synchronous id waits for the DISCONNECTED and holds it in id->event "
	       "(returned %d%s%s, id->event: %s)",
	       r, r ? ": " : "", r ? strerror(e) : "", id->event ? rdma_event_str(id->event->event) : "NULL");
	alarm(20);
	r = rdma_disconnect(id), e = errno;
	alarm(0);
	EXPECT(r == 0, "rdma_disconnect again on the closed connection returns 0 at once (got %d: %s)", r,
	       r ? strerror(e) : "0");
	rdma_destroy_ep(id);
	rdma_destroy_event_channel(ec);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, contract_serve, client);
}
