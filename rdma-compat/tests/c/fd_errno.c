/*
 * Contract: a channel or CQ the system or the device refuses fails the call with the errno
 * of what refused it, as rdma-core v44 passes it on (the man pages: "NULL ... errno set",
 * "-1 ... errno set"):
 *   - ibv_create_comp_channel(3) with the process's descriptors used up: EMFILE, the
 *     kernel's (uverbs' get_unused_fd_flags), which libibverbs' execute_cmd_write leaves.
 *     Before, EINVAL, an input error the caller never made.
 *   - rdma_create_event_channel(3) likewise: EMFILE, the errno of librdmacm's open of
 *     the rdma_cm device. Before, ENOMEM.
 *   - rdma_migrate_id(3) to a NULL channel (a new synchronous one): EMFILE, as librdmacm
 *     makes it with rdma_create_event_channel and returns -1 with its errno. Before, ENOMEM.
 *   - rdma_create_id(3) with a NULL channel: ENOMEM, as librdmacm's rdma_create_id2
 *     answers any failure of ucma_alloc_id (unchanged).
 *   - rdma_create_qp(3) making its own CQs (send_cq and recv_cq NULL): a receive CQ deeper
 *     than max_cqe is EINVAL, ibv_create_cq's errno, and with the descriptors used up
 *     EMFILE, ibv_create_comp_channel's: librdmacm's ucma_create_cqs returns -1 and leaves
 *     libibverbs' errno ("librdmacm: Don't overwrite errno returned from libibverbs",
 *     rdma-core v33). Before, ENOMEM either way. The id keeps no CQ, and the same call
 *     succeeds once descriptors are free again.
 * One process, no peer:
 *   fd_errno
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <netinet/in.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "fd_errno";
#include "contract.h"

static int held[4096], nheld;

/* Lowers the soft descriptor limit to just above the highest descriptor open now and fills
 * every free one below it: the next descriptor the process asks for is EMFILE. */
static void use_up_descriptors(struct rlimit *saved)
{
	int top = dup(0);
	if (top < 0 || getrlimit(RLIMIT_NOFILE, saved))
		DIE("dup, getrlimit: %s", strerror(errno));
	struct rlimit low = *saved;
	low.rlim_cur = (rlim_t)top + 1;
	if (setrlimit(RLIMIT_NOFILE, &low))
		DIE("setrlimit: %s", strerror(errno));
	held[nheld++] = top;
	int fd;
	while (nheld < (int)(sizeof held / sizeof held[0]) && (fd = dup(0)) >= 0)
		held[nheld++] = fd;
	if (dup(0) >= 0 || errno != EMFILE)
		DIE("the descriptors were not used up: %s", strerror(errno));
}

static void free_descriptors(const struct rlimit *saved)
{
	while (nheld)
		close(held[--nheld]);
	if (setrlimit(RLIMIT_NOFILE, saved))
		DIE("setrlimit back: %s", strerror(errno));
}

int main(void)
{
	struct ibv_context *ctx = contract_open_device();
	struct ibv_device_attr da;
	if (ibv_query_device(ctx, &da))
		DIE("ibv_query_device");
	struct rdma_event_channel *ec = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	if (!ec || rdma_create_id(ec, &id, NULL, RDMA_PS_TCP))
		DIE("event channel, id: %s", strerror(errno));
	struct sockaddr_in any = { .sin_family = AF_INET };
	if (rdma_bind_addr(id, (struct sockaddr *)&any))
		DIE("rdma_bind_addr: %s", strerror(errno));

	struct ibv_qp_init_attr qa = { .cap = { .max_send_wr = 4, .max_recv_wr = (uint32_t)da.max_cqe + 1,
						 .max_send_sge = 1, .max_recv_sge = 1 },
				       .qp_type = IBV_QPT_RC };
	errno = 0;
	int r = rdma_create_qp(id, NULL, &qa);
	int e = errno;
	EXPECT(r == -1 && e == EINVAL && !id->qp && !id->recv_cq && !id->send_cq,
	       "rdma_create_qp(3): a receive CQ of max_cqe + 1 (%d) entries is refused with ibv_create_cq's EINVAL, "
	       "no CQ left on the id (got %d, %s)",
	       da.max_cqe + 1, r, strerror(e));

	struct rlimit saved;
	use_up_descriptors(&saved);
	errno = 0;
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	e = errno;
	EXPECT(!ch && e == EMFILE, "ibv_create_comp_channel(3) without a free descriptor: NULL, EMFILE (got %s, %s)",
	       ch ? "a channel" : "NULL", strerror(e));
	errno = 0;
	struct rdma_event_channel *ec2 = rdma_create_event_channel();
	e = errno;
	EXPECT(!ec2 && e == EMFILE, "rdma_create_event_channel(3) without a free descriptor: NULL, EMFILE (got %s, %s)",
	       ec2 ? "a channel" : "NULL", strerror(e));
	errno = 0;
	r = rdma_migrate_id(id, NULL);
	e = errno;
	EXPECT(r == -1 && e == EMFILE && id->channel == ec,
	       "rdma_migrate_id(3) to a new channel without a free descriptor: -1, EMFILE, the id left on its "
	       "channel (got %d, %s)",
	       r, strerror(e));
	struct rdma_cm_id *sid = NULL;
	errno = 0;
	r = rdma_create_id(NULL, &sid, NULL, RDMA_PS_TCP);
	e = errno;
	EXPECT(r == -1 && e == ENOMEM,
	       "rdma_create_id(3) of a synchronous id without a free descriptor: -1, ENOMEM as librdmacm answers "
	       "(got %d, %s)",
	       r, strerror(e));
	qa.cap.max_recv_wr = 4;
	errno = 0;
	r = rdma_create_qp(id, NULL, &qa);
	e = errno;
	free_descriptors(&saved);
	EXPECT(r == -1 && e == EMFILE && !id->qp && !id->recv_cq && !id->send_cq,
	       "rdma_create_qp(3) making its CQs without a free descriptor: -1, ibv_create_comp_channel's EMFILE, no "
	       "CQ left on the id (got %d, %s)",
	       r, strerror(e));

	r = rdma_create_qp(id, NULL, &qa);
	EXPECT(r == 0 && id->qp && id->recv_cq && id->send_cq,
	       "rdma_create_qp(3): the same call succeeds with descriptors free (got %d, %s)", r, r ? strerror(errno) : "");
	if (!r)
		rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ec);
	return contract_end();
}
