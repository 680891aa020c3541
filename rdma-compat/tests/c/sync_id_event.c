/*
 * Contract: a synchronous id (no event channel: rdma_create_ep) references the event of
 * its last call in id->event, as librdmacm's does. rdma_get_request(3): "the new
 * rdma_cm_id will reference event information associated with the request until the user
 * calls rdma_reject, rdma_accept, or rdma_destroy_id" (for a description of the event data,
 * see rdma_get_cm_event(3)); after a synchronous rdma_connect or rdma_accept it is the
 * ESTABLISHED, where the active side reads the private data of the accept. Before the fix
 * id->event stayed NULL (an application reading the peer's private data there crashed).
 *   sync_id_event -s ADDR PORT   server: rdma_get_request, checks, accepts with "srv"
 *   sync_id_event -c ADDR PORT   client: connects with "cli", checks
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

static const char *contract_name = "sync_id_event";
#include "contract.h"

/* Whether ev is an event of kind `want` carrying the four octets `pd` as private data. */
static int carries(struct rdma_cm_event *ev, int want, const char *pd)
{
	return ev && (int)ev->event == want && ev->param.conn.private_data_len >= 4 && ev->param.conn.private_data &&
	       !memcmp(ev->param.conn.private_data, pd, 4);
}

static const char *what(struct rdma_cm_event *ev)
{
	return ev ? rdma_event_str(ev->event) : "NULL";
}

static int server(const char *a, const char *p)
{
	struct rdma_cm_id *l, *id = contract_request(a, p, NULL, NULL, NULL, NULL, &l);
	EXPECT(carries(id->event, RDMA_CM_EVENT_CONNECT_REQUEST, "cli") && id->event->id == id,
	       "rdma_get_request(3): the new id references the request's event, with the peer's private data (id->event: %s)",
	       what(id->event));
	struct rdma_conn_param cp = contract_conn_param(1, 1, "srv", 4);
	if (rdma_accept(id, &cp))
		DIE("rdma_accept: %s", strerror(errno));
	EXPECT(id->event && id->event->event == RDMA_CM_EVENT_ESTABLISHED,
	       "rdma_accept on a synchronous id: id->event is the ESTABLISHED (id->event: %s)", what(id->event));
	sleep(3);
	rdma_destroy_ep(id);
	rdma_destroy_ep(l);
	return contract_end();
}

static int client(const char *a, const char *p)
{
	struct rdma_cm_id *id = contract_ep(a, p, 0);
	EXPECT(id->event && id->event->event == RDMA_CM_EVENT_ROUTE_RESOLVED,
	       "rdma_create_ep on a synchronous id: id->event is the ROUTE_RESOLVED of its last step (id->event: %s)",
	       what(id->event));
	struct rdma_conn_param cp = contract_conn_param(1, 1, "cli", 4);
	if (rdma_connect(id, &cp))
		DIE("rdma_connect: %s", strerror(errno));
	EXPECT(carries(id->event, RDMA_CM_EVENT_ESTABLISHED, "srv"),
	       "rdma_connect on a synchronous id: id->event is the ESTABLISHED, with the peer's private data (id->event: %s)",
	       what(id->event));
	rdma_disconnect(id);
	rdma_destroy_ep(id);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, server, client);
}
