/*
 * Contract: ibv_reg_mr(3) registers only memory the process has, with the access it asks
 * for, as the kernel's ib_umem_get checks when it pins the pages: a range that wraps the
 * address space fails with EINVAL; one with a page not mapped, or read-only while the
 * region may be written (IBV_ACCESS_LOCAL_WRITE, which remote write and atomics need),
 * fails with EFAULT. Before the fix each of these registered, and the first placement into
 * the read-only page (a receive a peer's Send filled) killed the process with SIGSEGV.
 * One process, no peer:
 *   reg_mr_fault
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <infiniband/verbs.h>

static const char *contract_name = "reg_mr_fault";
#include "contract.h"

/* ibv_reg_mr of len octets at addr with access acc: NULL with errno want, or (want 0) an MR. */
static void reg(struct ibv_pd *pd, void *addr, size_t len, int acc, int want, const char *what)
{
	errno = 0;
	struct ibv_mr *mr = ibv_reg_mr(pd, addr, len, acc);
	int e = errno;
	if (want)
		EXPECT(!mr && e == want, "ibv_reg_mr(3): %s fails with %s (got %s)", what, strerror(want),
		       mr ? "an MR" : strerror(e));
	else
		EXPECT(mr != NULL, "ibv_reg_mr(3): %s registers (got %s)", what, mr ? "an MR" : strerror(e));
	if (mr)
		ibv_dereg_mr(mr);
}

int main(void)
{
	struct ibv_context *ctx = contract_open_device();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd)
		DIE("ibv_alloc_pd: %s", strerror(errno));
	const size_t pg = 4096;
	const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	/* Three pages: read-write, read-only, then unmapped. */
	char *m = mmap(NULL, 3 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED || mprotect(m + pg, pg, PROT_READ) || munmap(m + 2 * pg, pg))
		DIE("mmap, mprotect, munmap: %s", strerror(errno));
	reg(pd, m, pg, rw, 0, "a read-write page, for writing");
	reg(pd, m + pg, pg, 0, 0, "a read-only page, for local reads only");
	reg(pd, m + pg, pg, IBV_ACCESS_REMOTE_READ, 0, "a read-only page, for remote reads");
	reg(pd, m + pg, pg, rw, EFAULT, "a read-only page, for writing");
	reg(pd, m, 2 * pg, IBV_ACCESS_LOCAL_WRITE, EFAULT, "a read-write page and a read-only one, for writing");
	reg(pd, m + 2 * pg, pg, 0, EFAULT, "an unmapped page");
	reg(pd, m + pg, 2 * pg, 0, EFAULT, "a read-only page and an unmapped one");
	reg(pd, (void *)(uintptr_t)0x1000, pg, 0, EFAULT, "page 0x1000 (never mapped)");
	reg(pd, (void *)(uintptr_t)0xfffffffffffff000ull, 2 * pg, 0, EINVAL, "a range that wraps the address space");
	munmap(m, 2 * pg);
	ibv_dealloc_pd(pd);
	return contract_end();
}
