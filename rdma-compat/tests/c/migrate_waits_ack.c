/*
 * Contract: rdma_migrate_id(3): "This call will block while there are any unacknowledged
 * events on the current event channel" (rdma-core's librdmacm waits until the id's
 * events_completed reaches the events_reported the kernel answers the move with), so that
 * no thread is still handling one of the id's events from the old channel when it returns.
 * Here a second thread holds the id's ADDR_RESOLVED, taken from the old channel, while the
 * main thread migrates the id: the migrate returns only after the event is acknowledged.
 * Before the fix it returned at once. An id whose events are all acknowledged then
 * migrates back without waiting.
 * One process, no peer (our own address resolves at once):
 *   migrate_waits_ack
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "migrate_waits_ack";
#include "contract.h"

static struct rdma_event_channel *ec1;
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

/* Takes the id's event off the old channel, holds it unacknowledged for a while, then
 * acknowledges it (marking that first). */
static void *holder(void *arg)
{
	(void)arg;
	struct rdma_cm_event *ev = contract_expect_event(ec1, RDMA_CM_EVENT_ADDR_RESOLVED, 30000);
	sem_post(&taken);
	usleep(300000);
	__atomic_store_n(&acked, 1, __ATOMIC_SEQ_CST);
	rdma_ack_cm_event(ev);
	return NULL;
}

int main(void)
{
	signal(SIGALRM, hung);
	alarm(20);
	if (sem_init(&taken, 0, 0))
		DIE("sem_init: %s", strerror(errno));
	ec1 = contract_channel();
	struct rdma_event_channel *ec2 = contract_channel();
	struct rdma_cm_id *id;
	if (rdma_create_id(ec1, &id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id: %s", strerror(errno));
	struct sockaddr_in dst = contract_sockaddr("10.77.0.1", 7530);
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000))
		DIE("rdma_resolve_addr: %s", strerror(errno));
	pthread_t t;
	if (pthread_create(&t, NULL, holder, NULL))
		DIE("pthread_create");
	while (sem_wait(&taken) && errno == EINTR)
		;
	int r = rdma_migrate_id(id, ec2);
	int seen = __atomic_load_n(&acked, __ATOMIC_SEQ_CST);
	EXPECT(r == 0 && seen == 1,
	       "rdma_migrate_id(3): blocks while the id's event taken from its current channel is unacknowledged "
	       "(returned %d with the event %s)",
	       r, seen ? "acknowledged" : "still unacknowledged");
	pthread_join(t, NULL);
	EXPECT(id->channel == ec2, "rdma_migrate_id(3): the id is on the new channel");
	r = rdma_migrate_id(id, ec1);
	EXPECT(r == 0 && id->channel == ec1,
	       "rdma_migrate_id(3): an id whose events are all acknowledged migrates back (got %d)", r);
	alarm(0);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ec2);
	rdma_destroy_event_channel(ec1);
	return contract_end();
}
