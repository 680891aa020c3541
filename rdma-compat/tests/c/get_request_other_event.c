/*
 * Contract: rdma_get_request(3) on a synchronous id takes the id's next event; rdma-core's
 * librdmacm (cma.c, rdma_get_request) answers one that is not a CONNECT_REQUEST with -1
 * (errno ECONNREFUSED for a REJECTED, the status's errno for an error status, else
 * EINVAL) and keeps it in id->event. Here the id is a synchronous connection the peer
 * closes, so the event is its DISCONNECTED: the call fails with EINVAL and id->event is
 * the DISCONNECTED, after which rdma_disconnect returns at once (the connection's end was
 * taken). Before the fix the event was dropped and the call waited forever.
 *   get_request_other_event -s ADDR PORT   server: accepts one connection and
 *                                                  disconnects it a second later
 *   get_request_other_event -c ADDR PORT   client: the checks
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "get_request_other_event";
#include "contract.h"

static void hung(int sig)
{
	(void)sig;
	static const char m[] = "FAIL: rdma_get_request did not return within 20 s of the peer's disconnect\n";
	if (write(1, m, sizeof m - 1) < 0)
		_exit(3);
	_exit(1);
}

static int server(const char *a, const char *p)
{
	struct rdma_cm_id *l, *id = contract_request(a, p, NULL, NULL, NULL, NULL, &l);
	if (rdma_accept(id, NULL))
		DIE("rdma_accept: %s", strerror(errno));
	sleep(1);
	if (rdma_disconnect(id))
		DIE("rdma_disconnect: %s", strerror(errno));
	rdma_destroy_ep(id);
	rdma_destroy_ep(l);
	return contract_end();
}

static int client(const char *a, const char *p)
{
	struct rdma_cm_id *id = contract_connect(a, p);
	signal(SIGALRM, hung);
	alarm(20);
	struct rdma_cm_id *got = NULL;
	errno = 0;
	int r = rdma_get_request(id, &got), e = errno;
	EXPECT(r == -1 && e == EINVAL && got == NULL,
	       "rdma_get_request(3) on a synchronous id whose next event is its DISCONNECTED: -1, errno EINVAL (got %d: %s)",
	       r, r ? strerror(e) : "0");
	EXPECT(id->event && id->event->event == RDMA_CM_EVENT_DISCONNECTED,
	       "rdma_get_request(3): the event taken is kept in id->event (got %s)",
	       id->event ? rdma_event_str(id->event->event) : "none");
	r = rdma_disconnect(id);
	EXPECT(r == 0, "rdma_disconnect(3) after the DISCONNECTED was taken: 0 at once (got %d: %s)", r,
	       r ? strerror(errno) : "0");
	alarm(0);
	rdma_destroy_ep(id);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, server, client);
}
