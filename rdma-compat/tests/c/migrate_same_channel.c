/*
 * Contract: rdma_migrate_id(3) to the channel the id is already on. rdma-core's librdmacm
 * makes no exception for it: it writes the move to the kernel, whose ucma_migrate_id
 * (drivers/infiniband/core/ucma.c) answers with the events it reported for the id and,
 * since Linux 5.10 (the fix of CVE-2020-36385, which dropped the same-file shortcut),
 * takes the id's pending events off the file's list and splices them back at its tail, and
 * librdmacm then "will block while there are any unacknowledged events on the current event
 * channel" (waits until events_completed reaches events_reported), as for a move to another
 * channel (migrate_waits_ack.c). Before the fix a move to the same channel returned 0 at
 * once, while another thread still held the id's event unacknowledged, and left the
 * pending events where they were.
 * One process, no peer (our own address resolves at once):
 *   migrate_same_channel
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "migrate_same_channel";
#include "contract.h"

static struct rdma_event_channel *ec;
static sem_t taken;
static int acked;

static void hung(int sig)
{
	(void)sig;
	static const char m[] = "FAIL: rdma_migrate_id did not return within 20 s\n";
	if (write(1, m, sizeof m - 1) < 0)
		_exit(3);
	_exit(1);
}

/* Takes the id's event off the channel, holds it unacknowledged for a while, then
 * acknowledges it (marking that first). */
static void *holder(void *arg)
{
	(void)arg;
	struct rdma_cm_event *ev = contract_expect_event(ec, RDMA_CM_EVENT_ADDR_RESOLVED, 30000);
	sem_post(&taken);
	usleep(300000);
	__atomic_store_n(&acked, 1, __ATOMIC_SEQ_CST);
	rdma_ack_cm_event(ev);
	return NULL;
}

static struct rdma_cm_id *resolving(int port)
{
	struct rdma_cm_id *id;
	if (rdma_create_id(ec, &id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id: %s", strerror(errno));
	struct sockaddr_in dst = contract_sockaddr("10.77.0.1", port);
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000))
		DIE("rdma_resolve_addr: %s", strerror(errno));
	return id;
}

int main(void)
{
	signal(SIGALRM, hung);
	alarm(20);
	if (sem_init(&taken, 0, 0))
		DIE("sem_init: %s", strerror(errno));
	ec = contract_channel();
	struct rdma_cm_id *id = resolving(7534);
	pthread_t t;
	if (pthread_create(&t, NULL, holder, NULL))
		DIE("pthread_create");
	while (sem_wait(&taken) && errno == EINTR)
		;
	int r = rdma_migrate_id(id, ec);
	int seen = __atomic_load_n(&acked, __ATOMIC_SEQ_CST);
	EXPECT(r == 0 && seen == 1,
	       "rdma_migrate_id(3) to the id's own channel blocks while the id's event taken from it is "
	       "unacknowledged (returned %d with the event %s)",
	       r, seen ? "acknowledged" : "still unacknowledged");
	pthread_join(t, NULL);
	EXPECT(id->channel == ec, "rdma_migrate_id(3): the id is still on its channel");

	/* Two ids' resolutions pending, a's first: a's move puts its event behind b's. */
	struct rdma_cm_id *a = resolving(7536);
	struct rdma_cm_id *b = resolving(7538);
	if (contract_readable(ec->fd, 5000) != 1)
		DIE("no event pending");
	usleep(100000); /* b's event queued as well */
	r = rdma_migrate_id(a, ec);
	struct rdma_cm_event *first = contract_expect_event(ec, RDMA_CM_EVENT_ADDR_RESOLVED, 5000);
	struct rdma_cm_event *second = contract_expect_event(ec, RDMA_CM_EVENT_ADDR_RESOLVED, 5000);
	EXPECT(r == 0 && first->id == b && second->id == a,
	       "rdma_migrate_id(3) to the same channel moves the id's pending events to its tail, as the "
	       "kernel's ucma_migrate_id splices them (returned %d; first the event of %s)",
	       r, first->id == a ? "the id moved" : first->id == b ? "the other id" : "another id");
	rdma_ack_cm_event(first);
	rdma_ack_cm_event(second);
	alarm(0);
	rdma_destroy_id(a);
	rdma_destroy_id(b);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ec);
	return contract_end();
}
