/*
 * What the contract checks (rdma-compat/tests/c/<contract>.c, run by
 * scripts/test-rdma-compat.sh) share: each check is named after the man page clause it
 * tests and prints "ok: <clause> (<what was seen>)" or "FAIL: ..."; the program ends with
 * "<name>: all checks passed" and exit 0, or "<name>: N checks failed" and exit 1. A step
 * a check needs that does not work exits 2 at once (DIE): nothing is ever skipped.
 */
#ifndef CONTRACT_H
#define CONTRACT_H
#include <stdio.h>
#include <stdlib.h>

static int contract_failed, contract_run;
#define DIE(...) do { fprintf(stderr, "%s: cannot run: ", contract_name); fprintf(stderr, __VA_ARGS__); \
	fputc('\n', stderr); printf("%s: a check could not run\n", contract_name); exit(2); } while (0)
#define EXPECT(c, ...) do { contract_run++; if (c) printf("ok: "); else { printf("FAIL: "); contract_failed++; } \
	printf(__VA_ARGS__); putchar('\n'); fflush(stdout); } while (0)

static int contract_end(void)
{
	if (contract_failed) {
		printf("%s: %d of %d checks failed\n", contract_name, contract_failed, contract_run);
		return 1;
	}
	printf("%s: all checks passed\n", contract_name);
	return 0;
}
#endif
