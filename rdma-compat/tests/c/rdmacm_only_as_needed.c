/*
 * Contract: a program that calls only rdma_* functions, linked as Debian's gcc links by
 * default (-Wl,--as-needed, so libibverbs.so.1 is not among its own DT_NEEDED entries),
 * loads and runs: librdmacm.so.1 itself needs libibverbs.so.1, as Debian's does. Before
 * the fix it stopped at the first call with "symbol lookup error: librdmacm.so.1:
 * undefined symbol: __wc_rdma_create_event_channel". One process, no peer:
 *   rdmacm_only_as_needed
 */
#include <errno.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "rdmacm_only_as_needed";
#include "contract.h"

int main(void)
{
	struct rdma_event_channel *ec = rdma_create_event_channel();
	struct rdma_cm_id *id;
	if (!ec || rdma_create_id(ec, &id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_event_channel/rdma_create_id: %s", strerror(errno));
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(7999) };
	inet_pton(AF_INET, "10.77.0.1", &dst.sin_addr);
	int r = rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000);
	struct rdma_cm_event *ev = NULL;
	int g = r == 0 ? rdma_get_cm_event(ec, &ev) : -1;
	EXPECT(r == 0 && g == 0 && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED,
	       "rdma_cm(7): a program of rdma_* calls only, linked --as-needed, loads and resolves an address (resolve %d, event %s)",
	       r, g == 0 ? rdma_event_str(ev->event) : strerror(errno));
	if (g == 0)
		rdma_ack_cm_event(ev);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ec);
	return contract_end();
}
