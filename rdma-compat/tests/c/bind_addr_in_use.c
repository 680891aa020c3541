/*
 * Contract: rdma_bind_addr(3) answers as the kernel's rdma_cm does (cma.c, rdma_bind_addr:
 * the id must be idle, `cma_comp_exch(RDMA_CM_IDLE, RDMA_CM_ADDR_BOUND)`, else -EINVAL;
 * cma_get_port/cma_use_port: a port another id is bound to, without SO_REUSEADDR, is
 * -EADDRINUSE):
 * - binding a second id to a port an id is bound to fails with EADDRINUSE, whether that id
 *   only bound it or also listens on it;
 * - binding an id that is bound already (to a port or to port 0) fails with EINVAL;
 * - the port is free again once the id bound to it is destroyed;
 * - ids that set RDMA_OPTION_ID_REUSEADDR share a port none of them listens on.
 * Before the fix both binds returned 0: the conflict surfaced only at rdma_listen(3) (or
 * not at all for an active id), and a second bind of a listening id moved its reported
 * address away from the port it listens on.
 *   bind_addr_in_use
 */
#include <errno.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "bind_addr_in_use";
#include "contract.h"

#define PORT 7560

static struct rdma_cm_id *new_id(struct rdma_event_channel *ec)
{
	struct rdma_cm_id *id;
	if (rdma_create_id(ec, &id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id: %s", strerror(errno));
	return id;
}

/* rdma_bind_addr(id, 10.77.0.1:port): 0, or the errno of its failure. */
static int bind_to(struct rdma_cm_id *id, int port)
{
	struct sockaddr_in sa = contract_sockaddr("10.77.0.1", port);
	return rdma_bind_addr(id, (struct sockaddr *)&sa) ? errno : 0;
}

int main(void)
{
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *a = new_id(ec), *b = new_id(ec), *c = new_id(ec);

	if (bind_to(a, PORT))
		DIE("rdma_bind_addr to port %d: %s", PORT, strerror(errno));
	int e = bind_to(b, PORT);
	EXPECT(e == EADDRINUSE, "rdma_bind_addr(3) to a port another id is bound to fails with EADDRINUSE (errno %d)", e);

	e = bind_to(a, PORT + 1);
	EXPECT(e == EINVAL, "rdma_bind_addr(3) of an id bound already fails with EINVAL (errno %d)", e);
	EXPECT(rdma_get_src_port(a) == htons(PORT), "the failed second bind leaves the id on its port (%u)",
	       ntohs(rdma_get_src_port(a)));

	if (rdma_listen(a, 4))
		DIE("rdma_listen: %s", strerror(errno));
	e = bind_to(c, PORT);
	EXPECT(e == EADDRINUSE, "rdma_bind_addr(3) to a port another id listens on fails with EADDRINUSE (errno %d)", e);

	if (bind_to(c, 0))
		DIE("rdma_bind_addr to port 0: %s", strerror(errno));
	e = bind_to(c, PORT + 2);
	EXPECT(e == EINVAL, "rdma_bind_addr(3) of an id bound to port 0 already fails with EINVAL (errno %d)", e);

	rdma_destroy_id(a);
	e = bind_to(b, PORT);
	EXPECT(e == 0, "the port is free again once the id bound to it is destroyed (errno %d)", e);
	if (rdma_listen(b, 4))
		DIE("rdma_listen on the freed port: %s", strerror(errno));

	struct rdma_cm_id *r1 = new_id(ec), *r2 = new_id(ec), *r3 = new_id(ec);
	int on = 1;
	if (rdma_set_option(r1, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &on, sizeof on) ||
	    rdma_set_option(r2, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &on, sizeof on) ||
	    rdma_set_option(r3, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &on, sizeof on))
		DIE("rdma_set_option REUSEADDR: %s", strerror(errno));
	if (bind_to(r1, PORT + 3))
		DIE("rdma_bind_addr with REUSEADDR: %s", strerror(errno));
	e = bind_to(r2, PORT + 3);
	EXPECT(e == 0, "with RDMA_OPTION_ID_REUSEADDR two ids bind one port (errno %d)", e);
	e = bind_to(r3, PORT); /* b listens there */
	EXPECT(e == EADDRINUSE, "... but not one a listener has (errno %d)", e);

	rdma_destroy_id(r1);
	rdma_destroy_id(r2);
	rdma_destroy_id(r3);
	rdma_destroy_id(b);
	rdma_destroy_id(c);
	rdma_destroy_event_channel(ec);
	return contract_end();
}
